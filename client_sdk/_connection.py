"""The engine under :class:`client_sdk.Hub`: one multiplexed WebSocket, reconnect with
failover, and the retry policy of every call.

Theory of operation
-------------------
Every call is a frame with an integer ``id`` and a future. One task, the *supervisor*,
owns the socket: it reads frames, completes futures from ``ok``/``error`` replies and wakes
waiters on ``resolved`` pushes. When the socket drops it fails the calls in flight with
:class:`Disconnected`, reconnects (jittered exponential backoff; each attempt goes to the
next URL, so a dead node costs one attempt), re-sends the frame of every op_id someone
waits on (same op_id: the hub re-attaches, never creates a second request), and reads
again. It stops only when the client closes, when reconnecting is off, or when the hub
refuses the token (revoked, unknown): those are final (``fatal``). Any other failure — a
refused TCP connection, a handshake cut off, a garbled first frame — is one more attempt.

A send that fails means the socket is gone, even if the supervisor has not noticed yet
(right after a hub is killed, ``send`` fails at once without awaiting anything): the
caller aborts the socket, so the supervisor notices, and marks the client disconnected,
so the next :meth:`Connection.ready` really waits for the reconnect. Every retry awaits a
jittered pause first: no path can spin the event loop, and ``asyncio.wait_for`` around
any call can always interrupt it.

What is retried (the rest raise at once):

==========================  ===========================================================
failure                     retried by
==========================  ===========================================================
socket dropped              ``attach`` (ask/wait by op_id) and ``call_retrying`` (calls
                            safe to repeat: respond, inbox, history, ping, run frames)
``rate_limited``            the same calls, after the hub's ``retry_after`` (+ jitter)
anything else               nobody: it is the caller's error
==========================  ===========================================================

Retries stop at the call's deadline: its ``wait`` plus ``retry_timeout`` for ask/wait,
``retry_timeout`` for the others; then the last error is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Sequence
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from client_sdk.errors import (
    A2HError,
    AccessDenied,
    ConnectionLost,
    RateLimited,
    RetryableError,
    from_frame,
)
from hub.errors import ErrorCode
from hub.protocol import CloseCode, Status, T

log = logging.getLogger("a2h.sdk")

Frame = dict[str, Any]

#: How long past its own wait a call waits for the hub's reply.
REPLY_GRACE = 30.0


class Disconnected(Exception):
    """Internal: the socket dropped before the hub answered this frame."""


def ws_url(url: str) -> str:
    """``http://host:port`` (or ``ws://…``) → ``ws://host:port/ws``."""
    base = url.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[4:]
    return base if base.endswith("/ws") else base + "/ws"


def _jittered(seconds: float) -> float:
    """A pause of at least ``seconds`` (a hint is a floor), spread to avoid herds."""
    return seconds * random.uniform(1.0, 1.5)


class Connection:
    """The socket, its supervisor task, and the calls in flight. Private to the SDK."""

    def __init__(self, urls: Sequence[str], token: str, *, reconnect: bool,
                 max_backoff: float, open_timeout: float, retry_timeout: float) -> None:
        if not urls:
            raise ValueError("give at least one hub URL")
        self.urls = [ws_url(u) for u in urls]
        self._current = 0
        self._token = token
        self._reconnect = reconnect
        self._max_backoff = max_backoff
        self._open_timeout = open_timeout
        self.retry_timeout = retry_timeout
        self._ws: ClientConnection | None = None
        self._ids = 0
        self._calls: dict[int, asyncio.Future[Frame]] = {}
        self._watchers: dict[str, list[asyncio.Future[Frame]]] = {}
        # op_id -> the ask/wait frame that attached it, re-sent after a reconnect.
        self._attached: dict[str, Frame] = {}
        self._inbox_queues: list[asyncio.Queue[Frame | None]] = []
        self._connected = asyncio.Event()
        self._closed = False
        self.fatal: A2HError | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self.hello: Frame = {}
        self._restart_pause: float | None = None  # from a "reconnect" frame
        self.reconnects = 0

    @property
    def ws_url(self) -> str:
        """The URL of the socket in use (or last used)."""
        return self.urls[self._current]

    def backoff(self, attempt: int) -> float:
        """Jittered exponential backoff: ~0.1 s, 0.2 s, … up to ``max_backoff``."""
        step: float = min(self._max_backoff, 0.05 * 2 ** min(attempt, 10))
        return step * random.uniform(0.5, 1.5)

    # -- lifecycle

    async def connect(self) -> None:
        """Open the socket: each URL once, in order, until one answers.

        Raises:
            AccessDenied: the hub refused the token.
            ConnectionLost: no URL could be reached.
        """
        if self._supervisor is not None:
            return
        last: A2HError = ConnectionLost("no hub URL")
        for i in range(len(self.urls)):
            try:
                await self._open((self._current + i) % len(self.urls))
                break
            except AccessDenied:
                raise
            except A2HError as exc:
                last = exc
        else:
            raise last
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name="a2h sdk supervisor")

    async def close(self) -> None:
        """Close the socket and stop the supervisor; calls in flight get ConnectionLost.

        Never swallows the cancellation of the task that calls it."""
        self._closed = True
        ws, sup = self._ws, self._supervisor
        try:
            if ws is not None:
                with contextlib.suppress(ConnectionClosed, OSError):
                    await ws.close()
        finally:
            if sup is not None and not sup.done():
                sup.cancel()
        if sup is not None:
            # Waits without raising sup's own outcome; our own cancellation still raises.
            await asyncio.wait([sup])
            if not sup.cancelled() and sup.exception() is not None:
                log.error("a2h sdk supervisor failed", exc_info=sup.exception())
        self._finish(ConnectionLost("client closed"))

    async def _open(self, index: int) -> None:
        url = self.urls[index]
        try:
            ws = await connect(url, additional_headers={
                "Authorization": f"Bearer {self._token}"}, compression=None,
                open_timeout=self._open_timeout, max_size=16 * 1024 * 1024,
                ping_interval=20, ping_timeout=20)
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise AccessDenied("the hub refused this token",
                                   code=ErrorCode.UNAUTHORIZED) from None
            raise RetryableError(f"{url} answered HTTP {exc.response.status_code}") from None
        except (TimeoutError, OSError, WebSocketException) as exc:
            # WebSocketException: e.g. the handshake was cut off (InvalidMessage).
            raise ConnectionLost(f"cannot reach {url}: {exc!r}") from None
        try:
            hello = orjson.loads(await asyncio.wait_for(ws.recv(), self._open_timeout))
        except BaseException as exc:
            ws.transport.abort()
            if isinstance(exc, (ConnectionClosed, TimeoutError, orjson.JSONDecodeError)):
                raise ConnectionLost(f"{url} closed before its hello: {exc!r}") from None
            raise
        if not isinstance(hello, dict) or hello.get("type") != T.HELLO:
            ws.transport.abort()
            raise RetryableError(f"unexpected first frame from {url}: {hello!r}")
        self.hello = hello
        self._current = index
        self._ws = ws
        self._connected.set()

    async def _supervise(self) -> None:
        attempt = 0
        reattach = False
        while True:
            ws = self._ws
            if ws is not None:
                await self._serve(ws, reattach)
                self._down(ws)
                if self._closed or not self._reconnect:
                    self._finish(ConnectionLost("connection closed"))
                    return
                if ws.close_code == CloseCode.REVOKED:
                    self._finish(AccessDenied("token revoked", code=ErrorCode.UNAUTHORIZED))
                    return
            attempt += 1
            pause, self._restart_pause = self._restart_pause, None
            await asyncio.sleep(pause if pause is not None else self.backoff(attempt))
            try:
                # Failover: each attempt goes to the next URL, starting after the lost one.
                await self._open((self._current + attempt) % len(self.urls))
            except AccessDenied as exc:
                self._finish(exc)
                return
            except Exception as exc:  # anything else is one more attempt
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
                continue
            attempt = 0
            reattach = True
            self.reconnects += 1

    async def _serve(self, ws: ClientConnection, reattach: bool) -> None:
        """Read ``ws`` until it closes; a frame the SDK cannot read drops the socket."""
        try:
            if reattach:
                await self._reattach(ws)
            async for raw in ws:
                self._dispatch(orjson.loads(raw))
        except ConnectionClosed:
            pass
        except Exception as exc:  # a garbled frame: start over on a fresh socket
            log.warning("a2h sdk: dropping the connection: %r", exc)
            ws.transport.abort()

    def _down(self, ws: ClientConnection) -> None:
        ws.transport.abort()  # a no-op if closed; never leave a half-open socket behind
        if self._ws is ws:
            self._ws = None
        self._connected.clear()
        self._fail_calls(Disconnected())

    def lost(self, ws: ClientConnection) -> None:
        """A send on ``ws`` failed: the socket is gone even if the supervisor has not
        noticed. Abort it (the supervisor then reconnects) and stop claiming to be
        connected, so callers wait for the new socket instead of retrying at once."""
        if self._ws is ws and self.fatal is None:
            self._connected.clear()
        ws.transport.abort()

    def _finish(self, exc: A2HError) -> None:
        """Final: no more reconnects. Wake everyone so they observe ``exc``."""
        if self.fatal is None:
            self.fatal = exc
        self._connected.set()
        self._fail_calls(exc)
        for futs in self._watchers.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(self.fatal)
        for q in self._inbox_queues:
            q.put_nowait(None)

    async def _reattach(self, ws: ClientConnection) -> None:
        """Re-send the frame of every op_id someone is waiting on, so that pushes flow to
        the new socket and a resolution that landed meanwhile is read back."""
        for op_id, frame in list(self._attached.items()):
            fid = self._next_id()
            fut: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(functools.partial(self._reattached, op_id))
            self._calls[fid] = fut
            await ws.send(orjson.dumps({**frame, "id": fid}).decode())

    def _reattached(self, op_id: str, fut: asyncio.Future[Frame]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        reply = fut.result()
        req = reply.get("request")
        if reply.get("type") == T.OK and req and req.get("status") != Status.PENDING:
            self._wake(op_id, req)

    def _wake(self, op_id: str, view: Frame) -> None:
        for fut in self._watchers.get(op_id, ()):
            if not fut.done():
                fut.set_result(view)

    def _dispatch(self, frame: Frame) -> None:
        typ = frame.get("type")
        fid = frame.get("id")
        if fid is not None and (typ == T.OK or typ == T.ERROR):
            fut = self._calls.pop(fid, None)
            if fut is not None and not fut.done():
                fut.set_result(frame)
            return
        if typ == T.RESOLVED:
            req = frame["request"]
            self._wake(req["op_id"], req)
        elif typ == T.RECONNECT:
            lo, hi = frame.get("after_ms") or (250, 2000)
            self._restart_pause = random.uniform(float(lo), float(hi)) / 1000.0
        elif typ in (T.INBOX_ADD, T.INBOX_REMOVE):
            for q in self._inbox_queues:
                q.put_nowait(frame)

    def _fail_calls(self, exc: Exception) -> None:
        calls, self._calls = self._calls, {}
        for fut in calls.values():
            if not fut.done():
                fut.set_exception(exc)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- calls

    async def ready(self, timeout: float | None) -> None:
        """Wait (up to ``timeout``) until connected; raise the fatal error if final."""
        if self.fatal is not None:
            raise self.fatal
        if not self._connected.is_set():
            await asyncio.wait_for(self._connected.wait(), timeout)
        if self.fatal is not None:
            raise self.fatal

    async def call(self, frame: Frame, timeout: float | None = None) -> Frame:
        """Send one frame, return its ``ok`` reply.

        Raises:
            Disconnected: the socket dropped (or was found gone) before the reply.
            TimeoutError: no reply within ``timeout``.
            A2HError: the hub's error reply, or the connection's fatal error.
        """
        await self.ready(timeout)
        ws = self._ws
        if ws is None:
            raise Disconnected()
        fid = self._next_id()
        frame["id"] = fid
        fut: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._calls[fid] = fut
        try:
            try:
                await ws.send(orjson.dumps(frame).decode())
            except ConnectionClosed:
                self.lost(ws)
                raise Disconnected() from None
            reply = await asyncio.wait_for(fut, timeout)
        finally:
            self._calls.pop(fid, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: a failure set meanwhile is not "never retrieved"
            else:
                fut.cancel()
        if reply.get("type") == T.ERROR:
            raise from_frame(reply)
        return reply

    async def _pause(self, err: A2HError, pause: float, deadline: float) -> None:
        """Sleep ``pause`` before the next attempt, or raise ``err`` if that would pass
        ``deadline`` (loop time)."""
        if asyncio.get_running_loop().time() + pause > deadline:
            raise err
        await asyncio.sleep(pause)

    async def _ready_until(self, deadline: float) -> None:
        try:
            await self.ready(max(deadline - asyncio.get_running_loop().time(), 0.0))
        except TimeoutError:
            raise ConnectionLost("could not reconnect to the hub in time") from None

    async def call_retrying(self, frame: Frame, timeout: float = REPLY_GRACE,
                            retry_timeout: float | None = None) -> Frame:
        """A call safe to repeat: across a dropped socket, and after ``rate_limited``, send
        it again (after a jittered pause) until ``retry_timeout`` has passed.

        Raises:
            ConnectionLost: not reconnected in time.
            RateLimited: still rate limited at the deadline.
            RetryableError: the hub did not answer within ``timeout``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.retry_timeout if retry_timeout is None else retry_timeout)
        attempt = 0
        while True:
            await self._ready_until(deadline)
            try:
                return await self.call(dict(frame), timeout)
            except Disconnected:
                attempt += 1
                await self._pause(ConnectionLost("the connection dropped before the hub "
                                                 "answered"), self.backoff(attempt), deadline)
            except RateLimited as exc:
                await self._pause(exc, _jittered(exc.retry_after), deadline)
            except TimeoutError:
                raise RetryableError(f"the hub did not answer {frame.get('type')} within "
                                     f"{timeout:g} s") from None

    async def call_once(self, frame: Frame, timeout: float = REPLY_GRACE) -> Frame:
        """A call not safe to repeat blindly: a dropped socket is ConnectionLost."""
        try:
            return await self.call(frame, timeout)
        except Disconnected:
            raise ConnectionLost("the connection dropped before the hub answered") from None
        except TimeoutError:
            raise RetryableError(f"the hub did not answer {frame.get('type')} within "
                                 f"{timeout:g} s") from None

    async def attach(self, frame: Frame, wait: float) -> Frame:
        """Send an ask/wait frame and block up to ``wait`` seconds for the resolution.

        Returns the request view: terminal, or ``pending`` when ``wait`` ran out. Across a
        dropped socket or a rate limit it re-sends the same op_id (a re-attach, never a
        second request) until ``wait`` + ``retry_timeout`` has passed.
        """
        loop = asyncio.get_running_loop()
        op_id = frame["op_id"]
        end = loop.time() + wait
        give_up = end + self.retry_timeout
        fut: asyncio.Future[Frame] = loop.create_future()
        watchers = self._watchers.setdefault(op_id, [])
        watchers.append(fut)  # subscribe (locally) before the hub reads the state
        self._attached[op_id] = {k: v for k, v in frame.items() if k != "id"}
        attempt = 0
        try:
            while True:
                if fut.done():
                    return fut.result()
                await self._ready_until(give_up)
                try:
                    reply = await self.call(dict(frame), max(end - loop.time(), 0.0) + REPLY_GRACE)
                except Disconnected:
                    attempt += 1
                    await self._pause(ConnectionLost("the connection dropped and the hub "
                                                     "could not be reached again in time"),
                                      self.backoff(attempt), give_up)
                    continue
                except RateLimited as exc:
                    await self._pause(exc, _jittered(exc.retry_after), give_up)
                    continue
                except TimeoutError:
                    if fut.done():
                        return fut.result()
                    raise RetryableError(f"the hub did not answer {frame['type']} in time") \
                        from None
                view: Frame = reply["request"]
                remaining = end - loop.time()
                if view["status"] != Status.PENDING or remaining <= 0:
                    return view
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), remaining)
                except TimeoutError:
                    if fut.done():
                        return fut.result()
                    await self._unwatch(op_id)
                    return view
        finally:
            watchers.remove(fut)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved (a fatal error set on it is raised elsewhere)
            else:
                fut.cancel()
            if not watchers:
                self._watchers.pop(op_id, None)
                self._attached.pop(op_id, None)

    async def _unwatch(self, op_id: str) -> None:
        """Tell the hub this socket stops waiting for ``op_id`` (best effort, awaited:
        no task is left behind)."""
        ws = self._ws
        if ws is None or not self._connected.is_set() or len(self._watchers.get(op_id, ())) > 1:
            return  # not connected, or another local waiter still wants the pushes
        try:
            await ws.send(orjson.dumps({"type": T.UNWATCH, "id": self._next_id(),
                                        "op_id": op_id}).decode())
        except ConnectionClosed:
            self.lost(ws)

    async def inbox_frames(self) -> asyncio.Queue[Frame | None]:
        q: asyncio.Queue[Frame | None] = asyncio.Queue()
        if self.fatal is not None:
            q.put_nowait(None)
        self._inbox_queues.append(q)
        return q

    def drop_inbox_queue(self, q: asyncio.Queue[Frame | None]) -> None:
        self._inbox_queues.remove(q)
