"""The alarm sweep's paging (hub/alarms.py): a full page of new overdue deadlines is
followed by the next page at once; a full page it has fired already (their rooms are still
resolving them) is not read again at once, over and over, but after RESWEEP_AFTER."""

from __future__ import annotations

import asyncio
from typing import Any

from hub.alarms import RESWEEP_AFTER, Alarms
from hub.clock import FakeClock
from hub.store import Due


class _Store:
    """``due`` over a fixed set of overdue deadlines that nobody resolves; counts reads."""

    def __init__(self, n: int) -> None:
        self.dues = [Due("t", f"c{i}", f"op{i}", 1.0 + i) for i in range(n)]
        self.reads = 0

    async def due(self, now: float, limit: int) -> list[Due]:
        self.reads += 1
        return self.dues[:limit]

    async def purge(self, before: float) -> int:
        return 0


async def test_a_full_page_fired_already_is_read_again_only_after_a_pause() -> None:
    clock = FakeClock()
    store = _Store(10)
    fired: list[Due] = []
    alarms = Alarms(store, clock, fired.append, sweep_limit=10)  # type: ignore[arg-type]
    task = asyncio.ensure_future(alarms.run())
    try:
        for _ in range(20):
            await asyncio.sleep(0)
        # One read, ten fired; the same full page again would fire nothing: no more reads
        # until the clock moves on.
        assert len(fired) == 10 and store.reads == 2
        for _ in range(20):
            await asyncio.sleep(0)
        assert store.reads == 2
        clock.advance(RESWEEP_AFTER)
        for _ in range(20):
            await asyncio.sleep(0)
        assert store.reads == 3 and len(fired) == 10  # read again, nothing fired twice
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_full_page_of_new_ones_is_followed_at_once() -> None:
    clock = FakeClock()
    store = _Store(25)
    fired: list[Any] = []

    async def due(now: float, limit: int) -> list[Due]:  # the fired ones resolve at once
        store.reads += 1
        page = [d for d in store.dues if d not in fired][:limit]
        return page

    store.due = due  # type: ignore[method-assign]
    alarms = Alarms(store, clock, fired.append, sweep_limit=10)  # type: ignore[arg-type]
    task = asyncio.ensure_future(alarms.run())
    try:
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(fired) == 25  # three pages without the clock moving
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
