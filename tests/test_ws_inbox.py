"""The WebSocket protocol's message queue (hub/server/connections.py ``_Inbox``): the part
of ``asyncio.Queue`` uvicorn uses, for one consumer."""

from __future__ import annotations

import asyncio

from hub.server.connections import _Inbox


async def test_in_order_whether_put_before_or_while_waiting() -> None:
    q = _Inbox(asyncio.get_running_loop())
    q.put_nowait(1)
    q.put_nowait(2)
    assert not q.empty() and q.qsize() == 2
    assert await q.get() == 1 and await q.get() == 2 and q.empty()
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    assert not getter.done()
    q.put_nowait(3)
    q.put_nowait(4)
    assert await getter == 3 and await q.get() == 4


async def test_a_cancelled_get_loses_nothing() -> None:
    q = _Inbox(asyncio.get_running_loop())
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.put_nowait("kept")
    getter.cancel()  # before it ran again: the message stays queued
    await asyncio.sleep(0)
    assert getter.cancelled()
    assert await q.get() == "kept"
