"""The hub without its transports: wires store, rooms, alarms and gateway together.

Every entry point (WebSocket frame, HTTP call, alarm) comes through here. Effects that
rooms release after commit are turned into pushes here, each frame encoded once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, ClassVar

import orjson

from hub.alarms import Alarms
from hub.bus import Bus, InboxChanged, LocalBus, RequestResolved, TokenRevoked, Wake
from hub.clock import Clock, SystemClock, Timer
from hub.config import Settings
from hub.core import (
    AlarmSet,
    AnswerSubmitted,
    AskReceived,
    CancelRequested,
    DeadlineMoved,
    DeadlineReached,
    Effect,
    Event,
    InboxAdded,
    Replied,
    Request,
    Resolved,
    RoomCore,
    WaitRequested,
)
from hub.errors import ErrorCode, LimitExceeded, NotFound, Unauthorized
from hub.gateway import Gateway, inbox_tag, op_tag, token_tag
from hub.memory import Reclaimer
from hub.notify.worker import Notifier
from hub.protocol import (
    Ask,
    CloseCode,
    OpId,
    Status,
    encode_text,
    inbox_add_frame,
    inbox_add_text,
    inbox_remove_frame,
    inbox_remove_text,
    reconnect_frame,
    resolved_frame,
    resolved_text,
)
from hub.rooms import Envelope, Reply, RoomHost
from hub.store import Due, Principal, Role, Store, token_hash_of

log = logging.getLogger("a2h")

#: The most changed requests one reconcile reads (50,000 changes in 2 s: far past a node).
RECONCILE_LIMIT = 100_000


class HubService:
    def __init__(self, settings: Settings, store: Store, clock: Clock | None = None,
                 bus: Bus | None = None) -> None:
        self.settings = settings
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.bus: Bus = bus or LocalBus()
        self.gateway = Gateway()
        self._rids = itertools.count(1)
        self.memory = Reclaimer(self.clock)
        # With other nodes on the same store, the store decides (compare-and-set) and a room's
        # cache is re-read when a wake-up or the reconcile loop says another node changed it.
        self.rooms = RoomHost(store, self.clock, self._emit,
                              mailbox_size=settings.room_mailbox,
                              ask_rate=settings.room_ask_rate,
                              ask_burst=settings.room_ask_burst,
                              idle_seconds=settings.room_idle,
                              on_loaded=self._on_room_loaded,
                              on_evicted=self.memory.freed)
        self.alarms = Alarms(store, self.clock, self._fire_alarm,
                             sweep_interval=settings.alarm_sweep, retention=settings.retention,
                             on_purged=self.memory.freed)
        # (tenant, op_id) -> (conversation, addressee), for pending requests this process has
        # seen: lets a respond/wait/cancel by op_id find its room without a store read.
        self._where: dict[tuple[str, str], tuple[str, str]] = {}
        self._humans: dict[str, set[str]] = {}
        # Pending requests per tenant, [count, payload bytes]: read from the store once, then
        # kept exactly: an ask reserves its place when it is admitted, before its room even
        # sees it, so asks in flight can never overshoot the caps (issue 15).
        self._pending: dict[str, list[int]] = {}
        self._pending_loading: dict[str, asyncio.Future[None]] = {}
        # In-process waiters (HTTP long-polls, chat completions): (tenant, op_id) -> futures,
        # and the same futures by token hash, so a revoked token's waits end at once.
        self._waiters: dict[tuple[str, str], list[asyncio.Future[Request]]] = {}
        self._blocked: dict[str, set[asyncio.Future[Request]]] = {}
        self._alarm_task: asyncio.Task[None] | None = None
        self._revoke_task: asyncio.Task[None] | None = None
        self._reconcile_task: asyncio.Task[None] | None = None
        # Reads started by bus wake-ups: owned here, cancelled and awaited by stop().
        self._wake_tasks: set[asyncio.Task[None]] = set()
        # token hash -> the timer that ends it at its expiry (while it has sockets or waits).
        self._expiries: dict[str, Timer] = {}
        # (tenant, op_id) -> (when, resolved?) this node last pushed it: its own commits, a
        # wake-up or the reconcile loop; the loop pushes nothing twice.
        self._delivered: dict[tuple[str, str], tuple[float, bool]] = {}
        self.started_at = 0.0
        # Webhooks, ntfy and Web Push: sends what the store's outbox holds, after commit.
        self.notifier = Notifier(store, self.clock, settings, distributed=self.bus.distributed)

    # -- lifecycle

    async def start(self) -> None:
        await self.store.open()
        self.started_at = self.clock.now()
        self.rooms.start()
        loop = asyncio.get_running_loop()
        self._alarm_task = loop.create_task(self.alarms.run(), name="a2h alarms")
        self._revoke_task = loop.create_task(self._watch_revocations(), name="a2h revocations")
        await self.bus.start(self._on_wake)
        await self.notifier.start()
        if self.bus.distributed:
            self._reconcile_task = loop.create_task(self._reconcile(), name="a2h reconcile")

    #: Seconds between two looks for revoked tokens.
    REVOCATION_POLL: ClassVar[float] = 0.5

    async def _watch_revocations(self) -> None:
        """Close the sockets and end the blocked calls of revoked tokens within about a
        second, wherever the revocation came from (HTTP, or the CLI writing to the store)."""
        since = self.clock.now() - 5
        while True:
            await self.clock.sleep(self.REVOCATION_POLL)
            try:
                now = self.clock.now()
                for h in await self.store.revoked_since(since - 5):
                    self.end_token(h, "token revoked")
                since = now
            except Exception:
                log.exception("revocation check failed")

    async def revoke(self, token: str, tenant: str | None = None) -> bool:
        """Revoke a token (or its hash): its sockets close and its blocked calls end here
        at once, on other nodes at their next wake-up or look at the store."""
        ok = await self.store.revoke_token(token, self.clock.now(), tenant=tenant)
        if ok:
            token_hash = token_hash_of(token)
            self.end_token(token_hash, "token revoked")
            self.bus.publish(TokenRevoked(token_hash))
        return ok

    def watch_expiry(self, who: Principal) -> None:
        """End ``who``'s token at its expiry: its sockets close (4001) and its blocked calls
        raise ``Unauthorized``, exactly as for a revocation."""
        if who.expires_at is None or who.token_hash in self._expiries:
            return
        token_hash = who.token_hash

        def expire() -> None:
            self._expiries.pop(token_hash, None)
            self.end_token(token_hash, "token expired")

        self._expiries[token_hash] = self.clock.call_at(who.expires_at, expire)

    def end_token(self, token_hash: str, reason: str) -> None:
        """A token stopped being valid: close its sockets (4001) and end its blocked calls."""
        if self.gateway.close_tag(token_tag(token_hash), CloseCode.REVOKED, reason):
            log.info("closed sockets of a token: %s", reason)
        for fut in self._blocked.pop(token_hash, ()):
            if not fut.done():
                fut.set_exception(Unauthorized(reason))

    async def stop(self) -> None:
        await self.rooms.aclose()
        for timer in self._expiries.values():
            timer.cancel()
        self._expiries.clear()
        tasks = [t for t in (self._alarm_task, self._revoke_task, self._reconcile_task,
                             *self._wake_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # their CancelledError stays theirs; ours propagates
        await self.notifier.stop()
        await self.bus.close()
        await self.store.close()

    # -- other nodes (hub/bus.py): wake-ups in, reads of the store, local pushes out

    def _on_wake(self, wake: Wake) -> None:
        if isinstance(wake, TokenRevoked):
            self.end_token(wake.token_hash, "token revoked")
            return
        if isinstance(wake, InboxChanged):
            interested = bool(self.gateway.members(inbox_tag(wake.tenant, wake.handle)))
        else:
            interested = self._interested(wake.tenant, wake.op_id, wake.handle)
        if not interested:
            return
        task = asyncio.get_running_loop().create_task(self._read_and_push(wake.tenant,
                                                                          wake.op_id))
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)

    def _interested(self, tenant: str, op_id: str, handle: str) -> bool:
        return bool((tenant, op_id) in self._waiters
                    or self.gateway.members(op_tag(tenant, op_id))
                    or self.gateway.members(inbox_tag(tenant, handle)))

    async def _read_and_push(self, tenant: str, op_id: str) -> None:
        try:
            req = await self.store.get_request(tenant, op_id)
        except Exception as exc:  # the reconcile loop will find it again
            log.warning("op=%s wake-up read failed: %s", op_id, exc)
            return
        if req is not None:
            self._push_from_store(req)

    def _push_from_store(self, req: Request) -> None:
        """Push what another node committed to this node's sockets and waiters — once: what
        this node already pushed (its own commits, an earlier wake-up) is not pushed again."""
        key = (req.tenant, req.op_id)
        seen = self._delivered.get(key)
        if seen is not None and (seen[1] or not req.terminal):
            return  # pushed already, in this state or a later one
        self.rooms.changed(req)
        self._delivered[key] = (self.clock.now(), req.terminal)
        if not req.terminal:
            self.gateway.publish(inbox_tag(req.tenant, req.to),
                                 encode_text(inbox_add_frame(req.view())))
            return
        self._where.pop(key, None)
        self.alarms.cancel(req.tenant, req.op_id)
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(replace(req))
        view = req.view()
        self.gateway.publish(op_tag(req.tenant, req.op_id), encode_text(resolved_frame(view)),
                             drop=True)
        self.gateway.publish(inbox_tag(req.tenant, req.to),
                             encode_text(inbox_remove_frame(view)))

    async def _reconcile(self) -> None:
        """The safety net under the bus: every ``reconcile_interval`` read what changed in
        the store since the last look (with a margin) and push it where it is wanted."""
        interval = self.settings.reconcile_interval
        since = self.clock.now()
        while True:
            await self.clock.sleep(interval)
            now = self.clock.now()
            try:
                changed = await self.store.changed_since(since - interval, RECONCILE_LIMIT)
            except Exception as exc:
                log.warning("reconcile failed: %s", exc)
                continue
            since = now
            for req in changed:
                if self._interested(req.tenant, req.op_id, req.to):
                    self._push_from_store(req)
            cutoff = now - 4 * interval
            for key in [k for k, (t, _) in self._delivered.items() if t < cutoff]:
                del self._delivered[key]

    async def __aenter__(self) -> HubService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- effects released by rooms after commit

    def _emit(self, eff: Effect, rid: str) -> None:
        if isinstance(eff, InboxAdded):
            self.notifier.kick()  # the commit may have written deliveries (hub/notify)
            req = eff.request
            self._where[(req.tenant, req.op_id)] = (req.conversation, req.to)
            if self.bus.distributed:  # a local bus has nobody to wake: no event to build
                self._delivered[(req.tenant, req.op_id)] = (self.clock.now(), False)
                self.bus.publish(InboxChanged(req.tenant, req.to, req.op_id))
            n = self.gateway.publish(inbox_tag(req.tenant, req.to),
                                     inbox_add_text(req.view_text()))
            log.info("rid=%s op=%s room=%s:%s asked %s (%d inbox sockets)", rid, req.op_id,
                     req.tenant, req.conversation, req.to, n)
        elif isinstance(eff, Resolved):
            self.notifier.kick()
            req = eff.request
            if self.bus.distributed:
                self._delivered[(req.tenant, req.op_id)] = (self.clock.now(), True)
                self.bus.publish(RequestResolved(req.tenant, req.op_id, req.to))
            self._where.pop((req.tenant, req.op_id), None)
            self._release(req.tenant, request_bytes(req))
            self.alarms.cancel(req.tenant, req.op_id)
            waiters = self._waiters.pop((req.tenant, req.op_id), None)
            if waiters:
                snap = replace(req)
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(snap)
            view = req.view_text()
            self.gateway.publish(op_tag(req.tenant, req.op_id), resolved_text(view), drop=True)
            self.gateway.publish(inbox_tag(req.tenant, req.to),
                                 inbox_remove_text(req.op_id, view))
            log.info("rid=%s op=%s room=%s:%s %s by %s", rid, req.op_id, req.tenant,
                     req.conversation, req.status, req.actor)  # a StrEnum: %s is its text
        elif isinstance(eff, AlarmSet):
            self.alarms.set(eff.tenant, eff.conversation, eff.op_id, eff.deadline)
        elif isinstance(eff, DeadlineMoved):
            req = eff.request
            self.bus.publish(InboxChanged(req.tenant, req.to, req.op_id))
            # Same frame as a new item: inboxes treat a repeated inbox.add as an update.
            self.gateway.publish(inbox_tag(req.tenant, req.to), inbox_add_text(req.view_text()))

    def _on_room_loaded(self, core: RoomCore) -> None:
        for req in core.pending():
            self._where[(req.tenant, req.op_id)] = (req.conversation, req.to)

    def _fire_alarm(self, due: Due) -> None:
        self.rooms.post((due.tenant, due.conversation),
                        Envelope(DeadlineReached(OpId(due.op_id)), None, f"alarm:{due.op_id}"))

    # -- entry points

    def next_rid(self, prefix: str) -> str:
        """A request id for the logs: ``<prefix><n>``, counted per hub."""
        return f"{prefix}{next(self._rids)}"

    def forget_humans(self, tenant: str) -> None:
        """Drop the cached humans of ``tenant`` (one was just added)."""
        self._humans.pop(tenant, None)

    async def known_human(self, tenant: str, handle: str) -> bool:
        humans = self._humans.get(tenant)
        if humans is not None and handle in humans:
            return True
        humans = set(await self.store.list_humans(tenant))
        self._humans[tenant] = humans
        return handle in humans

    async def ask(self, who: Principal, ask: Ask, reply: Reply, rid: str = "-", *,
                  schema: Any = None, tools: Any = None) -> None:
        """Post an ask to its room.

        Raises:
            Overloaded: the room's mailbox is full.
            NotFound: no such human in the caller's tenant.
            LimitExceeded: a size or count limit (its code says which).
        """
        if schema is None:
            schema = ask.schema  # a form sent in the ask frame itself
        tenant = who.tenant
        # A full room refuses before the ask is checked and counted: refusing is what a
        # flooded room does thousands of times a second.
        self.rooms.admit((tenant, ask.conversation), rid)
        size = await self.check_ask(who, ask, schema, tools)

        def settle(r: Replied) -> None:
            # A new request keeps the place it reserved until it resolves; a refused ask or
            # a re-attach (the request was already counted) gives it back.
            if r.error is not None or r.attached:
                self._release(tenant, size)
            reply(r)

        try:
            self.rooms.post((tenant, ask.conversation),
                            Envelope(AskReceived(ask, tenant, who.label, schema, tools),
                                     settle, rid))
        except BaseException:
            self._release(tenant, size)
            raise

    async def check_ask(self, who: Principal, ask: Ask, schema: Any = None,
                        tools: Any = None) -> int:
        """Check an ask against the limits and reserve its place in the tenant's pending
        caps; returns the bytes reserved (give them back with ``_release``)."""
        s = self.settings
        if len(ask.question) > s.max_question_chars:
            raise LimitExceeded(f"question longer than {s.max_question_chars} characters",
                                code=ErrorCode.QUESTION_TOO_LARGE)
        if ask.choices is not None and (len(ask.choices) > s.max_choices
                                        or any(len(c) > 500 for c in ask.choices)):
            raise LimitExceeded(f"more than {s.max_choices} choices (or a choice over 500 "
                                "characters)", code=ErrorCode.TOO_MANY_CHOICES)
        # Each value encoded once: the context limit and the pending bytes both count them
        # (exactly as ``payload_bytes`` does, which encodes them as one list).
        context, default = _json_len(ask.context), _json_len(ask.default)
        extra = context + default + 3  # len(orjson.dumps([context, default]))
        if extra > s.max_context_bytes:
            raise LimitExceeded(f"context is {extra} bytes; the limit is "
                                f"{s.max_context_bytes}", code=ErrorCode.CONTEXT_TOO_LARGE)
        humans = self._humans.get(who.tenant)
        if (humans is None or ask.to not in humans) and \
                not await self.known_human(who.tenant, ask.to):
            raise NotFound(f"no human {ask.to!r} in this tenant")
        size = len(ask.question.encode()) + _json_len(ask.choices) + context + default + \
            _json_len(schema) + _json_len(tools) + 6
        usage = self._pending.get(who.tenant) or await self._usage(who.tenant)
        over = usage[0] >= s.max_pending_per_tenant or \
            usage[1] + size > s.max_pending_bytes_per_tenant
        if over and await self._exists(who.tenant, ask.op_id):
            # A re-attach (or a conflict) adds nothing: let the room answer it. Reserve a
            # place anyway, which the room's "attached" reply gives back.
            usage[0] += 1
            usage[1] += size
            return size
        if usage[0] >= s.max_pending_per_tenant:
            raise LimitExceeded(f"this tenant has {usage[0]} pending requests; the limit is "
                                f"{s.max_pending_per_tenant}", code=ErrorCode.TOO_MANY_PENDING)
        if usage[1] + size > s.max_pending_bytes_per_tenant:
            raise LimitExceeded(f"this tenant's pending requests hold {usage[1]} bytes; the "
                                f"limit is {s.max_pending_bytes_per_tenant}",
                                code=ErrorCode.TOO_MANY_PENDING)
        usage[0] += 1
        usage[1] += size
        return size

    async def _exists(self, tenant: str, op_id: str) -> bool:
        return (tenant, op_id) in self._where or \
            await self.store.get_request(tenant, op_id) is not None

    async def _usage(self, tenant: str) -> list[int]:
        """The tenant's [pending count, pending bytes], read from the store once."""
        while True:
            usage = self._pending.get(tenant)
            if usage is not None:
                return usage
            loading = self._pending_loading.get(tenant)
            if loading is not None:  # another ask is reading it: wait for that read
                await asyncio.shield(loading)
                continue
            fut = self._pending_loading[tenant] = asyncio.get_running_loop().create_future()
            try:
                count, size = await self.store.pending_usage(tenant)
                self._pending[tenant] = [count, size]
            finally:
                del self._pending_loading[tenant]
                fut.set_result(None)

    def _release(self, tenant: str, size: int) -> None:
        usage = self._pending.get(tenant)
        if usage is not None:
            usage[0] = max(0, usage[0] - 1)
            usage[1] = max(0, usage[1] - size)

    async def room_of(self, tenant: str, op_id: str) -> str | None:
        where = self._where.get((tenant, op_id))
        if where is not None:
            return where[0]
        req = await self.store.get_request(tenant, op_id)
        return req.conversation if req is not None else None

    async def post_op(self, who: Principal, event: Event, reply: Reply, rid: str = "-") -> None:
        """Route an event about an existing op_id to its room (NotFound if none)."""
        op_id: str = event.op_id
        conv = await self.room_of(who.tenant, op_id)
        if conv is None:
            reply(Replied(error=NotFound("no such request")))
            return
        self.rooms.post((who.tenant, conv), Envelope(event, reply, rid))

    async def wait(self, who: Principal, op_id: str, wait: float, reply: Reply,
                   rid: str = "-") -> None:
        await self.post_op(who, WaitRequested(OpId(op_id), wait), reply, rid)

    async def cancel(self, who: Principal, op_id: str, reply: Reply, rid: str = "-") -> None:
        await self.post_op(who, CancelRequested(OpId(op_id)), reply, rid)

    async def respond(self, who: Principal, op_id: str, status: Status, value: Any,
                      reply: Reply, rid: str = "-") -> None:
        """Post a human's answer to its room.

        Another human's request must look exactly like a missing one (no oracle, by content
        or by timing): unless the cached route says the request is this human's own, both
        cases take the same path — one store read, then ``not_found``."""
        assert who.role is Role.HUMAN
        where = self._where.get((who.tenant, op_id))
        if where is not None and where[1] == who.name:
            conv = where[0]
        else:
            req = await self.store.get_request(who.tenant, op_id)
            if req is None or req.to != who.name:
                reply(Replied(error=NotFound("no such request")))
                return
            conv = req.conversation
        self.rooms.post((who.tenant, conv),
                        Envelope(AnswerSubmitted(OpId(op_id), who.name, status, value), reply,
                                 rid))

    async def inbox(self, who: Principal) -> list[Request]:
        return await self.store.inbox(who.tenant, who.name)

    async def history(self, who: Principal, limit: int = 50) -> list[Request]:
        return await self.store.history(who.tenant, who.name, limit)

    # -- in-process blocking calls (HTTP API, chat completions)

    async def ask_and_wait(self, who: Principal, ask: Ask, rid: str = "-", *,
                           schema: Any = None, tools: Any = None) -> tuple[Request, bool]:
        """Ask and block up to ``ask.wait`` seconds. Returns (request, attached); the
        request may still be pending.

        Raises:
            HubError: what the room answered; ``Unauthorized`` if the caller's token is
                revoked while it blocks.
        """
        key = (who.tenant, ask.op_id)
        fut = self._add_waiter(key, who)  # subscribe, then read
        try:
            r = await self._round_trip(
                lambda reply: self.ask(who, ask, reply, rid, schema=schema, tools=tools))
            assert r.request is not None
            return await self._block(fut, r.request, ask.wait), r.attached
        finally:
            self._drop_waiter(key, who, fut)

    async def submit(self, who: Principal, ask: Ask, rid: str = "-", *,
                     schema: Any = None, tools: Any = None) -> tuple[Request, bool]:
        """Ask and return once the room has committed it: (request, attached)."""
        r = await self._round_trip(
            lambda reply: self.ask(who, ask, reply, rid, schema=schema, tools=tools))
        assert r.request is not None
        return r.request, r.attached

    async def wait_for(self, who: Principal, op_id: str, wait: float, rid: str = "-") -> Request:
        """Re-attach to a request (extending an open deadline) and block up to ``wait``.

        Raises:
            HubError: what the room answered; ``Unauthorized`` if the caller's token is
                revoked while it blocks.
        """
        key = (who.tenant, op_id)
        fut = self._add_waiter(key, who)
        try:
            r = await self._round_trip(lambda reply: self.wait(who, op_id, wait, reply, rid))
            assert r.request is not None
            return await self._block(fut, r.request, wait)
        finally:
            self._drop_waiter(key, who, fut)

    async def call(self, who: Principal, event: Event, rid: str = "-") -> Request:
        """Post an op_id event (cancel, respond) and return the room's answer."""
        if isinstance(event, AnswerSubmitted):
            r = await self._round_trip(lambda reply: self.respond(
                who, event.op_id, event.status, event.value, reply, rid))
        else:
            r = await self._round_trip(lambda reply: self.post_op(who, event, reply, rid))
        assert r.request is not None
        return r.request

    async def _round_trip(self, post: Callable[[Reply], Awaitable[None]]) -> Replied:
        """Post through ``post(reply)``, wait for the room's reply, raise its error: the one
        future → await → raise of every in-process caller."""
        done, reply = self.future_reply()
        await post(reply)
        r = await done
        if r.error is not None:
            raise r.error
        return r

    async def _block(self, fut: asyncio.Future[Request], req: Request, wait: float) -> Request:
        if req.terminal or wait <= 0:
            return req
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            return req

    def _add_waiter(self, key: tuple[str, str], who: Principal) -> asyncio.Future[Request]:
        fut: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        self._blocked.setdefault(who.token_hash, set()).add(fut)
        self.watch_expiry(who)
        return fut

    def _drop_waiter(self, key: tuple[str, str], who: Principal,
                     fut: asyncio.Future[Request]) -> None:
        lst = self._waiters.get(key)
        if lst is not None:
            if fut in lst:
                lst.remove(fut)
            if not lst:
                del self._waiters[key]
        blocked = self._blocked.get(who.token_hash)
        if blocked is not None:
            blocked.discard(fut)
            if not blocked:
                del self._blocked[who.token_hash]
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: an Unauthorized nobody awaited is not an error

    @staticmethod
    def future_reply() -> tuple[asyncio.Future[Replied], Reply]:
        """A reply callback that completes a future (for in-process callers)."""
        fut: asyncio.Future[Replied] = asyncio.get_running_loop().create_future()

        def reply(r: Replied) -> None:
            if not fut.done():
                # Snapshot: the request object may change after this callback returns.
                fut.set_result(Replied(request=_snapshot(r.request), error=r.error,
                                       attached=r.attached))

        return fut, reply

    def announce_restart(self, after_ms: tuple[int, int] = (250, 2000)) -> int:
        """Tell every socket the hub is going away, and how long to wait (a random pause in
        ``after_ms``) before reconnecting, so clients do not all come back at once."""
        text = encode_text(reconnect_frame(after_ms))
        n = 0
        for conn in list(self.gateway.connections):
            n += conn.push(text)
        return n

    def statistics(self) -> dict[str, Any]:
        return {
            "rooms": self.rooms.statistics(),
            "gateway": self.gateway.statistics(),
            "alarms": self.alarms.statistics(),
            "store": self.store.statistics(),
            "bus": self.bus.statistics(),
            "notify": self.notifier.statistics(),
            "routes": len(self._where),
        }


def _snapshot(req: Request | None) -> Request | None:
    return replace(req) if req is not None else None


def payload_bytes(question: str, choices: Any, context: Any, default: Any, schema: Any,
                  tools: Any) -> int:
    """What a pending request weighs against its tenant's ``max_pending_bytes_per_tenant``."""
    return len(question.encode()) + len(orjson.dumps([choices, context, default, schema, tools]))


def _json_len(value: Any) -> int:
    """``len(orjson.dumps(value))``, without encoding the common ``None``."""
    return 4 if value is None else len(orjson.dumps(value))


def request_bytes(req: Request) -> int:
    return payload_bytes(req.question, req.choices, req.context, req.default, req.schema,
                         req.tools)


def listing(reqs: list[Request]) -> list[dict[str, Any]]:
    """Request views for a listing (inbox, history). One row that cannot be encoded (a bug,
    or data stored before a limit existed) becomes a placeholder naming it, and never
    breaks the listing of every other request."""
    out: list[dict[str, Any]] = []
    for req in reqs:
        view = req.view()
        try:
            orjson.dumps(view)
        except TypeError as exc:
            log.error("op=%s cannot be listed: %s", req.op_id, exc)
            view = {**view, "question": "(this request cannot be shown: its data is damaged)",
                    "context": None, "default": None, "schema": None, "tools": None,
                    "choices": None, "value": None, "damaged": True}
        out.append(view)
    return out
