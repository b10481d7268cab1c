"""The hub without its transports: wires store, rooms, alarms and gateway together.

Every entry point (WebSocket frame, HTTP call, alarm) comes through here. Effects that
rooms release after commit are turned into pushes here, each frame encoded once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import orjson

from hub.alarms import Alarms
from hub.clock import Clock, SystemClock
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
from hub.gateway import Gateway, inbox_tag, op_tag, token_tag
from hub.protocol import Ask, CloseCode, ErrorCode, LimitExceeded, NotFound, OpId, Status, T
from hub.rooms import Envelope, Reply, RoomHost
from hub.store import Due, Principal, Role, Store

log = logging.getLogger("a2h")


class HubService:
    def __init__(self, settings: Settings, store: Store, clock: Clock | None = None) -> None:
        self.settings = settings
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.gateway = Gateway()
        self.rooms = RoomHost(store, self.clock, self._emit,
                              mailbox_size=settings.room_mailbox,
                              idle_seconds=settings.room_idle,
                              on_loaded=self._on_room_loaded)
        self.alarms = Alarms(store, self.clock, self._fire_alarm,
                             sweep_interval=settings.alarm_sweep, retention=settings.retention)
        # (tenant, op_id) -> conversation, for pending requests this process has seen: lets a
        # respond/wait/cancel by op_id find its room without a store read.
        self._where: dict[tuple[str, str], str] = {}
        self._humans: dict[str, set[str]] = {}
        # Pending requests per tenant, counted from the store once, then kept by effects.
        self._pending: dict[str, int] = {}
        # In-process waiters (HTTP long-polls, chat completions): (tenant, op_id) -> futures.
        self._waiters: dict[tuple[str, str], list[asyncio.Future[Request]]] = {}
        self._alarm_task: asyncio.Task[None] | None = None
        self._revoke_task: asyncio.Task[None] | None = None
        self.started_at = 0.0

    # -- lifecycle

    async def start(self) -> None:
        await self.store.open()
        self.started_at = self.clock.now()
        self.rooms.start()
        loop = asyncio.get_running_loop()
        self._alarm_task = loop.create_task(self.alarms.run(), name="a2h alarms")
        self._revoke_task = loop.create_task(self._watch_revocations(), name="a2h revocations")

    async def _watch_revocations(self) -> None:
        """Close the sockets of revoked tokens within about a second, wherever the
        revocation came from (HTTP, or the CLI writing to the database file)."""
        since = self.clock.now() - 5
        while True:
            await asyncio.sleep(0.5)
            try:
                now = self.clock.now()
                for h in await self.store.revoked_since(since - 5):
                    if self.gateway.close_tag(token_tag(h), CloseCode.REVOKED, "token revoked"):
                        log.info("closed sockets of a revoked token")
                since = now
            except Exception:
                log.exception("revocation check failed")

    async def stop(self) -> None:
        await self.rooms.aclose()
        for task in (self._alarm_task, self._revoke_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        await self.store.close()

    async def __aenter__(self) -> HubService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- effects released by rooms after commit

    def _emit(self, eff: Effect, rid: str) -> None:
        if isinstance(eff, InboxAdded):
            req = eff.request
            self._where[(req.tenant, req.op_id)] = req.conversation
            if req.tenant in self._pending:
                self._pending[req.tenant] += 1
            text = orjson.dumps({"type": T.INBOX_ADD, "request": req.view()}).decode()
            n = self.gateway.publish(inbox_tag(req.tenant, req.to), text)
            log.info("rid=%s op=%s room=%s:%s asked %s (%d inbox sockets)", rid, req.op_id,
                     req.tenant, req.conversation, req.to, n)
        elif isinstance(eff, Resolved):
            req = eff.request
            self._where.pop((req.tenant, req.op_id), None)
            if req.tenant in self._pending:
                self._pending[req.tenant] -= 1
            self.alarms.cancel(req.tenant, req.op_id)
            waiters = self._waiters.pop((req.tenant, req.op_id), None)
            if waiters:
                snap = replace(req)
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(snap)
            view = req.view()
            self.gateway.publish(op_tag(req.tenant, req.op_id),
                                 orjson.dumps({"type": T.RESOLVED, "request": view}).decode(),
                                 drop=True)
            self.gateway.publish(inbox_tag(req.tenant, req.to), orjson.dumps(
                {"type": T.INBOX_REMOVE, "op_id": req.op_id, "request": view}).decode())
            log.info("rid=%s op=%s room=%s:%s %s by %s", rid, req.op_id, req.tenant,
                     req.conversation, req.status.value, req.actor)
        elif isinstance(eff, DeadlineMoved):
            req = eff.request
            # Same frame as a new item: inboxes treat a repeated inbox.add as an update.
            self.gateway.publish(inbox_tag(req.tenant, req.to), orjson.dumps(
                {"type": T.INBOX_ADD, "request": req.view()}).decode())
        elif isinstance(eff, AlarmSet):
            self.alarms.set(eff.tenant, eff.conversation, eff.op_id, eff.deadline)

    def _on_room_loaded(self, core: RoomCore) -> None:
        for req in core.pending():
            self._where[(req.tenant, req.op_id)] = req.conversation

    def _fire_alarm(self, due: Due) -> None:
        self.rooms.post((due.tenant, due.conversation),
                        Envelope(DeadlineReached(OpId(due.op_id)), None, f"alarm:{due.op_id}"))

    # -- entry points

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
        await self.check_ask(who, ask)
        self.rooms.post((who.tenant, ask.conversation),
                        Envelope(AskReceived(ask, who.tenant, who.label, schema, tools),
                                 reply, rid))

    async def check_ask(self, who: Principal, ask: Ask) -> None:
        s = self.settings
        if len(ask.question) > s.max_question_chars:
            raise LimitExceeded(f"question longer than {s.max_question_chars} characters",
                                code=ErrorCode.QUESTION_TOO_LARGE)
        if ask.choices is not None and (len(ask.choices) > s.max_choices
                                        or any(len(c) > 500 for c in ask.choices)):
            raise LimitExceeded(f"more than {s.max_choices} choices (or a choice over 500 "
                                "characters)", code=ErrorCode.TOO_MANY_CHOICES)
        if ask.context is not None or ask.default is not None:
            size = len(orjson.dumps([ask.context, ask.default]))
            if size > s.max_context_bytes:
                raise LimitExceeded(f"context is {size} bytes; the limit is "
                                    f"{s.max_context_bytes}", code=ErrorCode.CONTEXT_TOO_LARGE)
        if not await self.known_human(who.tenant, ask.to):
            raise NotFound(f"no human {ask.to!r} in this tenant")
        pending = self._pending.get(who.tenant)
        if pending is None:
            pending = self._pending[who.tenant] = (await self.store.pending_usage(who.tenant))[0]
        if pending >= s.max_pending_per_tenant:
            raise LimitExceeded(f"this tenant has {pending} pending requests; the limit is "
                                f"{s.max_pending_per_tenant}", code=ErrorCode.TOO_MANY_PENDING)

    async def room_of(self, tenant: str, op_id: str) -> str | None:
        conv = self._where.get((tenant, op_id))
        if conv is not None:
            return conv
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
        assert who.role is Role.HUMAN
        await self.post_op(who, AnswerSubmitted(OpId(op_id), who.name, status, value), reply, rid)

    async def inbox(self, who: Principal) -> list[Request]:
        return await self.store.inbox(who.tenant, who.name)

    async def history(self, who: Principal, limit: int = 50) -> list[Request]:
        return await self.store.history(who.tenant, who.name, limit)

    # -- in-process blocking calls (HTTP API, chat completions)

    async def ask_and_wait(self, who: Principal, ask: Ask, rid: str = "-", *,
                           schema: Any = None, tools: Any = None) -> tuple[Request, bool]:
        """Ask and block up to ``ask.wait`` seconds. Returns (request, attached); the
        request may still be pending. Raises the HubError the room answered."""
        key = (who.tenant, ask.op_id)
        fut = self._add_waiter(key)  # subscribe, then read
        try:
            req, attached = await self.submit(who, ask, rid, schema=schema, tools=tools)
            return await self._block(fut, req, ask.wait), attached
        finally:
            self._drop_waiter(key, fut)

    async def submit(self, who: Principal, ask: Ask, rid: str = "-", *,
                     schema: Any = None, tools: Any = None) -> tuple[Request, bool]:
        """Ask and return once the room has committed it: (request, attached)."""
        done, reply = self.future_reply()
        await self.ask(who, ask, reply, rid, schema=schema, tools=tools)
        r = await done
        if r.error is not None:
            raise r.error
        assert r.request is not None
        return r.request, r.attached

    async def wait_for(self, who: Principal, op_id: str, wait: float, rid: str = "-") -> Request:
        """Re-attach to a request (extending an open deadline) and block up to ``wait``."""
        key = (who.tenant, op_id)
        fut = self._add_waiter(key)
        try:
            done, reply = self.future_reply()
            await self.wait(who, op_id, wait, reply, rid)
            r = await done
            if r.error is not None:
                raise r.error
            assert r.request is not None
            return await self._block(fut, r.request, wait)
        finally:
            self._drop_waiter(key, fut)

    async def call(self, who: Principal, event: Event, rid: str = "-") -> Request:
        """Post an op_id event (cancel, respond) and return the room's answer."""
        done, reply = self.future_reply()
        await self.post_op(who, event, reply, rid)
        r = await done
        if r.error is not None:
            raise r.error
        assert r.request is not None
        return r.request

    async def _block(self, fut: asyncio.Future[Request], req: Request, wait: float) -> Request:
        if req.terminal or wait <= 0:
            return req
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            return req

    def _add_waiter(self, key: tuple[str, str]) -> asyncio.Future[Request]:
        fut: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        return fut

    def _drop_waiter(self, key: tuple[str, str], fut: asyncio.Future[Request]) -> None:
        lst = self._waiters.get(key)
        if lst is not None:
            if fut in lst:
                lst.remove(fut)
            if not lst:
                del self._waiters[key]

    @staticmethod
    def future_reply() -> tuple[asyncio.Future[Replied], Reply]:
        """A reply callback that completes a future (for HTTP handlers)."""
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
        text = orjson.dumps({"type": T.RECONNECT, "after_ms": list(after_ms)}).decode()
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
            "routes": len(self._where),
        }


def _snapshot(req: Request | None) -> Request | None:
    return replace(req) if req is not None else None
