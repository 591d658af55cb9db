"""Native RPM v4 writer and reader, in rpmpack's small separate parts, each usable and
testable alone:

  tags        Tag / SigTag / TYPE_* and file flags (rpm's rpmtag.h)
  header      encode_header() / decode_header(): index, data store, region tag
  cpio        CpioWriter and iter_cpio(): "newc" and rpm's stripped "07070X" form
  signature   the lead and the fixed-size signature header
  relations   sense flags, relation text <-> (name, flags, version), split_evr()
  read        read_rpm(), the payload stream, replace_signature()
  record      package_from_header(): the one record repo_dnf and verify read
  spec        parse_spec(): the rendered spec text -> preamble, relations, scripts
  write       write_rpm(): a PackageSpec -> a streamed .rpm

This package re-exports what callers use."""
from rocpkg.formats.rpm.cpio import CpioWriter, iter_cpio, skip_cpio_pad
from rocpkg.formats.rpm.header import DecodedHeader, decode_header, encode_header
from rocpkg.formats.rpm.read import RpmInfo, open_payload_stream, read_rpm, replace_signature
from rocpkg.formats.rpm.record import RpmFile, RpmPackageRecord, package_from_header
from rocpkg.formats.rpm.relations import (RPMSENSE_ANY, RPMSENSE_EQUAL, RPMSENSE_GREATER, RPMSENSE_LESS,
                                  RPMSENSE_RPMLIB, format_relation, parse_relation, split_evr)
from rocpkg.formats.rpm.signature import LEAD_SIZE, encode_signature
from rocpkg.formats.rpm.spec import ParsedSpec, parse_spec
from rocpkg.formats.rpm.tags import (RPMFILE_GHOST, TYPE_BIN, TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_STRING,
                             TYPE_STRING_ARRAY, SigTag, Tag)
from rocpkg.formats.rpm.write import write_rpm

__all__ = [
    "CpioWriter", "iter_cpio", "skip_cpio_pad", "DecodedHeader", "decode_header", "encode_header",
    "RpmInfo", "open_payload_stream", "read_rpm", "replace_signature", "RpmFile", "RpmPackageRecord",
    "package_from_header", "RPMSENSE_ANY", "RPMSENSE_EQUAL", "RPMSENSE_GREATER", "RPMSENSE_LESS",
    "RPMSENSE_RPMLIB", "format_relation", "parse_relation", "split_evr", "LEAD_SIZE", "encode_signature",
    "ParsedSpec", "parse_spec", "RPMFILE_GHOST", "TYPE_BIN", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
    "TYPE_STRING", "TYPE_STRING_ARRAY", "SigTag", "Tag", "write_rpm",
]
