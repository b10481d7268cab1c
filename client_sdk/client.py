"""The async client: one multiplexed WebSocket per :class:`Hub`, reconnect with resume.

Theory of operation: every call is a frame with an integer ``id`` and a future. A reader
task owns the socket, completes futures from ``ok``/``error`` replies and wakes waiters
on ``resolved`` pushes. When the socket drops, in-flight calls fail with an internal
"disconnected" signal; ``ask`` and ``wait`` catch it, wait for the reconnect (jittered
exponential backoff) and re-send the same op_id — which re-attaches, never creates a
second request. Other calls raise :class:`ConnectionLost`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from client_sdk.errors import (
    A2HError,
    AccessDenied,
    ConnectionLost,
    RetryableError,
    from_frame,
)
from client_sdk.models import Answer, Item
from client_sdk.runs import RunsMixin
from hub.protocol import MAX_WAIT_SECONDS, CloseCode, T

log = logging.getLogger("a2h.sdk")


def new_op_id() -> str:
    """128 random bits, hex: never derived from the question."""
    return secrets.token_hex(16)


class _Disconnected(Exception):
    pass


class Hub(RunsMixin):
    """A connection to an A2H hub.

    Args:
        url: the hub's base URL, e.g. ``http://127.0.0.1:8000``.
        token: an agent token (to ask) or a human token (to answer).
        reconnect: reconnect with jittered backoff when the socket drops.
        max_backoff: the longest pause between reconnect attempts, seconds.
    """

    def __init__(self, url: str, token: str, *, reconnect: bool = True,
                 max_backoff: float = 5.0, open_timeout: float = 10.0) -> None:
        base = url.rstrip("/")
        if base.startswith("http"):
            base = "ws" + base[4:]
        self.ws_url = base + "/ws"
        self._token = token
        self._reconnect = reconnect
        self._max_backoff = max_backoff
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._ids = 0
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._watchers: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        # op_id -> the ask/wait frame that attached it, re-sent after a reconnect.
        self._attached: dict[str, dict[str, Any]] = {}
        self._inbox_queues: list[asyncio.Queue[dict[str, Any]]] = []
        self._connected = asyncio.Event()
        self._closing = False
        self._fatal: A2HError | None = None
        self._reader: asyncio.Task[None] | None = None
        self.hello: dict[str, Any] = {}
        self._restart_pause: float | None = None  # from a "reconnect" frame
        self.reconnects = 0

    # -- lifecycle

    async def __aenter__(self) -> Hub:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the socket (raises AccessDenied for a bad token)."""
        await self._open()
        self._reader = asyncio.get_running_loop().create_task(self._run(), name="a2h sdk reader")

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._fail_calls(ConnectionLost("client closed"))

    async def _open(self) -> None:
        try:
            ws = await connect(self.ws_url, additional_headers={
                "Authorization": f"Bearer {self._token}"}, compression=None,
                open_timeout=self._open_timeout, max_size=16 * 1024 * 1024,
                ping_interval=20, ping_timeout=20)
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise AccessDenied("the hub refused this token", code="unauthorized") from None
            raise RetryableError(f"hub answered HTTP {exc.response.status_code}") from None
        except (TimeoutError, OSError) as exc:
            raise ConnectionLost(f"cannot reach {self.ws_url}: {exc}") from None
        hello = orjson.loads(await ws.recv())
        if hello.get("type") != T.HELLO:
            await ws.close()
            raise RetryableError(f"unexpected first frame {hello!r}")
        self.hello = hello
        self._ws = ws
        self._connected.set()

    async def _run(self) -> None:
        attempt = 0
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for raw in ws:
                    self._dispatch(orjson.loads(raw))
            except ConnectionClosed:
                pass
            code = ws.close_code
            self._connected.clear()
            self._ws = None
            self._fail_calls(_Disconnected())
            if self._closing or not self._reconnect:
                self._fatal = ConnectionLost("connection closed")
                self._wake_waiters()
                return
            if code == CloseCode.REVOKED:
                self._fatal = AccessDenied("token revoked", code="unauthorized")
                self._wake_waiters()
                return
            while True:
                attempt += 1
                delay = min(self._max_backoff, 0.05 * 2 ** min(attempt, 10))
                pause, self._restart_pause = self._restart_pause, None
                await asyncio.sleep(pause if pause is not None else delay * random.uniform(0.5, 1.5))
                try:
                    await self._open()
                    self.reconnects += 1
                    attempt = 0
                    await self._reattach()
                    break
                except AccessDenied as exc:
                    self._fatal = exc
                    self._wake_waiters()
                    return
                except A2HError as exc:
                    log.debug("reconnect failed: %s", exc)

    async def _reattach(self) -> None:
        """Re-send the frame of every op_id someone is waiting on (same op_id: the hub
        re-attaches, never creates a second request) so pushes flow to the new socket."""
        ws = self._ws
        assert ws is not None
        for op_id, frame in list(self._attached.items()):
            self._ids += 1
            fid = self._ids
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(functools.partial(self._reattached, op_id))
            self._calls[fid] = fut
            await ws.send(orjson.dumps({**frame, "id": fid}).decode())

    def _reattached(self, op_id: str, fut: asyncio.Future[dict[str, Any]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        reply = fut.result()
        req = reply.get("request")
        if reply.get("type") == T.OK and req and req.get("status") != "pending":
            for w in self._watchers.get(op_id, ()):
                if not w.done():
                    w.set_result(req)

    def _dispatch(self, frame: dict[str, Any]) -> None:
        typ = frame.get("type")
        fid = frame.get("id")
        if fid is not None and (typ == T.OK or typ == T.ERROR):
            fut = self._calls.pop(fid, None)
            if fut is not None and not fut.done():
                fut.set_result(frame)
            return
        if typ == T.RESOLVED:
            req = frame["request"]
            for fut in self._watchers.get(req["op_id"], ()):
                if not fut.done():
                    fut.set_result(req)
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

    def _wake_waiters(self) -> None:
        self._connected.set()  # lets waiters observe _fatal

    async def _ready(self, timeout: float | None) -> None:
        if self._fatal is not None:
            raise self._fatal
        if not self._connected.is_set():
            await asyncio.wait_for(self._connected.wait(), timeout)
        if self._fatal is not None:
            raise self._fatal

    async def _call(self, frame: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one frame, return its ``ok`` reply; raise its error, or _Disconnected."""
        await self._ready(timeout)
        ws = self._ws
        if ws is None:
            raise _Disconnected()
        self._ids += 1
        fid = self._ids
        frame["id"] = fid
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[fid] = fut
        try:
            await ws.send(orjson.dumps(frame).decode())
        except ConnectionClosed:
            self._calls.pop(fid, None)
            raise _Disconnected() from None
        try:
            reply = await asyncio.wait_for(fut, timeout) if timeout is not None else await fut
        finally:
            self._calls.pop(fid, None)
        if reply.get("type") == T.ERROR:
            raise from_frame(reply)
        return reply

    async def _request(self, frame: dict[str, Any], timeout: float | None = 30.0) -> dict[str, Any]:
        """A call that is not safe to repeat blindly: a dropped socket is ConnectionLost."""
        try:
            return await self._call(frame, timeout)
        except _Disconnected:
            raise ConnectionLost("the connection dropped before the hub answered") from None

    # -- agents

    async def ask(self, to: str, question: str, *, conversation: str,
                  choices: list[str] | None = None, wait: float = MAX_WAIT_SECONDS,
                  expires_in: float | None = None, op_id: str | None = None,
                  default: Any = None, context: Any = None, kind: str = "question") -> Answer:
        """Ask a human and block up to ``wait`` seconds for the answer.

        Returns:
            The :class:`Answer`; ``status == "pending"`` when ``wait`` ran out first
            (re-attach with :meth:`wait`).

        Raises:
            Overloaded: the room is full (never retried automatically).
            Conflict: ``op_id`` was used before with a different payload.
            NotFound: no such human.
        """
        frame: dict[str, Any] = {
            "type": T.ASK, "op_id": op_id or new_op_id(), "to": to, "question": question,
            "conversation": conversation, "kind": kind, "choices": choices,
            "context": context, "default": default, "wait": wait, "expires_in": expires_in,
        }
        return await self._attach(frame, wait)

    async def approve_request(self, to: str, action: Any, *, conversation: str,
                              wait: float = MAX_WAIT_SECONDS, expires_in: float | None = None,
                              op_id: str | None = None, context: Any = None) -> Answer:
        """Ask a human to approve ``action`` (a string or JSON shown in the inbox)."""
        question = action if isinstance(action, str) else \
            "Approve?\n\n```json\n" + orjson.dumps(action, option=orjson.OPT_INDENT_2).decode() + "\n```"
        return await self.ask(to, question, conversation=conversation, wait=wait,
                              expires_in=expires_in, op_id=op_id, context=context,
                              kind="approval")

    async def wait(self, op_id: str, wait: float = MAX_WAIT_SECONDS) -> Answer:
        """Re-attach to a request and block up to ``wait`` seconds for its resolution."""
        return await self._attach({"type": T.WAIT, "op_id": op_id, "wait": wait}, wait)

    async def _attach(self, frame: dict[str, Any], wait: float) -> Answer:
        loop = asyncio.get_running_loop()
        op_id = frame["op_id"]
        end = loop.time() + wait
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        watchers = self._watchers.setdefault(op_id, [])
        watchers.append(fut)  # subscribe (locally) before the hub reads the state
        self._attached[op_id] = {k: v for k, v in frame.items() if k != "id"}
        try:
            while True:
                remaining = end - loop.time()
                try:
                    if fut.done():
                        return Answer.from_view(fut.result())
                    reply = await self._call(dict(frame), timeout=max(remaining, 0) + 30.0)
                    view = reply["request"]
                    if view["status"] != "pending":
                        return Answer.from_view(view)
                    remaining = end - loop.time()
                    if remaining <= 0:
                        return Answer.from_view(view)
                    return Answer.from_view(await asyncio.wait_for(asyncio.shield(fut), remaining))
                except _Disconnected:
                    # Re-attach after the reconnect, by op_id: never a second request.
                    try:
                        await self._ready(max(end - loop.time(), 0.0) + 30.0)
                    except TimeoutError:
                        raise ConnectionLost("could not reconnect to the hub") from None
                    continue
                except TimeoutError:
                    if fut.done():
                        return Answer.from_view(fut.result())
                    self._unwatch(op_id)
                    return Answer(status="pending", op_id=op_id)
        finally:
            watchers.remove(fut)
            if not watchers:
                self._watchers.pop(op_id, None)
                self._attached.pop(op_id, None)

    def _unwatch(self, op_id: str) -> None:
        ws = self._ws
        if ws is None:
            return
        self._ids += 1
        try:
            asyncio.get_running_loop().create_task(
                ws.send(orjson.dumps({"type": T.UNWATCH, "id": self._ids, "op_id": op_id}).decode()))
        except RuntimeError:
            pass

    async def cancel(self, op_id: str) -> Answer:
        """Cancel a pending request (AlreadyResolved carries the resolution if too late)."""
        reply = await self._request({"type": T.CANCEL, "op_id": op_id})
        return Answer.from_view(reply["request"])

    # -- humans

    async def inbox(self) -> list[Item]:
        """The pending requests addressed to this human, nearest deadline first."""
        reply = await self._request({"type": T.INBOX})
        return [Item.from_view(v) for v in reply["items"]]

    async def history(self, limit: int = 50) -> list[Answer]:
        reply = await self._request({"type": T.HISTORY, "limit": limit})
        return [Answer.from_view(v) for v in reply["items"]]

    async def respond(self, op_id: str, value: Any = None, *, status: str = "answered") -> Answer:
        """Answer a request addressed to this human.

        Raises:
            AlreadyResolved: someone (or something) resolved it first; ``.answer`` has it.
            NotFound: no such request for this human.
        """
        reply = await self._request({"type": T.RESPOND, "op_id": op_id, "value": value,
                                     "status": status})
        return Answer.from_view(reply["request"])

    async def approve(self, op_id: str, comment: str = "") -> Answer:
        return await self.respond(op_id, {"approved": True, "comment": comment})

    async def reject(self, op_id: str, comment: str = "") -> Answer:
        return await self.respond(op_id, {"approved": False, "comment": comment},
                                  status="declined")

    async def inbox_events(self) -> AsyncIterator[dict[str, Any]]:
        """Live ``inbox.add`` / ``inbox.remove`` frames for this human."""
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._inbox_queues.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._inbox_queues.remove(q)

    async def ping(self) -> float:
        reply = await self._request({"type": T.PING})
        return float(reply.get("now", 0.0))
