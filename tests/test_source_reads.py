"""formats.streams.SourceFile.copy_to: the one way every writer reads a planned source.
Small files are read in one piece, larger ones in chunks; both give exactly the planned
bytes to the output and to each digest, and both refuse a file that changes size after
it was opened, naming the package path."""
from __future__ import annotations

import hashlib
import io
import os

import pytest

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import CHUNK, InlineDigest, SourceFile


@pytest.mark.parametrize("size", [0, 1, 4096, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_copy_to_gives_the_bytes_to_the_output_and_every_digest(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    out, md5, sha = io.BytesIO(), InlineDigest("md5"), InlineDigest("sha256")
    with SourceFile("pkg: /opt/f", str(path), size) as source:
        source.copy_to(out, (md5, sha), "/opt/f")
    assert out.getvalue() == data
    assert md5.close() == {"/opt/f": hashlib.md5(data).hexdigest()}
    assert sha.close() == {"/opt/f": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("size", [1000, 2 * CHUNK + 5])
@pytest.mark.parametrize("change, said", [("grow", "grew while being packed"), ("shrink", "shrank while being packed")])
def test_a_source_changed_after_it_was_opened_is_refused(tmp_path, size, change, said):
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    with SourceFile("pkg: /opt/f", str(path), size) as source:
        if change == "grow":
            with open(path, "ab") as fh:
                fh.write(b"more")
        else:
            os.truncate(path, size // 2)
        with pytest.raises(RocpkgInputError, match=said) as error:
            source.copy_to(io.BytesIO(), (InlineDigest("md5"),), "/opt/f")
    assert error.value.problems[0][0] == "pkg: /opt/f"
