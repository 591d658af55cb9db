"""Substring search over large buffers that lets other threads run: libc's memmem through
ctypes (it releases the GIL, bytes.find does not), so that the host data sections of a
release (GiBs) are scanned for embedded device code on every core. bytes.find where libc
has no memmem."""
from __future__ import annotations

import ctypes


def _libc_memmem():
    try:
        memmem = ctypes.CDLL(None).memmem
    except (AttributeError, OSError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return memmem


_MEMMEM = _libc_memmem()


def find(haystack: bytes, needle: bytes, start: int = 0, end: int | None = None) -> int:
    """haystack.find(needle, start, end) for a bytes haystack and a non-empty needle."""
    end = len(haystack) if end is None else min(end, len(haystack))
    if _MEMMEM is None or start >= end:
        return haystack.find(needle, start, end)
    base = ctypes.cast(ctypes.c_char_p(haystack), ctypes.c_void_p).value
    found = _MEMMEM(base + start, end - start, needle, len(needle))
    return -1 if found is None else found - base


def find_in(buffer: bytearray, needle: bytes, end: int) -> int:
    """buffer.find(needle, 0, end) for a bytearray that a reader fills again and again
    (readinto: no new object per read), without copying it."""
    end = min(end, len(buffer))
    if _MEMMEM is None or end <= 0:
        return buffer.find(needle, 0, max(end, 0))
    base = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    found = _MEMMEM(base, end, needle, len(needle))
    return -1 if found is None else found - base
