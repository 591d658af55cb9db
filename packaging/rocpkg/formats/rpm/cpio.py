"""rpm's cpio payload, written and read: "newc" entries, or the stripped "07070X" form
rpm >= 4.12 uses for packages with files of 4 GiB and more."""
from __future__ import annotations

from rocpkg.model import FILE, SYMLINK, FileEntry
from rocpkg.formats.streams import read_exact

CPIO_NEWC_MAGIC = b"070701"
CPIO_STRIPPED_MAGIC = b"07070X"
CPIO_TRAILER = b"TRAILER!!!\0"
CPIO_FILESIZE_MAX = 0xFFFFFFFF


class CpioWriter:
    """rpm's cpio payload. newc entries carry "./path" and stat fields; in the stripped
    form (07070X, rpm >= 4.12, used whenever the header has LONGFILESIZES) an entry is
    just the file's index in the header, which holds all the metadata. Both forms pad
    each header and each file's data to 4 bytes and end with a newc TRAILER!!!."""

    def __init__(self, sink, stripped: bool):
        self.sink = sink
        self.stripped = stripped
        self.offset = 0
        self.data_left = 0

    def _write(self, data: bytes) -> None:
        self.sink.write(data)
        self.offset += len(data)

    def _pad(self) -> None:
        if self.offset % 4:
            self._write(b"\0" * (-self.offset % 4))

    def add(self, index: int, path: str, mode: int, size: int, mtime: int, inode: int) -> None:
        """Start entry `index` (position in the header's file list); exactly `size`
        data bytes must follow through write_data()."""
        if self.data_left:
            raise ValueError(f"previous cpio entry is {self.data_left} bytes short")
        self._pad()
        if self.stripped:
            self._write(CPIO_STRIPPED_MAGIC + b"%08x" % index)
        else:
            if size >= CPIO_FILESIZE_MAX:
                raise ValueError(f"{path}: too large for a newc cpio entry")
            name = b"." + path.encode("utf-8", "surrogateescape") + b"\0"
            fields = (inode, mode, 0, 0, 1, mtime, size, 0, 0, 0, 0, len(name), 0)
            self._write(CPIO_NEWC_MAGIC + b"".join(b"%08x" % v for v in fields) + name)
        self._pad()
        self.data_left = size

    def write_data(self, data) -> int:
        if len(data) > self.data_left:
            raise ValueError("cpio entry data longer than declared")
        self.sink.write(data)
        self.offset += len(data)
        self.data_left -= len(data)
        return len(data)

    # file-like face for streams.copy_stream
    write = write_data

    def finish(self) -> None:
        if self.data_left:
            raise ValueError(f"last cpio entry is {self.data_left} bytes short")
        self._pad()
        fields = (0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(CPIO_TRAILER), 0)
        self._write(CPIO_NEWC_MAGIC + b"".join(b"%08x" % v for v in fields) + CPIO_TRAILER)
        self._pad()


def skip_cpio_pad(stream, consumed: int) -> None:
    """cpio pads every header and every file's data to 4 bytes."""
    if consumed % 4:
        read_exact(stream, 4 - consumed % 4)


def iter_cpio(stream, by_index: dict[int, FileEntry]):
    """(header index or None, install path, data size) per cpio entry, stream positioned at
    the entry's data. Both of rpm's forms: newc ("./path" and stat fields) and stripped
    (07070X + the file's index in the header, which holds everything else)."""
    paths = {fe.path: i for i, fe in by_index.items()}
    while True:
        magic = read_exact(stream, 6)
        if magic == CPIO_STRIPPED_MAGIC:
            index = int(read_exact(stream, 8), 16)
            skip_cpio_pad(stream, 14)
            fe = by_index.get(index)
            if fe is None:
                raise ValueError(f"stripped cpio entry {index} is not in the header's file list")
            size = fe.size if fe.type == FILE else len(fe.link_target.encode()) if fe.type == SYMLINK else 0
            yield index, fe.path, size
        elif magic == CPIO_NEWC_MAGIC:
            fields = read_exact(stream, 104)
            size = int(fields[48:56], 16)
            namesize = int(fields[88:96], 16)
            name = read_exact(stream, namesize).rstrip(b"\0").decode("utf-8", "surrogateescape")
            skip_cpio_pad(stream, 110 + namesize)
            if name == "TRAILER!!!":
                return
            path = "/" + name.removeprefix(".").strip("/")
            yield paths.get(path), path, size
        else:
            raise ValueError(f"bad cpio magic {magic!r}")

