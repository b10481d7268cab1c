"""The WebSocket endpoint: one session per socket, frames in, replies and pushes out.

The session decodes each frame once (``hub.protocol``), checks the role, registers
interest *before* it asks for state (subscribe, then read: invariant 7) and hands the
work to the service. Replies come back through callbacks after the room's commit, so one
socket can have many requests in flight.

Frame types beyond the core set (runs) go to the handlers ``create_app`` registers in
``app.state.frame_handlers``. Work a handler starts runs in the session's tasks
(``Session.spawn``), which the endpoint cancels and awaits when the socket ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from starlette.websockets import WebSocket

from hub.core import Replied
from hub.errors import (
    BinaryFrame,
    Denied,
    ErrorCode,
    FrameError,
    HubError,
    LimitExceeded,
    Overloaded,
    RateLimited,
    RetryLater,
)
from hub.gateway import Connection, WriteNow, inbox_tag, op_tag, token_tag
from hub.protocol import (
    Ask,
    Cancel,
    CloseCode,
    HistoryQuery,
    InboxQuery,
    Ping,
    Respond,
    Unwatch,
    Wait,
    decode_client_frame,
    encode_text,
    error_frame,
    hello_frame,
    ok_frame,
    ok_request_text,
)
from hub.server.auth import authenticate
from hub.service import HubService, listing
from hub.store import Principal, Role

log = logging.getLogger("a2h.ws")

#: A handler for a frame type outside the core set (e.g. runs and journals): ``async
#: handler(session, frame)``. Each handler checks roles itself.
FrameHandler = Callable[["Session", Any], Awaitable[None]]

#: Frames one socket may have handled in a row before it lets the loop run others.
FAIR_FRAMES = 8
#: A socket whose last ``FAIR_FRAMES`` frames were all refused (``overloaded``,
#: ``rate_limited``) is not read for this long: its next frames wait in the kernel, where TCP
#: pushes back on the sender, instead of costing everyone else the work of refusing them.
#: Every frame read is still answered; none is dropped.
REFUSED_PAUSE = 0.05

AGENT_FRAMES = (Ask, Wait, Cancel, Unwatch)
HUMAN_FRAMES = (InboxQuery, HistoryQuery, Respond)


class Session:
    def __init__(self, hub: HubService, who: Principal, conn: Connection,
                 handlers: Mapping[type, FrameHandler] | None = None) -> None:
        self.hub = hub
        self.who = who
        self.conn = conn
        self.cid = conn.id
        self.handlers: Mapping[type, FrameHandler] = handlers or {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Token bucket: ``rate`` messages per second, bursts up to ``burst``.
        self._tokens = hub.settings.burst
        self._refilled = hub.clock.now()
        #: frames refused (``overloaded``, ``rate_limited``) so far
        self.refused = 0

    # -- the session's tasks: work that outlives the frame handler, owned by the session

    @property
    def in_flight(self) -> int:
        """Tasks of this session still running."""
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=f"a2h session c{self.cid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Cancel the session's tasks and wait until they have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # a cancellation of aclose itself propagates
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                log.error("conn=%s task failed", self.cid, exc_info=task.exception())

    def allow(self) -> bool:
        s = self.hub.settings
        now = self.hub.clock.now()
        self._tokens = min(s.burst, self._tokens + (now - self._refilled) * s.rate)
        self._refilled = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def rate_limited(self) -> RateLimited:
        """The error for a frame over the rate, with the pause until the next one fits."""
        rate = self.hub.settings.rate
        return RateLimited(f"more than {rate:g} messages per second on this connection; "
                           "slow down", retry_after=max(0.0, 1.0 - self._tokens) / rate)

    def send(self, obj: Any) -> None:
        try:
            text = encode_text(obj)
        except TypeError:  # orjson could not encode it (a bug, or a value nested too deep)
            fid = obj.get("id") if isinstance(obj, dict) else None
            log.exception("conn=%s reply to frame %s could not be encoded", self.cid, fid)
            text = encode_text(error_frame(RetryLater("internal error: the reply could not be "
                                                      "encoded"), fid))
        self.conn.push(text)

    def send_error(self, exc: HubError, fid: int | None) -> None:
        if isinstance(exc, Overloaded | RateLimited):
            self.refused += 1
        self.send(error_frame(exc, fid))

    def rid(self, fid: int) -> str:
        return f"c{self.cid}.{fid}"

    def _reply_for(self, fid: int, op_id: str | None) -> Any:
        def reply(r: Replied) -> None:
            if r.error is not None:
                exc = r.error if isinstance(r.error, HubError) else RetryLater(str(r.error))
                self.send_error(exc, fid)
                if op_id is not None:
                    self.hub.gateway.unsubscribe(self.conn, op_tag(self.who.tenant, op_id))
                return
            assert r.request is not None
            try:
                # The view encoded once for this state, shared with the pushes.
                text = ok_request_text(fid, r.request.view_text(), r.attached)
            except TypeError:
                # Not encodable: send() answers with an error frame instead.
                self.send(ok_frame(fid, request=r.request.view(),
                                   **({"attached": True} if r.attached else {})))
            else:
                self.conn.push(text)
            if op_id is not None and r.request.terminal:
                self.hub.gateway.unsubscribe(self.conn, op_tag(self.who.tenant, op_id))
        return reply

    def handle_binary(self) -> None:
        """A binary frame costs a token like any other frame, then is refused."""
        if not self.allow():
            self.send_error(self.rate_limited(), None)
            return
        self.send_error(BinaryFrame("binary frames are not accepted; send JSON text"), None)

    async def handle(self, data: str) -> None:
        allowed = self.allow()
        try:
            frame = decode_client_frame(data, self.hub.settings.max_frame)
        except FrameError as exc:
            self.send_error(exc if allowed else self.rate_limited(), exc.frame_id)
            return
        if not allowed:  # decoded anyway (cheap) so the error names the frame's id
            self.send_error(self.rate_limited(), frame.id)
            return
        ext = self.handlers.get(type(frame))
        if ext is not None:
            try:
                await ext(self, frame)
            except HubError as exc:
                self.send_error(exc, frame.id)
            except Exception:
                log.exception("rid=%s frame failed", self.rid(frame.id))
                self.send_error(RetryLater("internal error"), frame.id)
            return
        role = self.who.role
        if isinstance(frame, AGENT_FRAMES) and role is Role.HUMAN or \
                isinstance(frame, HUMAN_FRAMES) and role is not Role.HUMAN:
            self.send_error(Denied(f"a {role.value} token cannot send {type(frame).__name__.lower()}"),
                            frame.id)
            return
        hub = self.hub
        tenant = self.who.tenant
        try:
            if isinstance(frame, Ask):
                hub.gateway.subscribe(self.conn, op_tag(tenant, frame.op_id))
                try:
                    await hub.ask(self.who, frame, self._reply_for(frame.id, frame.op_id),
                                  self.rid(frame.id))
                except HubError:
                    hub.gateway.unsubscribe(self.conn, op_tag(tenant, frame.op_id))
                    raise
            elif isinstance(frame, Wait):
                hub.gateway.subscribe(self.conn, op_tag(tenant, frame.op_id))
                await hub.wait(self.who, frame.op_id, frame.wait,
                               self._reply_for(frame.id, frame.op_id), self.rid(frame.id))
            elif isinstance(frame, Cancel):
                await hub.cancel(self.who, frame.op_id, self._reply_for(frame.id, None),
                                 self.rid(frame.id))
            elif isinstance(frame, Unwatch):
                hub.gateway.unsubscribe(self.conn, op_tag(tenant, frame.op_id))
                self.send(ok_frame(frame.id))
            elif isinstance(frame, Respond):
                await hub.respond(self.who, frame.op_id, frame.status, frame.value,
                                  self._reply_for(frame.id, None), self.rid(frame.id))
            elif isinstance(frame, InboxQuery):
                self.send(ok_frame(frame.id, items=listing(await hub.inbox(self.who))))
            elif isinstance(frame, HistoryQuery):
                self.send(ok_frame(frame.id, items=listing(await hub.history(self.who, frame.limit))))
            elif isinstance(frame, Ping):
                self.send(ok_frame(frame.id, now=hub.clock.now()))
        except HubError as exc:
            self.send_error(exc, frame.id)
        except Exception:
            log.exception("rid=%s frame failed", self.rid(frame.id))
            self.send_error(RetryLater("internal error"), frame.id)


try:  # the server the hub runs under (hub.cli); any other just takes the ASGI path
    from uvicorn.protocols.websockets.websockets_sansio_impl import (
        WebSocketsSansIOProtocol as _SansIO,
    )
    from websockets.protocol import State as _State
except ImportError:  # pragma: no cover
    _SansIO = None  # type: ignore[assignment,misc]


def text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked WebSocket text frame (RFC 6455 5.2), as a server sends
    it with no extension: the same bytes as ``websockets``' ``Frame.serialize``, in a fifth
    of its time (a cycle sends five of them)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return b"\x81\x7e" + n.to_bytes(2, "big") + payload
    return b"\x81\x7f" + n.to_bytes(8, "big") + payload


def _write_now(websocket: WebSocket) -> WriteNow | None:
    """Write frames straight through uvicorn's ``websockets-sansio`` protocol, several in
    one ``transport.write``, without the ASGI ``send`` coroutines; None for any other
    server (the in-process test client, another implementation): pushes then go through
    ``websocket.send_text``.

    The protocol is the owner of the ASGI ``receive`` callable this socket was given. The
    checks are those of its own ``send`` for a ``websocket.send`` message: nothing once a
    close was sent or the peer is gone, and nothing while the transport is paused (False:
    the connection's writer task then waits for it through ``send_text``)."""
    proto: Any = getattr(getattr(websocket, "_receive", None), "__self__", None)
    if proto is None or _SansIO is None or not isinstance(proto, _SansIO):
        return None
    ws_conn = getattr(proto, "conn", None)
    transport = getattr(proto, "transport", None)
    writable = getattr(proto, "writable", None)
    if ws_conn is None or transport is None or writable is None or \
            not hasattr(proto, "close_sent") or not hasattr(proto, "disconnected"):
        return None
    send_text = ws_conn.send_text
    data_to_send = ws_conn.data_to_send
    opened = _State.OPEN

    def write_now(frames: list[str]) -> bool:
        if proto.close_sent or proto.disconnected or not writable.is_set() or \
                transport.is_closing():
            return False
        if ws_conn.state is not opened or ws_conn.extensions:
            for text in frames:  # websockets raises what it must (a closing socket)
                send_text(text.encode())
            transport.write(b"".join(data_to_send()))
            return True
        chunks = data_to_send()  # whatever websockets queued goes first (a pong)
        chunks.extend(text_frame(text.encode()) for text in frames)
        transport.write(b"".join(chunks))
        return True

    return write_now


async def websocket_endpoint(websocket: WebSocket) -> None:
    hub: HubService = websocket.app.state.hub
    try:
        who = await authenticate(websocket, Role.AGENT, Role.HUMAN)
    except HubError:  # no, a bad or an admin token; a cookie socket from a foreign origin
        # Before accept: uvicorn answers the upgrade with HTTP 403.
        await websocket.close(code=CloseCode.POLICY)
        return
    await websocket.accept()
    max_frame = hub.settings.max_frame
    gw = hub.gateway
    limit = hub.settings.max_sockets_per_token
    if len(gw.members(token_tag(who.token_hash))) >= limit:
        err = LimitExceeded(f"this token already has {limit} open sockets",
                            code=ErrorCode.TOO_MANY_SOCKETS)
        await websocket.send_text(encode_text(error_frame(err, None)))
        await websocket.close(code=CloseCode.POLICY, reason="too many sockets")
        return

    async def close(code: int, reason: str) -> None:
        await websocket.close(code=code, reason=reason)

    conn = Connection(websocket.send_text, close, limit=hub.settings.outbox_bytes, meta=who,
                      write_now=_write_now(websocket))
    session = Session(hub, who, conn, websocket.app.state.frame_handlers)
    gw.add(conn)
    gw.subscribe(conn, token_tag(who.token_hash))
    hub.watch_expiry(who)
    if who.role is Role.HUMAN:
        gw.subscribe(conn, inbox_tag(who.tenant, who.name))
    session.send(hello_frame(who.role.value, who.tenant, who.name, hub.clock.now(),
                             hub.settings.heartbeat))
    handled = 0
    refused_run = 0  # frames in a row that were refused
    try:
        while True:
            msg = await websocket.receive()
            if msg["type"] == "websocket.disconnect":
                break
            text = msg.get("text")
            if text is None:
                data = msg.get("bytes") or b""
                if len(data) > max_frame:
                    conn.kill(CloseCode.TOO_BIG, "frame too big")
                    break
                session.handle_binary()
                if conn.closed:
                    break
                continue
            if len(text) > max_frame:
                conn.kill(CloseCode.TOO_BIG, "frame too big")
                break
            refused = session.refused
            await session.handle(text)
            if conn.closed:
                break
            refused_run = refused_run + 1 if session.refused > refused else 0
            if refused_run >= FAIR_FRAMES:
                refused_run = handled = 0
                await session.hub.clock.sleep(REFUSED_PAUSE)
                continue
            handled += 1
            if handled >= FAIR_FRAMES:
                # Frames that arrived together are all queued already: handled back to
                # back, a burst from one socket would hold the loop from everyone else.
                handled = 0
                await asyncio.sleep(0)
    except Exception as exc:  # the socket broke under us
        log.debug("conn=%s ended: %r", conn.id, exc)
    finally:
        gw.remove(conn)
        await session.aclose()
        await conn.aclose()
