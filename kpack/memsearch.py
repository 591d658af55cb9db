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


def find(haystack: bytes | bytearray, needle: bytes, start: int = 0, end: int | None = None) -> int:
    """haystack.find(needle, start, end) for a non-empty needle, in bytes or in a
    bytearray that a reader fills again and again (readinto), without copying it."""
    end = len(haystack) if end is None else min(end, len(haystack))
    if _MEMMEM is None or start >= end:
        return haystack.find(needle, start, end)
    base = ctypes.cast(ctypes.c_char_p(haystack), ctypes.c_void_p).value if isinstance(haystack, bytes) \
        else ctypes.addressof(ctypes.c_char.from_buffer(haystack))
    found = _MEMMEM(base + start, end - start, needle, len(needle))
    return -1 if found is None else found - base
