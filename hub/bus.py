"""The bus between hub nodes: it only wakes, it never carries state.

Several nodes share one store (PostgreSQL). When a node commits something another node's
sockets may care about, it publishes a *wake-up*: "a new inbox item for person H", "request
R resolved", "token T revoked" — names only, never the request. A node that receives one and
holds interested sockets reads the store and pushes what it read. A lost or late message
delays a push but loses nothing: clients re-read the store when they resume, and each node's
periodic reconcile (``HubService``) re-reads what changed recently as the safety net.

Single node: :class:`LocalBus`, which publishes nowhere. Several nodes: :class:`NatsBus` on
NATS core subjects (``nats-py``). Every node subscribes to one subject and filters by its own
sockets' interest; tenants, handles and op_ids travel as fields of a JSON array, never joined
into a subject, so no two tenants' names can meet (invariant 9).
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from hub.records import record

log = logging.getLogger("a2h.bus")

SUBJECT = "a2h.wake.v1"


@record
class InboxChanged:
    """A new (or moved) pending request for ``handle``."""

    tenant: str
    handle: str
    op_id: str


@record
class RequestResolved:
    tenant: str
    op_id: str
    handle: str


@record
class TokenRevoked:
    token_hash: str


Wake = InboxChanged | RequestResolved | TokenRevoked

_KINDS: dict[str, type[Any]] = {"i": InboxChanged, "r": RequestResolved, "t": TokenRevoked}
_CODES = {cls: code for code, cls in _KINDS.items()}


def encode(node: str, wake: Wake) -> bytes:
    if isinstance(wake, TokenRevoked):
        fields: list[str] = [wake.token_hash]
    elif isinstance(wake, InboxChanged):
        fields = [wake.tenant, wake.handle, wake.op_id]
    else:
        fields = [wake.tenant, wake.op_id, wake.handle]
    return orjson.dumps([_CODES[type(wake)], node, *fields])


def decode(data: bytes) -> tuple[str, Wake] | None:
    """(sender node, wake-up), or None for anything malformed (ignored, never fatal)."""
    try:
        code, node, *fields = orjson.loads(data)
        cls = _KINDS[code]
        if not all(isinstance(f, str) for f in (node, *fields)):
            return None
        return node, cls(*fields)
    except (ValueError, KeyError, TypeError):
        return None


class Bus(Protocol):
    #: True when other nodes exist to wake (so the hub runs its reconcile loop).
    distributed: bool

    async def start(self, deliver: Callable[[Wake], None]) -> None: ...
    def publish(self, wake: Wake) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> float: ...
    def statistics(self) -> dict[str, Any]: ...


class LocalBus:
    """One node: nobody else to wake."""

    distributed = False

    async def start(self, deliver: Callable[[Wake], None]) -> None:
        del deliver

    def publish(self, wake: Wake) -> None:
        del wake

    async def close(self) -> None:
        return None

    async def ping(self) -> float:
        return 0.0

    def statistics(self) -> dict[str, Any]:
        return {"kind": "local", "connected": True}


class NatsBus:
    """Wake-ups over NATS core publish/subscribe.

    ``publish`` never blocks the caller: wake-ups go into a bounded queue that a sender task
    (owned here, cancelled and awaited by :meth:`close`) hands to the NATS client, which
    buffers across its own reconnects. When the queue is full the oldest wake-up is dropped:
    a lost wake-up only delays a push (the reconcile loop catches up).

    ``drop`` (0..1) drops that fraction of outgoing wake-ups on purpose: tests use it to
    prove that nothing depends on the bus arriving.
    """

    distributed = True

    def __init__(self, url: str, *, drop: float = 0.0, queue: int = 100_000) -> None:
        self.url = url
        self.node = secrets.token_hex(6)
        self.drop = drop
        self._queue: deque[bytes] = deque(maxlen=queue)
        self._ready = asyncio.Event()
        self._nc: Any = None
        self._sender: asyncio.Task[None] | None = None
        self._deliver: Callable[[Wake], None] | None = None
        self.sent = 0
        self.received = 0
        self.dropped = 0
        self.errors = 0

    async def start(self, deliver: Callable[[Wake], None]) -> None:
        import nats  # an optional dependency: only multi-node hubs need it

        self._deliver = deliver

        async def on_error(exc: Exception) -> None:
            self.errors += 1
            log.warning("bus: %s", exc)

        self._nc = await nats.connect(self.url, name=f"a2h-{self.node}",
                                      max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                                      error_cb=on_error, allow_reconnect=True,
                                      connect_timeout=5)
        await self._nc.subscribe(SUBJECT, cb=self._on_message)
        self._sender = asyncio.get_running_loop().create_task(self._send(), name="a2h bus")

    async def _on_message(self, msg: Any) -> None:
        got = decode(msg.data)
        if got is None or got[0] == self.node or self._deliver is None:
            return
        self.received += 1
        try:
            self._deliver(got[1])
        except Exception:
            log.exception("bus: a wake-up could not be handled")

    def publish(self, wake: Wake) -> None:
        if self.drop and random.random() < self.drop:
            self.dropped += 1
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(encode(self.node, wake))
        self._ready.set()

    async def _send(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                data = self._queue.popleft()
                try:
                    await self._nc.publish(SUBJECT, data)
                    self.sent += 1
                except Exception as exc:  # disconnected beyond the client's buffer
                    self.dropped += 1
                    self.errors += 1
                    log.warning("bus: a wake-up was dropped: %s", exc)

    async def ping(self) -> float:
        """Round trip to the NATS server, seconds (raises if it is unreachable)."""
        t = time.perf_counter()
        await self._nc.flush(timeout=2)
        return time.perf_counter() - t

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.wait([self._sender])
        if self._nc is not None:
            try:
                await self._nc.drain()
            except Exception as exc:  # already gone: nothing to drain
                log.debug("bus: drain failed: %s", exc)

    def statistics(self) -> dict[str, Any]:
        connected = bool(self._nc is not None and self._nc.is_connected)
        return {"kind": "nats", "connected": connected, "sent": self.sent,
                "received": self.received, "dropped": self.dropped, "errors": self.errors,
                "queued": len(self._queue)}


def open_bus(url: str, *, drop: float = 0.0) -> Bus:
    """``nats://host:port`` → :class:`NatsBus`; empty → :class:`LocalBus`."""
    if not url:
        return LocalBus()
    if url.startswith(("nats://", "tls://")):
        return NatsBus(url, drop=drop)
    raise ValueError(f"unknown bus {url!r}: use nats://HOST:PORT")
