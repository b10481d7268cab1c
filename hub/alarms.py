"""Durable alarms: deadlines live in the store; this only decides when to look.

An in-memory heap holds the deadlines this process set; a periodic sweep of the store
finds every overdue pending request (those from before a restart, from another node, or
whose wake-up was lost). Firing posts ``DeadlineReached`` to the room, where expiry is a
compare-and-set like any resolution: firing twice is harmless (at-least-once alarms,
exactly-once effect). The same loop purges resolved requests past the retention window.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable
from typing import Any

from hub.clock import Clock
from hub.faults import crash_point
from hub.store import Due, Store

log = logging.getLogger("a2h.alarms")

#: Seconds before a sweep fires again a deadline it fired and that is still pending.
REFIRE_AFTER = 5.0


#: Seconds before the sweep reads again a full page whose deadlines it had all fired already.
RESWEEP_AFTER = 0.1


class Alarms:
    def __init__(self, store: Store, clock: Clock, fire: Callable[[Due], None], *,
                 sweep_interval: float = 1.0, retention: float = 86400.0,
                 purge_interval: float | None = None, sweep_limit: int = 5000,
                 on_purged: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.fire = fire
        self.sweep_interval = sweep_interval
        self.retention = retention
        self.purge_interval = purge_interval if purge_interval is not None else \
            max(0.2, min(60.0, retention / 4))
        self.sweep_limit = sweep_limit
        self.on_purged = on_purged or (lambda n: None)
        self._heap: list[tuple[float, str, str, str]] = []
        # (tenant, op_id) -> the deadline currently wanted; heap entries that disagree are
        # stale (extended or resolved) and are skipped when popped.
        self._live: dict[tuple[str, str], float] = {}
        # (tenant, op_id) -> when a sweep fired it: a sweep that finds the same row still
        # pending (its expiry not committed yet) leaves it alone for REFIRE_AFTER seconds.
        self._fired: dict[tuple[str, str], float] = {}
        self._wake: asyncio.Future[None] | None = None
        self._target = float("inf")
        self.fired = 0
        self.purged = 0
        self.max_lag = 0.0
        self.last_lag = 0.0
        self._next_sweep = 0.0
        self._next_purge = 0.0
        self._first_sweep = True

    def set(self, tenant: str, conversation: str, op_id: str, deadline: float) -> None:
        self._live[(tenant, op_id)] = deadline
        heapq.heappush(self._heap, (deadline, tenant, conversation, op_id))
        if deadline < self._target:
            self._poke()

    def cancel(self, tenant: str, op_id: str) -> None:
        self._live.pop((tenant, op_id), None)
        self._fired.pop((tenant, op_id), None)

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def _fire(self, due: Due, now: float) -> None:
        lag = max(0.0, now - due.deadline)
        self.last_lag = lag
        self.max_lag = max(self.max_lag, lag)
        self.fired += 1
        try:
            self.fire(due)
        except Exception as exc:  # overloaded room: the next sweep finds it again
            log.warning("room=%s:%s op=%s alarm not delivered: %s", due.tenant,
                        due.conversation, due.op_id, exc)

    async def sweep(self) -> tuple[bool, int]:
        """Fire every overdue pending deadline the store knows (one page of them): (was the
        page full, so that more may be overdue behind it; how many fired now)."""
        now = self.clock.now()
        dues = await self.store.due(now, self.sweep_limit)
        fired = self._fired
        if len(fired) > 4 * self.sweep_limit:
            for key in [k for k, t in fired.items() if now - t > REFIRE_AFTER]:
                del fired[key]
        new = 0
        for d in dues:
            key = (d.tenant, d.op_id)
            t = fired.get(key)
            if t is not None and now - t < REFIRE_AFTER:
                continue
            fired[key] = now
            new += 1
            self._fire(d, now)
            if self._first_sweep:
                crash_point("startup.recovery")
        self._first_sweep = False
        return len(dues) >= self.sweep_limit, new

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = self.clock.now()
            while self._heap and self._heap[0][0] <= now:
                deadline, tenant, conv, op_id = heapq.heappop(self._heap)
                if self._live.get((tenant, op_id)) != deadline:
                    continue
                del self._live[(tenant, op_id)]
                self._fire(Due(tenant, conv, op_id, deadline), now)
            if now >= self._next_sweep:
                try:
                    full, new = await self.sweep()
                except Exception:
                    log.exception("alarm sweep failed")
                    full, new = False, 0
                # A full page means more are overdue: sweep again at once if it fired new
                # ones; if its rooms are still resolving the ones it fired before, shortly,
                # rather than reading the same page again and again meanwhile.
                self._next_sweep = (now if full and new else
                                    now + min(RESWEEP_AFTER, self.sweep_interval) if full else
                                    now + self.sweep_interval)
            if now >= self._next_purge:
                try:
                    n = await self.store.purge(now - self.retention)
                    self.purged += n
                    self.on_purged(n)
                except Exception:
                    log.exception("purge failed")
                self._next_purge = now + self.purge_interval
            target = min(self._heap[0][0] if self._heap else float("inf"),
                         self._next_sweep, self._next_purge)
            if target <= self.clock.now():
                await asyncio.sleep(0)
                continue
            self._target = target
            self._wake = loop.create_future()
            timer = self.clock.call_at(target, self._poke)
            try:
                await self._wake
            finally:
                timer.cancel()
                self._wake = None
                self._target = float("inf")

    def statistics(self) -> dict[str, Any]:
        return {
            "scheduled": len(self._live),
            "fired": self.fired,
            "purged": self.purged,
            "max_lag": self.max_lag,
            "last_lag": self.last_lag,
        }
