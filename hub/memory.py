"""Giving memory back to the operating system after a flood.

CPython frees objects at once, but large strings and buffers (a 48 KiB context, a frame)
come from the C allocator, and glibc keeps freed memory in its arenas: after a flood of large
asks has expired and been purged, RSS would stay at its peak forever. :class:`Reclaimer`
asks glibc to return free pages (``malloc_trim(0)``) when the hub has just dropped a lot —
rooms evicted, rows purged — at most once per ``min_interval`` seconds. Elsewhere (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

from hub.clock import Clock

log = logging.getLogger("a2h.memory")


class Reclaimer:
    def __init__(self, clock: Clock, *, min_interval: float = 10.0) -> None:
        self.clock = clock
        self.min_interval = min_interval
        self._last = float("-inf")
        self.trims = 0
        self._trim: Any = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            self._trim = libc.malloc_trim
            self._trim.argtypes = [ctypes.c_size_t]
            self._trim.restype = ctypes.c_int
        except (OSError, AttributeError):  # not glibc: nothing to trim
            self._trim = None

    def freed(self, how_much: int) -> None:
        """Something (``how_much`` rooms or rows) was just dropped: maybe trim."""
        if how_much <= 0 or self._trim is None:
            return
        now = self.clock.now()
        if now - self._last < self.min_interval:
            return
        self._last = now
        self._trim(0)
        self.trims += 1
