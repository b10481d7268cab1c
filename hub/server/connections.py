"""Connection limits below the ASGI app: header-read timeouts and connections per address.

A client that opens a TCP connection and sends half a request line holds a socket, a
protocol object and a parser until it finishes, which may be never (slowloris: 19,950 such
connections were kept forever before this existed). uvicorn has no header timeout, so the
hub runs it with its own protocol classes, made by :func:`protocols`:

- **header timeout**: from the first byte of a request (or from accept) to the end of its
  headers, at most ``header_timeout`` seconds; then the connection is closed.
- **connections per client address**: at most ``max_conns_per_ip`` open at once (HTTP and
  WebSocket together); one more is answered ``503`` and closed at once. Behind a reverse
  proxy every connection comes from the proxy: raise the limit or set it to 0 (off).

The WebSocket class (:class:`HubWebSocket`) also takes two shortcuts past the ASGI
``receive`` that the hub's endpoint (hub/server/ws.py) asks for:

- **frames straight to a reader**: once the endpoint hands it a :class:`FrameReader`, each
  message goes to the reader inside ``data_received``, where it is parsed. uvicorn would put
  it on a queue, stop reading the socket, wake the app's task (one loop callback and a
  resume through every ASGI layer) and start reading again when the app took it, for every
  frame. The reader stops reading only while frames wait for it. Only the disconnect still
  goes through ``receive``.
- **a one-consumer queue** (``_Inbox``) instead of uvicorn's ``asyncio.Queue``, which asks
  for the running loop (a ``getpid()`` system call on Python 3.11) each time it waits.

The counts live in a :class:`ConnectionGuard` owned by the server that made the classes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger("a2h.connections")

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
         b"content-length: 42\r\nconnection: close\r\n\r\n"
         b"too many connections from this address\r\n\r\n")


class _Inbox:
    """The queue of messages a WebSocket protocol hands to its app (``asyncio.Queue``'s
    ``put_nowait`` / ``get`` / ``empty``, which is all uvicorn uses), without its cost per
    message: one consumer, a deque, and the loop known from the start (``asyncio.Queue``
    asks for the running loop, a ``getpid()`` call on Python 3.11, each time it waits)."""

    __slots__ = ("_items", "_waiter", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._loop = loop

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def take_received(self) -> list[Any]:
        """Take out the frames (``websocket.receive``) queued so far; a disconnect stays."""
        frames = [m for m in self._items if m["type"] == "websocket.receive"]
        if frames:
            self._items = deque(m for m in self._items if m["type"] != "websocket.receive")
        return frames

    def qsize(self) -> int:
        return len(self._items)


class FrameReader(Protocol):
    """What takes a socket's frames inside ``data_received`` (hub/server/ws.py ``Reader``)."""

    def begin_read(self) -> None:
        """A new read from the socket starts: the frames before it came in earlier ones."""

    def feed(self, data: str | bytes) -> None:
        """One message, text or binary; must not raise."""


class HubWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol, handing frames to a reader (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = _Inbox(self.loop)  # type: ignore[assignment]
        self.a2h_reader: FrameReader | None = None
        self.a2h_ended = False

    def read_frames(self, reader: FrameReader) -> None:
        """From now on hand every message to ``reader``; those queued already go first."""
        self.a2h_reader = reader
        for msg in self.queue.take_received():  # type: ignore[attr-defined]
            text = msg.get("text")
            reader.feed(text if text is not None else msg.get("bytes") or b"")
        if self.read_paused:  # uvicorn stopped reading at the first queued message
            self.read_paused = False
            self.pause_frames(False)

    def pause_frames(self, paused: bool) -> None:
        """Stop (or start again) reading the socket: what is not read waits in the kernel,
        and TCP pushes back on the sender."""
        if not self.transport.is_closing():
            if paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def end_frames(self) -> None:
        """The app ended the socket (it is closing it): no more frames for the reader, and
        the app's wait in ``receive`` gets the disconnect it waits for."""
        if not self.a2h_ended:
            self.a2h_ended = True
            self.queue.put_nowait({"type": "websocket.disconnect", "code": 1000})

    def data_received(self, data: bytes) -> None:
        reader = self.a2h_reader
        if reader is not None:
            reader.begin_read()
        super().data_received(data)

    def send_receive_event_to_app(self) -> None:
        reader = self.a2h_reader
        if reader is None:
            super().send_receive_event_to_app()
            return
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent or self.a2h_ended:  # as uvicorn: nothing past a close
            return
        if self.curr_msg_data_type == "text":
            try:
                text = data.decode()
            except UnicodeDecodeError:  # as uvicorn: close with 1007
                self.logger.info("Invalid UTF-8 sequence received from client.")
                self.conn.send_close(1007)
                self.handle_parser_exception()
                return
            reader.feed(text)
        else:
            reader.feed(data)


class ConnectionGuard:
    """Open connections per client address, and the limits."""

    def __init__(self, *, max_per_ip: int, header_timeout: float) -> None:
        self.max_per_ip = max_per_ip
        self.header_timeout = header_timeout
        self.open: dict[str, int] = {}
        self.refused = 0
        self.timed_out = 0

    def admit(self, host: str) -> bool:
        n = self.open.get(host, 0)
        if self.max_per_ip and n >= self.max_per_ip:
            self.refused += 1
            return False
        self.open[host] = n + 1
        return True

    def release(self, host: str) -> None:
        n = self.open.get(host, 0) - 1
        if n > 0:
            self.open[host] = n
        else:
            self.open.pop(host, None)

    def statistics(self) -> dict[str, Any]:
        return {"addresses": len(self.open), "connections": sum(self.open.values()),
                "refused": self.refused, "header_timeouts": self.timed_out}


def _host(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "unix"


def protocols(guard: ConnectionGuard) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """uvicorn's httptools and websockets-sansio protocols, under ``guard``'s limits."""

    class GuardedWebSocket(HubWebSocket):
        # Only ever made by an HTTP connection that was admitted and is upgrading: the
        # count moves with the transport and is released when the socket ends.
        _a2h_host = ""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._a2h_host = _host(transport)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.release(self._a2h_host)
            super().connection_lost(exc)

    class GuardedHttp(HttpToolsProtocol):
        _a2h_host = ""
        _a2h_timer: asyncio.TimerHandle | None = None
        _a2h_admitted = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._a2h_host = _host(transport)
            if not guard.admit(self._a2h_host):
                log.warning("refused a connection: %s has %d open", self._a2h_host,
                            guard.max_per_ip)
                transport.write(_BUSY)
                transport.close()
                self.transport = transport
                return
            self._a2h_admitted = True
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._a2h_timer is None and guard.header_timeout > 0:
                self._a2h_timer = self.loop.call_later(guard.header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._a2h_timer is not None:
                self._a2h_timer.cancel()
                self._a2h_timer = None

        def _expired(self) -> None:
            self._a2h_timer = None
            guard.timed_out += 1
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if not self._a2h_admitted:
                return
            super().data_received(data)

        def on_message_begin(self) -> None:
            self._arm()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def handle_websocket_upgrade(self) -> None:
            self._disarm()
            self._a2h_admitted = False  # the WebSocket protocol releases the count now
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._a2h_admitted:
                self._a2h_admitted = False
                guard.release(self._a2h_host)
                super().connection_lost(exc)

    return GuardedHttp, GuardedWebSocket
