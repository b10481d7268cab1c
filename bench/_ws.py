"""The load client's connection layer: as cheap per frame as Python allows.

``RawConn`` is an ``asyncio.Protocol`` driving the ``websockets`` sans-I/O client
(``websockets.client.ClientProtocol``): no task, no queue and no future per connection or
per frame, just ``data_received`` → parse → callback, and ``send`` → frame → write. Pings
are answered by the sans-I/O protocol itself. Frames are JSON, encoded and decoded with
orjson. The two dialects share all of that and differ only in framing:

- ``a2h`` — the hub's protocol (``docs/protocol.md``): one JSON object per text frame,
  ``Authorization: Bearer`` on the upgrade, ready after the ``hello`` frame. The bare
  Starlette relay speaks the same frames.
- ``sio`` — Socket.IO v5 over Engine.IO v4, websocket transport only (what
  ``socketio.AsyncClient(transports=["websocket"])`` does on the wire): the JSON object
  travels as the argument of event ``"msg"`` (``42["msg",{...}]``), the token in the
  CONNECT packet's auth (``40{"token": ...}``), ready after the server's CONNECT reply;
  Engine.IO pings (``2``) are answered (``3``).

``SioClientConn`` wraps python-socketio's own ``AsyncClient`` behind the same interface,
to show what the stock client costs (it is not used for the ratios; see docs/performance.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

OnMessage = Callable[[dict[str, Any]], None]


class RawConn(asyncio.Protocol):
    __slots__ = ("p", "t", "headers", "dialect", "on_message", "ready", "closed", "auth",
                 "on_closed")

    def __init__(self, url: str, dialect: str, token: str, on_message: OnMessage,
                 ready: asyncio.Future[RawConn]) -> None:
        self.p = ClientProtocol(parse_uri(url), max_size=None)
        self.t: asyncio.Transport | None = None
        self.dialect = dialect
        self.auth = token
        self.on_message = on_message
        self.ready = ready
        self.closed = False
        self.on_closed: Callable[[RawConn], None] | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]
        req = self.p.connect()
        if self.dialect == "a2h":
            req.headers["Authorization"] = f"Bearer {self.auth}"
        self.p.send_request(req)
        self._flush()

    def data_received(self, data: bytes) -> None:
        p = self.p
        p.receive_data(data)
        for ev in p.events_received():
            if type(ev) is Frame:
                if ev.opcode is Opcode.TEXT:
                    self._on_text(ev.data)
            elif isinstance(ev, Response):
                if p.handshake_exc is not None and not self.ready.done():
                    self.ready.set_exception(p.handshake_exc)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection lost: {exc!r}"))
        if self.on_closed is not None:
            self.on_closed(self)

    # -- frames

    def _on_text(self, data: bytes) -> None:
        if self.dialect == "a2h":
            obj = orjson.loads(data)
            if self.ready.done():
                self.on_message(obj)
            elif obj.get("type") == "hello":
                self.ready.set_result(self)
            else:
                self.ready.set_exception(ConnectionError(f"unexpected first frame {obj!r}"))
            return
        # Socket.IO over Engine.IO
        head = data[:2]
        if head == b"42":
            self.on_message(orjson.loads(data[2:])[1])
        elif data == b"2":
            self._send_raw(b"3")
        elif head == b"40":
            if not self.ready.done():
                self.ready.set_result(self)
        elif head == b"44":  # CONNECT_ERROR
            if not self.ready.done():
                self.ready.set_exception(ConnectionError(bytes(data).decode()))
        elif data[:1] == b"0":  # Engine.IO OPEN: now join the default namespace
            self._send_raw(b"40" + orjson.dumps({"token": self.auth}))

    def send(self, obj: dict[str, Any]) -> None:
        if self.closed:
            return
        if self.dialect == "a2h":
            self.p.send_text(orjson.dumps(obj))
        else:
            self.p.send_text(b'42["msg",' + orjson.dumps(obj) + b"]")
        self._flush()

    def send_many(self, objs: list[dict[str, Any]]) -> None:
        """Several frames in one write (a burst)."""
        if self.closed:
            return
        for obj in objs:
            if self.dialect == "a2h":
                self.p.send_text(orjson.dumps(obj))
            else:
                self.p.send_text(b'42["msg",' + orjson.dumps(obj) + b"]")
        self._flush()

    def _send_raw(self, data: bytes) -> None:
        self.p.send_text(data)

    def _flush(self) -> None:
        t = self.t
        if t is None:
            return
        chunks = self.p.data_to_send()
        if not chunks:
            return
        for chunk in chunks:
            if chunk:
                t.write(chunk)
            elif t.can_write_eof():
                t.write_eof()

    def close(self) -> None:
        if self.t is not None and not self.closed:
            try:
                self.p.send_close(1000)
                self._flush()
            except Exception:
                pass
            self.t.close()


async def open_raw(url: str, dialect: str, token: str, on_message: OnMessage,
                   timeout: float = 30.0) -> RawConn:
    loop = asyncio.get_running_loop()
    uri = parse_uri(url)
    ready: asyncio.Future[RawConn] = loop.create_future()
    transport, conn = await asyncio.wait_for(
        loop.create_connection(lambda: RawConn(url, dialect, token, on_message, ready),
                               uri.host, uri.port), timeout)
    try:
        return await asyncio.wait_for(ready, timeout)
    except BaseException:
        transport.close()
        raise


class SioClientConn:
    """python-socketio's ``AsyncClient`` behind the ``RawConn`` interface."""

    def __init__(self, url: str, token: str, on_message: OnMessage) -> None:
        import socketio  # type: ignore[import-untyped]

        self.url = url
        self.token = token
        self.on_message = on_message
        self.client = socketio.AsyncClient(reconnection=False)
        self.closed = False
        self._tasks: set[asyncio.Task[Any]] = set()

        async def msg(data: dict[str, Any]) -> None:
            on_message(data)

        self.client.on("msg", msg)

    async def open(self, timeout: float) -> SioClientConn:
        await self.client.connect(self.url, transports=["websocket"],
                                  auth={"token": self.token}, wait_timeout=timeout)
        return self

    def send(self, obj: dict[str, Any]) -> None:
        task = asyncio.get_running_loop().create_task(self.client.emit("msg", obj))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def send_many(self, objs: list[dict[str, Any]]) -> None:
        for obj in objs:
            self.send(obj)

    def close(self) -> None:
        self.closed = True
        task = asyncio.get_running_loop().create_task(self.client.disconnect())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def open_conn(base: str, dialect: str, token: str, on_message: OnMessage,
                    timeout: float = 30.0) -> Any:
    """Open one connection to a server at ``base`` (``http://host:port``)."""
    ws = "ws" + base[4:] if base.startswith("http") else base
    if dialect == "a2h":
        return await open_raw(ws + "/ws", "a2h", token, on_message, timeout)
    if dialect == "sio":
        return await open_raw(ws + "/socket.io/?EIO=4&transport=websocket", "sio", token,
                              on_message, timeout)
    if dialect == "sio-client":
        return await SioClientConn(base, token, on_message).open(timeout)
    raise ValueError(f"unknown dialect {dialect!r}")
