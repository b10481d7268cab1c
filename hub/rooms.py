"""The actor host: a live room per conversation, a bounded mailbox, idle eviction, rebuild on
touch.

A room is a cache and a serializer (invariant 6). One step at a time per room: it takes
every message waiting in its mailbox, lets the sans-I/O core decide, commits the batch's
store operations in one group commit, and only then carries out replies and pushes
(persist, then publish). While a commit runs, new messages queue in the mailbox; when the
mailbox is full, ``post`` raises :class:`Overloaded` at once (invariant 8) and other rooms
are unaffected.

Steps are driven by callbacks, not by a task per room: ``post`` marks the room ready, one
callback per loop iteration decides the batches of every ready room and hands all their
commits to the store together (``Store.apply_soon`` where the backend has it: one hand-off
for the whole iteration), and the commit's completion carries the effects out. A room
needs a task only for a step that must wait on the store before it can decide — a rebuild,
a request not in its cache, a redo after the store disagreed, a room another node changed
beyond what a ``RowChanged`` message carried — and that task lives for that one step.

An idle room (empty mailbox, no step in flight, untouched for ``idle_seconds``) is
dropped; its sockets stay with the gateway. The next message for it rebuilds it from the
store before handling anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from hub.clock import Clock, Timer
from hub.core import (
    AskReceived,
    Decision,
    Effect,
    Event,
    Op,
    Replied,
    Request,
    Resolve,
    RoomCore,
    RowChanged,
)
from hub.errors import Overloaded, RetryLater
from hub.faults import crash_point
from hub.store import Store

log = logging.getLogger("a2h.rooms")

RoomKey = tuple[str, str]  # (tenant, conversation)
Reply = Callable[[Replied], None]
Decided = list[tuple["Envelope", Decision]]


@dataclass(slots=True)
class Envelope:
    event: Event
    reply: Reply | None = None
    rid: str = "-"  # the caller's request id, for logs


class Room:
    __slots__ = ("key", "host", "core", "mailbox", "last_active", "busy", "queued", "stale",
                 "terminal", "refused", "refusal_logged", "ask_tokens", "ask_refilled",
                 "__weakref__")

    def __init__(self, key: RoomKey, host: RoomHost) -> None:
        self.key = key
        self.host = host
        self.core: RoomCore | None = None
        self.mailbox: deque[Envelope] = deque()
        self.last_active = host.clock.now()
        #: a step is in flight (deciding, committing or carrying out): one at a time
        self.busy = False
        #: waiting in the host's ready list for the next iteration
        self.queued = False
        #: another node changed this room's requests beyond what a RowChanged carried:
        #: re-read it before the next batch
        self.stale = False
        #: op_ids that may be terminal in the cache, oldest first: the cache is trimmed
        #: from these, not by scanning every request (a flooded room holds thousands)
        self.terminal: deque[str] = deque()
        #: messages refused (overloaded) since the last log line about it, and when
        self.refused = 0
        self.refusal_logged = -1e18
        #: the room's ask bucket (RoomHost.admit)
        self.ask_tokens = float(host.ask_burst)
        self.ask_refilled = self.last_active

    @property
    def name(self) -> str:
        return f"{self.key[0]}:{self.key[1]}"

    # -- the fast path: decide now, commit with the iteration's other rooms

    def take_batch(self) -> list[Envelope] | None:
        """The batch a step can decide without waiting on the store, or None if the
        first message needs the store (then the step runs in a task)."""
        host = self.host
        core = self.core
        if self.stale or core is None:
            return None
        batch: list[Envelope] = []
        inserting: set[str] = set()
        mailbox = self.mailbox
        while mailbox and len(batch) < host.max_batch:
            env = mailbox[0]
            event = env.event
            op_id = event.op_id
            if op_id in inserting:
                break
            if isinstance(event, AskReceived):
                inserting.add(op_id)
            elif op_id not in core.requests and not isinstance(event, RowChanged):
                break  # not cached: ask the store (in a task), after this batch
            mailbox.popleft()
            batch.append(env)
        return batch or None

    def decide(self, batch: list[Envelope], now: float) -> tuple[Decided, list[Op]]:
        core = self.core
        assert core is not None
        decisions: Decided = []
        ops: list[Op] = []
        for env in batch:
            try:
                d = core.handle(env.event, now)
            except Exception:
                log.exception("room=%s rid=%s core failed on %r", self.name, env.rid, env.event)
                d = Decision(after=[Replied(error=RetryLater("internal error"))])
            decisions.append((env, d))
            ops.extend(d.ops)
        return decisions, ops

    def committed(self, decisions: Decided, now: float, ok: bool, value: Any) -> None:
        """The store answered a fast-path commit (``value``: its results, or the error):
        carry the effects out (persist, then publish), or hand what needs another store
        round trip to a task."""
        if not ok:
            self._commit_failed(decisions, value)
            self.host.step_done(self)
            return
        results = value
        crash_point("room.after_commit")
        i = 0
        for k, (env, d) in enumerate(decisions):
            n = len(d.ops)
            mine = results[i:i + n]
            if any(r is not True for r in mine):
                # The store disagreed: the rest waits for the redo, in order.
                self.host.spawn(self, self._finish(decisions[k:], results[i:], now))
                return
            i += n
            self.carry_out(env, d)
        self.trim()
        self.host.step_done(self)

    # -- the slow path: a task for a step that waits on the store first

    async def slow_step(self) -> None:
        try:
            await self._slow_step()
        finally:
            self.host.step_done(self)

    async def _slow_step(self) -> None:
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
            self.terminal.clear()
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
                    self.reconcile(op_id, await host.store.get_request(self.key[0], op_id))
                except Exception:
                    log.exception("room=%s op=%s lookup failed", self.name, op_id)
        now = host.clock.now()
        decisions, ops = self.decide(batch, now)
        try:
            results = await host.store.apply(ops) if ops else []
        except Exception as exc:
            self._commit_failed(decisions, exc)
            return
        if ops:
            crash_point("room.after_commit")
        await self._finish(decisions, results, now)

    async def _finish(self, decisions: Decided, results: list[Any], now: float) -> None:
        i = 0
        for env, d in decisions:
            n = len(d.ops)
            mine, i = results[i:i + n], i + n
            if any(r is not True for r in mine):
                d = await self._redo(env, d, mine, now)
            self.carry_out(env, d)
        self.trim()

    async def _redo(self, env: Envelope, d: Decision, results: list[Any], now: float) -> Decision:
        """The store disagreed with the cache: adopt the store's rows, decide again."""
        core = self.core
        assert core is not None
        for op, r in zip(d.ops, results):
            if r is not True:
                log.info("room=%s rid=%s op=%s store disagreed (%s); redoing",
                         self.name, env.rid, op.request.op_id, type(op).__name__)
                self.reconcile(op.request.op_id, r)
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

    # -- shared

    def reconcile(self, op_id: str, stored: Request | None) -> None:
        core = self.core
        assert core is not None
        core.reconcile(op_id, stored)
        self.terminal.append(op_id)

    def _commit_failed(self, decisions: Decided, exc: BaseException) -> None:
        log.error("room=%s commit failed: %s", self.name, exc)
        self.core = None  # the cache may now be ahead of the store: rebuild
        for env, _ in decisions:
            _reply(env, Replied(error=RetryLater("store unavailable; retry")))

    def carry_out(self, env: Envelope, d: Decision) -> None:
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
            for op in d.ops:
                if isinstance(op, Resolve):
                    self.terminal.append(op.request.op_id)
            crash_point("room.after_push")
        for r in replies:
            _reply(env, r)

    def trim(self) -> None:
        """Drop resolved requests from the cache (the store keeps them) once it holds more
        than ``cache_terminal``: only those that may be terminal are looked at."""
        core = self.core
        if core is None or len(core.requests) <= self.host.cache_terminal:
            return
        requests = core.requests
        terminal = self.terminal
        while terminal:
            req = requests.get(terminal.popleft())
            if req is not None and req.terminal:
                del requests[req.op_id]

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
    """Registry of live rooms, and the scheduler of their steps."""

    def __init__(self, store: Store, clock: Clock, emit: Callable[[Effect, str], None], *,
                 mailbox_size: int = 1000, idle_seconds: float = 30.0, max_batch: int = 256,
                 cache_terminal: int = 16, on_loaded: Callable[[RoomCore], None] | None = None,
                 on_evicted: Callable[[int], None] | None = None,
                 ask_rate: float = 0.0, ask_burst: int = 0) -> None:
        self.store = store
        #: asks a room admits per second (a token bucket of ``ask_burst``); 0: no limit
        self.ask_rate = ask_rate
        self.ask_burst = max(1, ask_burst)
        self.clock = clock
        self.emit = emit
        self.mailbox_size = mailbox_size
        self.idle_seconds = idle_seconds
        self.max_batch = max_batch
        self.cache_terminal = cache_terminal
        self.on_loaded = on_loaded or (lambda core: None)
        #: Re-read each room from the store before each batch (other nodes write it too).
        self.on_evicted = on_evicted or (lambda n: None)
        self.rooms: dict[RoomKey, Room] = {}
        #: tasks of slow steps (each one step of one room)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready: list[Room] = []
        self._tick = False
        #: asked once: ``asyncio.get_running_loop()`` is a ``getpid()`` call on Python 3.11
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = 0
        self._drained: asyncio.Future[None] | None = None
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
        if len(room.mailbox) >= self.mailbox_size:
            self._refuse(room, env.rid)
        room.mailbox.append(env)
        room.last_active = self.clock.now()
        if not room.busy and not room.queued:
            self._schedule(room)

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
        if not room.busy and not room.queued:
            self._schedule(room)

    def admit(self, key: RoomKey, rid: str = "-") -> None:
        """Admit a new ask to a room, before the caller spends anything on it: refuse now
        what ``post`` would refuse (a full mailbox), and asks over the room's rate.

        Raises:
            Overloaded: the room's mailbox is full, or it takes asks faster than
                ``ask_rate`` (bursts up to ``ask_burst``). Not retryable.
        """
        room = self.rooms.get(key)
        if room is None:
            if self.closed:
                raise RetryLater("hub is shutting down")
            # The ask's room comes to life now (with a full bucket), so this ask counts too.
            room = self.rooms[key] = Room(key, self)
        if len(room.mailbox) >= self.mailbox_size:
            self._refuse(room, rid)
        rate = self.ask_rate
        if rate > 0:
            now = self.clock.now()
            tokens = min(float(self.ask_burst), room.ask_tokens + (now - room.ask_refilled) * rate)
            room.ask_refilled = now
            if tokens < 1.0:
                room.ask_tokens = tokens
                self._refuse(room, rid, f"room {key[1]!r} takes asks faster than {rate:g}/s")
            room.ask_tokens = tokens - 1.0

    #: Seconds between two log lines about one overloaded room.
    OVERLOAD_LOG_EVERY: ClassVar[float] = 1.0

    def _refuse(self, room: Room, rid: str, why: str = "") -> None:
        """Answer ``overloaded``. A flooded room refuses thousands of messages a second:
        one log line per room per second, counting the refusals since the last."""
        self.overloaded += 1
        room.refused += 1
        now = self.clock.now()
        if now - room.refusal_logged >= self.OVERLOAD_LOG_EVERY:
            log.warning("room=%s rid=%s overloaded (%d queued; %d refused since the last "
                        "line)", room.name, rid, len(room.mailbox), room.refused)
            room.refusal_logged = now
            room.refused = 0
        raise Overloaded((why or f"room {room.key[1]!r} is overloaded") +
                         "; not retrying is the right call")

    def _schedule(self, room: Room) -> None:
        room.queued = True
        self._ready.append(room)
        if not self._tick:
            self._tick = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._run_ready)

    def _run_ready(self) -> None:
        """Start a step in every ready room; the fast ones' commits go to the store
        together."""
        self._tick = False
        ready, self._ready = self._ready, []
        now = self.clock.now()
        commits: list[tuple[Room, Decided, list[Op]]] = []
        for room in ready:
            room.queued = False
            if room.busy or not room.mailbox:
                continue
            room.busy = True
            self._busy += 1
            batch = room.take_batch()
            if batch is None:
                self.spawn(room, room.slow_step(), step=False)
                continue
            decisions, ops = room.decide(batch, now)
            if ops:
                commits.append((room, decisions, ops))
                continue
            for env, d in decisions:  # nothing to commit: answer at once
                room.carry_out(env, d)
            self.step_done(room)
        if commits:
            # One hand-off for every room of this iteration.
            self.store.apply_soon([(ops, partial(room.committed, decisions, now))
                                   for room, decisions, ops in commits])

    def spawn(self, room: Room, work: Any, *, step: bool = True) -> None:
        """Run ``work`` (the rest of ``room``'s step) in a task owned here."""
        if step:
            work = _then(work, room)
        task = asyncio.get_running_loop().create_task(work, name=f"room {room.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def step_done(self, room: Room) -> None:
        room.busy = False
        room.last_active = self.clock.now()
        self._busy -= 1
        if room.mailbox:
            self._schedule(room)
        elif not self._busy and not self._ready:
            d = self._drained
            if d is not None and not d.done():
                d.set_result(None)

    def evict(self, key: RoomKey) -> bool:
        """Drop an idle room from memory now. False if it is busy or has mail."""
        room = self.rooms.get(key)
        if room is None or room.busy or room.mailbox:
            return False
        del self.rooms[key]
        room.core = None
        room.terminal.clear()
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
        """Let rooms finish what they hold (up to 5 s), then stop them."""
        self.closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        if self._busy or self._ready:
            self._drained = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._drained], timeout=5)
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self.rooms.clear()

    def statistics(self) -> dict[str, Any]:
        return {
            "live_rooms": len(self.rooms),
            "mailbox_total": sum(len(r.mailbox) for r in self.rooms.values()),
            "rebuilds": self.rebuilds,
            "evictions": self.evictions,
            "overloaded": self.overloaded,
        }


async def _then(work: Any, room: Room) -> None:
    """The rest of a fast step that needed the store again; the step ends with it."""
    try:
        await work
    finally:
        room.host.step_done(room)
