"""Sockets belong to the gateway, not to rooms: a room can be evicted while its sockets stay.

A :class:`Connection` wraps any transport that can send text and close. Pushes go into a
bounded outbox (in bytes) drained by at most one short-lived writer task per connection,
which exists only while there is something to send. A transport that can also write
without suspending (``write_now``: the server's WebSocket protocol, when it is one we
know) gets its pushes of one loop iteration together: they are written at the end of the
iteration in one write, and the outbox and its writer task are only for a transport that
cannot take them (paused, closing).

Backpressure policy (invariant 8): a connection whose outbox would exceed its byte limit
is closed with ``CloseCode.RESYNC`` and its queue is dropped. Nothing is lost: every
pushed fact is committed, so the client re-reads the store when it reconnects. A slow
socket never blocks a room, the publisher, or another socket.

Tags are tuples, never joined strings (invariant 9): ``("inbox", tenant, handle)`` (inbox
sockets of one human), ``("op", tenant, op_id)`` (waiters on one request), ``("token",
hash)`` (every socket of one token, for revocation). Two tenants' names can therefore never
produce the same tag, whatever characters they contain.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from hub.protocol import CloseCode

log = logging.getLogger("a2h.gateway")

Tag = tuple[str, ...]


def inbox_tag(tenant: str, handle: str) -> Tag:
    return ("inbox", tenant, handle)


def op_tag(tenant: str, op_id: str) -> Tag:
    return ("op", tenant, op_id)


def token_tag(token_hash: str) -> Tag:
    return ("token", token_hash)


#: Writes frames to a transport at once, without suspending; False (nothing written) when
#: the transport cannot take them now.
WriteNow = Callable[[list[str]], bool]


class Connection:
    __slots__ = ("id", "meta", "tags", "_send", "_close", "_queue", "_bytes", "limit",
                 "_task", "_closing", "closed", "close_code", "sent", "_write_now",
                 "_tick", "_tick_bytes", "flusher", "__weakref__")

    def __init__(self, send: Callable[[str], Coroutine[Any, Any, None]],
                 close: Callable[[int, str], Awaitable[None]], *, limit: int,
                 meta: Any = None, write_now: WriteNow | None = None) -> None:
        self.id = 0  # given by Gateway.add
        self.meta = meta
        self.tags: set[Tag] = set()
        self._send = send
        self._close = close
        self._queue: deque[str] = deque()
        self._bytes = 0
        self.limit = limit
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self.closed = False
        self.close_code: int | None = None
        self.sent = 0
        self._write_now = write_now
        #: ends the loop iterations of this connection's pushes (the gateway's, once added)
        self.flusher: _Flusher | None = None
        #: frames pushed during this loop iteration, written together at its end
        self._tick: list[str] = []
        self._tick_bytes = 0

    def push(self, text: str) -> bool:
        """Queue one frame; never blocks. False if the connection is (now) closed."""
        if self.closed:
            return False
        size = len(text)
        if self._write_now is not None and self._task is None:
            # Written at the end of this loop iteration, straight to the transport (which
            # buffers what the socket does not take at once, as a send would): not the
            # outbox, which holds only what waits for a paused transport.
            if not self._tick:
                if self.flusher is None:  # not in a gateway (tests): its own
                    self.flusher = _Flusher()
                self.flusher.add(self)
            self._tick.append(text)
            self._tick_bytes += size
            return True
        # One frame alone always fits (else a big reply could never be delivered); the
        # limit is on how far the socket falls behind.
        if self._bytes and self._bytes + size > self.limit:
            log.warning("conn=%s outbox over %d bytes: closing with resync", self.id, self.limit)
            self.kill(CloseCode.RESYNC, "resync: outbox overflow")
            return False
        self._bytes += size
        if self._task is None:
            # Fast path, no task: a send to a writable socket completes without suspending
            # (uvicorn writes to the transport at once), so run it to its end right here.
            # Only if it suspends (the transport is paused) does a writer task take over.
            coro = self._send(text)
            try:
                pending = coro.send(None)
            except StopIteration:
                self._bytes -= size
                self.sent += 1
                return True
            except Exception:
                self._bytes = 0
                self.closed = True
                return False
            self._task = asyncio.get_running_loop().create_task(
                self._flush(coro, pending, size))
            return True
        self._queue.append(text)
        return True

    def flush_tick(self) -> None:
        """Write this iteration's frames in one go; if the transport cannot take them,
        they go to the outbox, in order, for the writer task."""
        frames, self._tick = self._tick, []
        size, self._tick_bytes = self._tick_bytes, 0
        if not frames or self.closed:
            return
        assert self._write_now is not None
        try:
            written = self._task is None and self._write_now(frames)
        except Exception:  # the socket is gone; the session notices and cleans up
            self._bytes = 0
            self.closed = True
            return
        if written:
            self.sent += len(frames)
            return
        # The transport is paused: the frames wait in the outbox, under its limit (one
        # iteration's frames always fit in an empty outbox, as one frame does).
        if self._bytes and self._bytes + size > self.limit:
            log.warning("conn=%s outbox over %d bytes: closing with resync", self.id, self.limit)
            self.kill(CloseCode.RESYNC, "resync: outbox overflow")
            return
        self._bytes += size
        self._queue.extend(frames)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush())

    @property
    def queued_bytes(self) -> int:
        return self._bytes + self._tick_bytes

    async def _flush(self, coro: Any = None, pending: Any = None, size: int = 0) -> None:
        try:
            if coro is not None:
                await _finish(coro, pending)
                self._bytes -= size
                self.sent += 1
            while self._queue and not self.closed:
                text = self._queue.popleft()
                self._bytes -= len(text)
                await self._send(text)
                self.sent += 1
        except Exception:  # the socket is gone; the session notices and cleans up
            self.closed = True
            self._queue.clear()
            self._bytes = 0
        finally:
            self._task = None

    def kill(self, code: int, reason: str) -> None:
        """Close from the hub's side without waiting (drops the queue)."""
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self._queue.clear()
        self._tick.clear()
        self._tick_bytes = 0
        self._bytes = 0
        if self._task is not None:
            self._task.cancel()
        self._closing = asyncio.get_running_loop().create_task(self._close_now(code, reason))

    async def _close_now(self, code: int, reason: str) -> None:
        try:
            await self._close(code, reason)
        except Exception:
            pass

    async def aclose(self) -> None:
        """Called by the owning session on exit: cancel the writer task and give the close
        handshake up to 5 s. ``asyncio.wait`` never raises the tasks' own outcome, so the
        caller's cancellation, if any, is the only one that propagates."""
        self.closed = True
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task])
        closing = self._closing
        if closing is not None:
            _, pending = await asyncio.wait([closing], timeout=5)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)


async def _finish(coro: Any, pending: Any) -> None:
    """Drive a coroutine that was started by hand and suspended on ``pending`` (what it
    yielded: a future, or None for a bare yield) to its end, as a task would."""
    while True:
        exc: BaseException | None = None
        try:
            if pending is None:
                await asyncio.sleep(0)
            else:
                # What a task does with a future its coroutine yields: clear the "blocking"
                # mark the coroutine's own await set, then wait on it ourselves.
                pending._asyncio_future_blocking = False
                await pending
        except BaseException as e:  # cancellation included: hand it to the coroutine
            exc = e
        try:
            pending = coro.throw(exc) if exc is not None else coro.send(None)
        except StopIteration:
            return


class _Flusher:
    """The connections with frames pushed during this loop iteration, and the one
    callback that writes them at its end."""

    __slots__ = ("_dirty", "_scheduled", "_loop")

    def __init__(self) -> None:
        self._dirty: list[Connection] = []
        self._scheduled = False
        #: the loop of the first push (a gateway lives in one): asked once, since
        #: ``asyncio.get_running_loop()`` costs a ``getpid()`` system call on Python 3.11
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, conn: Connection) -> None:
        self._dirty.append(conn)
        if not self._scheduled:
            self._scheduled = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.flush_tick()



class Gateway:
    """Connection registry with tags and fan-out."""

    def __init__(self) -> None:
        self._tags: dict[Tag, set[Connection]] = {}
        self.connections: set[Connection] = set()
        self._ids = itertools.count(1)
        self.published = 0
        self.delivered = 0
        self.resyncs = 0
        #: writes every connection's frames of one loop iteration at its end
        self._flusher = _Flusher()

    def add(self, conn: Connection) -> None:
        conn.id = next(self._ids)
        conn.flusher = self._flusher
        self.connections.add(conn)

    def remove(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for tag in conn.tags:
            members = self._tags.get(tag)
            if members is not None:
                members.discard(conn)
                if not members:
                    del self._tags[tag]
        conn.tags.clear()

    def subscribe(self, conn: Connection, tag: Tag) -> None:
        self._tags.setdefault(tag, set()).add(conn)
        conn.tags.add(tag)

    def unsubscribe(self, conn: Connection, tag: Tag) -> None:
        members = self._tags.get(tag)
        if members is not None:
            members.discard(conn)
            if not members:
                del self._tags[tag]
        conn.tags.discard(tag)

    def members(self, tag: Tag) -> list[Connection]:
        return list(self._tags.get(tag, ()))

    def publish(self, tag: Tag, text: str, *, drop: bool = False) -> int:
        """Push one encoded frame to every member of ``tag``; ``drop`` ends the tag."""
        members = self._tags.pop(tag, None) if drop else self._tags.get(tag)
        if not members:
            return 0
        self.published += 1
        n = 0
        for conn in list(members):
            if drop:
                conn.tags.discard(tag)
            was_open = not conn.closed
            if conn.push(text):
                n += 1
            elif was_open and conn.close_code == CloseCode.RESYNC:
                self.resyncs += 1
        self.delivered += n
        return n

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until every connection has handed its queued frames
        to its transport. Sends to writable sockets complete at once, so only the writer
        tasks of paused sockets are waited on."""
        self._flusher.flush()
        tasks = [c._task for c in self.connections if c._task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def close_tag(self, tag: Tag, code: int, reason: str) -> int:
        members = self._tags.get(tag)
        if not members:
            return 0
        for conn in list(members):
            conn.kill(code, reason)
        return len(members)

    def statistics(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "tags": len(self._tags),
            "published": self.published,
            "delivered": self.delivered,
            "resyncs": self.resyncs,
            "queued_bytes": sum(c.queued_bytes for c in self.connections),
        }
