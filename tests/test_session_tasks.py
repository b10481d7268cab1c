"""Run frames are work of the socket's session: counted per session (more than
``MAX_IN_FLIGHT`` is ``overloaded``), and cancelled and awaited when the socket ends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_util import until
from inproc import serve
from websockets.asyncio.client import ClientConnection, connect

from hub.server import runs_api


async def _agent(url: str, token: str) -> ClientConnection:
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                       compression=None)
    assert orjson.loads(await ws.recv())["type"] == "hello"
    return ws


async def _call(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    await ws.send(orjson.dumps(frame).decode())
    reply: dict[str, Any] = orjson.loads(await ws.recv())
    assert reply["id"] == frame["id"], reply
    return reply


def _run_frame_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks()
            if getattr(t.get_coro(), "__qualname__", "") == "_guarded"]


async def test_run_frames_are_counted_per_session_and_end_with_the_socket(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs_api, "MAX_IN_FLIGHT", 2)
    async with serve(tmp_path) as run:
        ws = await _agent(run.ws_url, run.agent)
        began = await _call(ws, {"type": "run.begin", "id": 1, "run_id": "r",
                                 "conversation": "c", "version": "1"})
        assert began["type"] == "ok"
        for pos in (0, 1):  # two interrupts wait for a human: two tasks in flight
            await ws.send(orjson.dumps({
                "type": "run.interrupt", "id": 10 + pos, "run_id": "r", "exec": began["exec"],
                "position": pos, "payload": f"ok {pos}?", "to": "me", "wait": 60}).decode())
        await until(lambda: len(_run_frame_tasks()) == 2, what="two interrupts in flight")
        await until(lambda: run.hub.store.inbox("default", "me"), what="asked")
        refused = await _call(ws, {"type": "run.list", "id": 3})
        assert (refused["type"], refused["code"]) == ("error", "overloaded")
        # Another socket of the same token has its own count.
        other = await _agent(run.ws_url, run.agent)
        assert (await _call(other, {"type": "run.list", "id": 1}))["type"] == "ok"
        await other.close()
        await ws.close()
        # The endpoint cancels and awaits its session's tasks: no interrupt waits on for a
        # socket that is gone.
        await until(lambda: not _run_frame_tasks(), what="session tasks ended")
