"""Native RPM v4 writer and reader, in rpmpack's small separate parts, each usable and
testable alone:

  tags        Tag / SigTag / TYPE_* and file flags (rpm's rpmtag.h)
  header      encode_header() / decode_header(): index, data store, region tag
  cpio        CpioWriter and iter_cpio(): "newc" and rpm's stripped "07070X" form
  signature   the lead and the fixed-size signature header
  relations   sense flags, relation text <-> (name, flags, version), split_evr()
  read        read_rpm(), the payload stream, replace_signature()
  record      package_from_header(): the one record the repodata indexer and verify read
  spec        parse_spec(): the rendered spec text -> preamble, relations, scripts
  write       write_rpm(): a PackageSpec -> a streamed .rpm
  repodata    publish_dnf(): the DNF repository's metadata (repodata/), RPM headers signed
  repository  REPOSITORY: the format's Repository (rocpkg.formats.plugin)

  plugin      FORMAT: what the rest of rocpkg asks of the format (rocpkg.formats.registry)

This package re-exports what callers use, lazily: registering the format loads only its
light description, not the writer."""
from __future__ import annotations

import importlib

_EXPORTS = {"CpioWriter": "cpio", "iter_cpio": "cpio", "skip_cpio_pad": "cpio", "DecodedHeader": "header",
            "decode_header": "header", "encode_header": "header", "RpmInfo": "read",
            "open_payload_stream": "read", "read_rpm": "read", "replace_signature": "read",
            "RpmFile": "record", "RpmPackageRecord": "record", "package_from_header": "record",
            "RPMSENSE_ANY": "relations", "RPMSENSE_EQUAL": "relations", "RPMSENSE_GREATER":
            "relations", "RPMSENSE_LESS": "relations", "RPMSENSE_RPMLIB": "relations",
            "format_relation": "relations", "parse_relation": "relations", "split_evr": "relations",
            "LEAD_SIZE": "signature", "encode_signature": "signature", "ParsedSpec": "spec",
            "parse_spec": "spec", "RPMFILE_GHOST": "tags", "TYPE_BIN": "tags", "TYPE_INT16": "tags",
            "TYPE_INT32": "tags", "TYPE_INT64": "tags", "TYPE_STRING": "tags", "TYPE_STRING_ARRAY":
            "tags", "SigTag": "tags", "Tag": "tags", "write_rpm": "write"}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
