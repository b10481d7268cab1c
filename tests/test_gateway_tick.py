"""Pushes to a transport that can write at once (hub/gateway.py ``write_now``): one write
per connection per loop iteration, in order; a transport that cannot take them (paused)
gets them through its writer task, still in order; the outbox limit still holds."""

from __future__ import annotations

import asyncio

from hub.gateway import Connection, Gateway
from hub.protocol import CloseCode


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.sent: list[str] = []
        self.paused = False
        self.resumed = asyncio.Event()

    def write_now(self, frames: list[str]) -> bool:
        if self.paused:
            return False
        self.writes.append(list(frames))
        return True

    async def send(self, text: str) -> None:  # the ASGI path: waits while paused
        await self.resumed.wait()
        self.sent.append(text)

    async def close(self, code: int, reason: str) -> None:
        del code, reason


async def test_pushes_of_one_iteration_are_written_together() -> None:
    t = FakeTransport()
    conn = Connection(t.send, t.close, limit=1000, write_now=t.write_now)
    gw = Gateway()
    gw.add(conn)
    gw.subscribe(conn, ("inbox", "t", "h"))
    assert conn.push("a") and gw.publish(("inbox", "t", "h"), "b") == 1 and conn.push("c")
    assert t.writes == [] and conn.queued_bytes == 3
    await asyncio.sleep(0)
    assert t.writes == [["a", "b", "c"]] and conn.queued_bytes == 0 and conn.sent == 3
    conn.push("d")
    await asyncio.sleep(0)
    assert t.writes == [["a", "b", "c"], ["d"]]


async def test_a_paused_transport_gets_them_in_order_later() -> None:
    t = FakeTransport()
    t.paused = True
    conn = Connection(t.send, t.close, limit=1000, write_now=t.write_now)
    conn.push("a")
    conn.push("b")
    await asyncio.sleep(0)
    conn.push("c")  # the writer task holds the queue now: behind a and b
    assert t.writes == [] and conn.queued_bytes == 3
    t.paused = False
    t.resumed.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert t.sent == ["a", "b", "c"] and conn.queued_bytes == 0
    conn.push("d")  # the task is gone: back to writing at once
    await asyncio.sleep(0)
    assert t.writes == [["d"]]


async def test_the_outbox_limit_holds_while_the_transport_is_paused() -> None:
    t = FakeTransport()
    conn = Connection(t.send, t.close, limit=10, write_now=t.write_now)
    assert conn.push("x" * 8) and conn.push("y" * 8)  # one iteration's frames: no limit
    await asyncio.sleep(0)
    assert t.writes == [["x" * 8, "y" * 8]]
    t.paused = True
    assert conn.push("a" * 8) and conn.push("b" * 8)
    await asyncio.sleep(0)  # paused: both wait in the (empty) outbox, as one frame would
    assert conn.queued_bytes == 16 and not conn.closed
    assert not conn.push("c" * 8)  # the socket fell behind by more than the limit
    assert conn.closed and conn.close_code == CloseCode.RESYNC
    assert conn.queued_bytes == 0  # the queue was dropped, never the data (resync)
    await conn.aclose()
