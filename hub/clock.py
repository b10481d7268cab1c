"""Injected time: the real clock for the hub, a fake one that makes time tests instant.

Only shells read time; the core is handed ``now``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` at epoch time ``when`` (or soon after)."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""


class SystemClock:
    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, when - time.time()), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _FakeTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when a test calls :meth:`advance`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        t = _FakeTimer()
        heapq.heappush(self._timers, (when, next(self._seq), t, callback))
        return t

    async def sleep(self, seconds: float) -> None:
        """Return once a test has advanced the clock by ``seconds``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_at(self._now + seconds, wake)
        try:
            await fut
        finally:
            timer.cancel()

    @property
    def sleepers(self) -> int:
        """Timers not yet due: lets a test wait until a task is parked on this clock."""
        return sum(1 for _, _, t, _ in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time forward and run every timer now due, in order."""
        self._now += seconds
        while self._timers and self._timers[0][0] <= self._now:
            _, _, t, cb = heapq.heappop(self._timers)
            if not t.cancelled:
                cb()
