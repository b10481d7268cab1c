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

The WebSocket class also hands frames to the app through a one-consumer queue (``_Inbox``)
instead of uvicorn's ``asyncio.Queue``, which asks for the running loop (a ``getpid()``
system call on Python 3.11) every time the app waits for a frame.

The counts live in a :class:`ConnectionGuard` owned by the server that made the classes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

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

    def qsize(self) -> int:
        return len(self._items)


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

    class GuardedWebSocket(WebSocketsSansIOProtocol):
        # Only ever made by an HTTP connection that was admitted and is upgrading: the
        # count moves with the transport and is released when the socket ends.
        _a2h_host = ""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.queue = _Inbox(self.loop)  # type: ignore[assignment]

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
