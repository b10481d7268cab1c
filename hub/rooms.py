"""The actor host: one task per live room, a bounded mailbox, idle eviction, rebuild on touch.

A room is a cache and a serializer (invariant 6). Its task takes every message waiting in
its mailbox, lets the sans-I/O core decide, commits the batch's store operations in one
group commit, and only then carries out replies and pushes (persist, then publish). While
a commit runs, new messages queue in the mailbox; when the mailbox is full, ``post``
raises :class:`Overloaded` at once (invariant 8) and other rooms are unaffected.

An idle room (empty mailbox, nothing in flight, untouched for ``idle_seconds``) is
dropped; its sockets stay with the gateway. The next message for it rebuilds it from the
store before handling anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub.clock import Clock, Timer
from hub.core import (
    AskReceived,
    Decision,
    Effect,
    Event,
    Replied,
    Request,
    RoomCore,
    RowChanged,
)
from hub.faults import crash_point
from hub.protocol import Overloaded, RetryLater
from hub.store import Store

log = logging.getLogger("a2h.rooms")

RoomKey = tuple[str, str]  # (tenant, conversation)
Reply = Callable[[Replied], None]


@dataclass(slots=True)
class Envelope:
    event: Event
    reply: Reply | None = None
    rid: str = "-"  # the caller's request id, for logs


class Room:
    __slots__ = ("key", "host", "core", "mailbox", "task", "last_active", "busy", "_wake", "stale",
                 "stopping", "__weakref__")

    def __init__(self, key: RoomKey, host: RoomHost) -> None:
        self.key = key
        self.host = host
        self.core: RoomCore | None = None
        self.mailbox: deque[Envelope] = deque()
        self.task: asyncio.Task[None] | None = None
        self.last_active = host.clock.now()
        self.busy = False
        #: Another node changed this room's requests: re-read it before the next batch.
        self.stale = False
        self._wake: asyncio.Future[None] | None = None
        self.stopping = False

    @property
    def name(self) -> str:
        return f"{self.key[0]}:{self.key[1]}"

    def wake(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    async def run(self) -> None:
        try:
            while True:
                if not self.mailbox:
                    if self.stopping:
                        return
                    self._wake = asyncio.get_running_loop().create_future()
                    await self._wake
                    self._wake = None
                    continue
                self.busy = True
                try:
                    await self._step()
                finally:
                    self.busy = False
                    self.last_active = self.host.clock.now()
        finally:
            self.host._exited(self)

    async def _step(self) -> None:
        host = self.host
        if self.stale:
            self.stale = False
            self.core = None  # another node wrote it: the cache is re-read from the store
        if self.core is None:
            try:
                reqs = await host.store.load_room(*self.key)
            except Exception:
                log.exception("room=%s rebuild failed", self.name)
                self._fail_all(RetryLater("store unavailable; retry"))
                return
            self.core = RoomCore(self.key[0], self.key[1], reqs)
            host.rebuilds += 1
            host.on_loaded(self.core)
        core = self.core
        # Take a batch. An op_id inserted earlier in this batch ends it, so each op_id
        # appears in at most one insert per commit (a rejected insert is then easy to redo).
        batch: list[Envelope] = []
        inserting: set[str] = set()
        while self.mailbox and len(batch) < host.max_batch:
            env = self.mailbox[0]
            op_id = env.event.op_id
            if op_id in inserting:
                break
            self.mailbox.popleft()
            batch.append(env)
            if isinstance(env.event, AskReceived):
                inserting.add(op_id)
            elif op_id not in core.requests and not isinstance(env.event, RowChanged):
                # Not cached (resolved earlier, or created elsewhere): ask the store.
                try:
                    core.reconcile(op_id, await host.store.get_request(self.key[0], op_id))
                except Exception:
                    log.exception("room=%s op=%s lookup failed", self.name, op_id)
        now = host.clock.now()
        decisions: list[tuple[Envelope, Decision]] = []
        ops = []
        for env in batch:
            try:
                d = core.handle(env.event, now)
            except Exception:
                log.exception("room=%s rid=%s core failed on %r", self.name, env.rid, env.event)
                d = Decision(after=[Replied(error=RetryLater("internal error"))])
            decisions.append((env, d))
            ops.extend(d.ops)
        try:
            results = await host.store.apply(ops) if ops else []
        except Exception as exc:
            log.error("room=%s commit failed: %s", self.name, exc)
            self.core = None  # the cache may now be ahead of the store: rebuild
            for env, _ in decisions:
                _reply(env, Replied(error=RetryLater("store unavailable; retry")))
            return
        if ops:
            crash_point("room.after_commit")
        i = 0
        for env, d in decisions:
            n = len(d.ops)
            mine, i = results[i:i + n], i + n
            if any(r is not True for r in mine):
                d = await self._redo(env, d, mine, now)
            self._carry_out(env, d)
        if len(core.requests) > host.cache_terminal:
            core.forget_terminal()

    async def _redo(self, env: Envelope, d: Decision, results: list[Any], now: float) -> Decision:
        """The store disagreed with the cache: adopt the store's rows, decide again."""
        core = self.core
        assert core is not None
        for op, r in zip(d.ops, results):
            if r is not True:
                log.info("room=%s rid=%s op=%s store disagreed (%s); redoing",
                         self.name, env.rid, op.request.op_id, type(op).__name__)
                core.reconcile(op.request.op_id, r)
        d2 = core.handle(env.event, now)
        if d2.ops:
            try:
                res2 = await self.host.store.apply(d2.ops)
            except Exception:
                self.core = None
                return Decision(after=[Replied(error=RetryLater("store unavailable; retry"))])
            if any(r is not True for r in res2):
                self.core = None
                return Decision(after=[Replied(error=RetryLater("concurrent change; retry"))])
        return d2

    def _carry_out(self, env: Envelope, d: Decision) -> None:
        """Pushes first, then the caller's reply (the pushes are the fast path to everyone
        else; the reply is the caller's acknowledgement)."""
        emit = self.host.emit
        replies = []
        for eff in d.after:
            if isinstance(eff, Replied):
                replies.append(eff)
            else:
                try:
                    emit(eff, env.rid)
                except Exception:
                    log.exception("room=%s rid=%s effect failed", self.name, env.rid)
        if d.ops:
            crash_point("room.after_push")
        for r in replies:
            _reply(env, r)

    def _fail_all(self, exc: Exception) -> None:
        while self.mailbox:
            _reply(self.mailbox.popleft(), Replied(error=exc))


def _reply(env: Envelope, r: Replied) -> None:
    if env.reply is not None:
        try:
            env.reply(r)
        except Exception:
            log.exception("rid=%s reply failed", env.rid)


class RoomHost:
    """Registry of live rooms."""

    def __init__(self, store: Store, clock: Clock, emit: Callable[[Effect, str], None], *,
                 mailbox_size: int = 1000, idle_seconds: float = 30.0, max_batch: int = 256,
                 cache_terminal: int = 16, on_loaded: Callable[[RoomCore], None] | None = None,
                 on_evicted: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.emit = emit
        self.mailbox_size = mailbox_size
        self.idle_seconds = idle_seconds
        self.max_batch = max_batch
        self.cache_terminal = cache_terminal
        self.on_loaded = on_loaded or (lambda core: None)
        self.on_evicted = on_evicted or (lambda n: None)
        self.rooms: dict[RoomKey, Room] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweep_timer: Timer | None = None
        self.rebuilds = 0
        self.evictions = 0
        self.overloaded = 0
        self.closed = False

    def post(self, key: RoomKey, env: Envelope) -> None:
        """Deliver a message to a room, creating (rebuilding) it on first touch.

        Raises:
            Overloaded: the room's mailbox is full. Not retryable.
        """
        room = self.rooms.get(key)
        if room is None:
            if self.closed:
                raise RetryLater("hub is shutting down")
            room = Room(key, self)
            self.rooms[key] = room
            task = asyncio.get_running_loop().create_task(room.run(), name=f"room {room.name}")
            room.task = task
            self._tasks.add(task)
        if len(room.mailbox) >= self.mailbox_size:
            self.overloaded += 1
            log.warning("room=%s rid=%s overloaded (%d queued)", room.name, env.rid,
                        len(room.mailbox))
            raise Overloaded(f"room {key[1]!r} is overloaded; not retrying is the right call")
        room.mailbox.append(env)
        room.last_active = self.clock.now()
        room.wake()

    def changed(self, req: Request) -> None:
        """Another node changed ``req`` in the store: a live room adopts the row, in order
        with its other messages (or, if its mailbox is full, re-reads itself before its next
        batch). A room not in memory reads the store when it is next touched anyway. The
        room's decisions are safe meanwhile: every write is a compare-and-set the store may
        refuse, and the room then adopts the stored row."""
        room = self.rooms.get((req.tenant, req.conversation))
        if room is None:
            return
        if len(room.mailbox) >= self.mailbox_size:
            room.stale = True
            return
        room.mailbox.append(Envelope(RowChanged(req), None, "store"))
        room.wake()

    def _exited(self, room: Room) -> None:
        if self.rooms.get(room.key) is room:
            del self.rooms[room.key]
        if room.task is not None:
            self._tasks.discard(room.task)
        room.task = None
        room.core = None

    def evict(self, key: RoomKey) -> bool:
        """Drop an idle room from memory now. False if it is busy or has mail."""
        room = self.rooms.get(key)
        if room is None or room.busy or room.mailbox:
            return False
        del self.rooms[key]
        room.stopping = True
        room.core = None
        room.wake()
        self.evictions += 1
        return True

    def evict_idle(self, *, force: bool = False) -> int:
        cutoff = self.clock.now() - self.idle_seconds
        n = 0
        for key, room in list(self.rooms.items()):
            if force or room.last_active <= cutoff:
                n += self.evict(key)
        return n

    def start(self) -> None:
        self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        if self.closed:
            return
        interval = max(0.05, self.idle_seconds / 2)
        self._sweep_timer = self.clock.call_at(self.clock.now() + interval, self._sweep)

    def _sweep(self) -> None:
        self.on_evicted(self.evict_idle())
        self._schedule_sweep()

    async def aclose(self) -> None:
        """Let rooms finish what they hold, then stop them."""
        self.closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        for room in list(self.rooms.values()):
            room.stopping = True
            room.wake()
        if self._tasks:
            done, pending = await asyncio.wait(list(self._tasks), timeout=5)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
        self.rooms.clear()

    def statistics(self) -> dict[str, Any]:
        return {
            "live_rooms": len(self.rooms),
            "mailbox_total": sum(len(r.mailbox) for r in self.rooms.values()),
            "rebuilds": self.rebuilds,
            "evictions": self.evictions,
            "overloaded": self.overloaded,
        }
