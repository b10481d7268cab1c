"""The SDK never freezes its caller and never stops reconnecting (issue 15, defects 3 and 10).

Real hubs on port 0 (``inproc.serve``) where a real hub is the point; a TCP relay that can
drop connections and cut handshakes, and a scripted WebSocket server for rate limits.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_util import UNIT, until
from inproc import serve
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed

from client_sdk import ConnectionLost, Hub, RateLimited
from hub.errors import ErrorCode
from hub.protocol import T


class Relay:
    """A TCP relay to a real hub. ``drop()`` cuts every relayed connection; while
    ``cut_next`` > 0, new connections are accepted and closed at once (the WebSocket
    handshake is cut off); while ``hold`` is set, the hub's bytes are swallowed (its
    replies never reach the client)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut_next = 0
        self.cut = 0
        self.relayed = 0
        self.hold = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()
        await self._server.wait_closed()

    def drop(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_next > 0:
            self.cut_next -= 1
            self.cut += 1
            writer.transport.abort()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:  # the hub is down: refuse like it would
            writer.transport.abort()
            return
        self.relayed += 1
        self._writers |= {writer, up_w}
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pipe(reader, up_w, upstream=True))
                tg.create_task(self._pipe(up_r, writer, upstream=False))
        finally:
            self._writers -= {writer, up_w}

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, *,
                    upstream: bool) -> None:
        try:
            while data := await r.read(65536):
                if self.hold and not upstream:
                    continue
                w.write(data)
                await w.drain()
        except OSError:
            pass
        finally:
            w.transport.abort()


async def ticker(ticks: list[float]) -> None:
    while True:
        await asyncio.sleep(0.01)
        ticks.append(time.monotonic())


async def test_a_send_that_fails_at_once_does_not_freeze_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after a hub dies, ``send`` fails without awaiting anything. The SDK must
    await between retries, so the loop stays responsive and ``wait_for`` can interrupt."""
    sends = 0
    real_send = ClientConnection.send

    async def dead_send(self: ClientConnection, message: Any, text: bool | None = None) -> None:
        nonlocal sends
        sends += 1
        if sends > 5000:  # the old SDK spins here: fail the test instead of hanging it
            raise RuntimeError("the SDK retried a failing send 5000 times without pausing")
        raise ConnectionClosed(None, None)

    async with serve(tmp_path) as run, Hub(run.url, run.agent, max_backoff=0.2) as hub:
        await hub.ping()
        monkeypatch.setattr(ClientConnection, "send", dead_send)
        ticks: list[float] = []
        async with asyncio.TaskGroup() as tg:
            tick = tg.create_task(ticker(ticks))
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(hub.ask("me", "Q?", conversation="c", wait=5), 1.0)
            elapsed = time.monotonic() - t0
            tick.cancel()
        assert elapsed < 1.5 * UNIT
        assert len(ticks) >= 20, ticks  # the loop kept running other tasks
        assert sends < 100, sends  # retries paused (jittered backoff), never spun
        # It kept reconnecting all along: once sends work again, so does the client.
        monkeypatch.setattr(ClientConnection, "send", real_send)
        answer = await asyncio.wait_for(hub.ask("me", "Q?", conversation="c", wait=0),
                                        10 * UNIT)
        assert answer.pending
        assert hub.reconnects >= 1


async def test_cut_handshakes_never_stop_the_reconnects(tmp_path: Path) -> None:
    """A reconnect whose handshake is cut off is one more attempt, not the end."""
    async with serve(tmp_path) as run, Relay(int(run.url.rsplit(":", 1)[1])) as relay, \
            Hub(relay.url, run.agent, max_backoff=0.2) as agent, \
            Hub(run.url, run.human) as human:
        task = asyncio.create_task(agent.ask("me", "Survive?", conversation="c",
                                             choices=["yes", "no"], wait=20))
        (item,) = await until(human.inbox)
        relay.cut_next = 4
        relay.drop()
        await until(lambda: relay.cut == 4 and agent.reconnects >= 1, timeout=15,
                    what="four cut handshakes, then a reconnect")
        await human.respond(item.op_id, "yes")
        answer = await asyncio.wait_for(task, 10 * UNIT)
        assert (answer.status, answer.value) == ("answered", "yes")


async def test_a_hub_down_for_a_while_is_waited_for_not_given_up(tmp_path: Path) -> None:
    """``ask`` after the socket dropped waits for the reconnect (it does not return
    ``pending`` without having sent anything) and completes once the hub is back."""
    async with serve(tmp_path) as run, Relay(int(run.url.rsplit(":", 1)[1])) as relay, \
            Hub(relay.url, run.agent, max_backoff=0.2) as agent:
        relay.cut_next = 10**6  # every reconnect is cut off for now
        relay.drop()
        await until(lambda: relay.cut >= 3, what="reconnect attempts")
        task = asyncio.create_task(agent.ask("me", "Later?", conversation="c", wait=1))
        await until(lambda: relay.cut >= 6, what="more reconnect attempts")
        assert not task.done()
        relay.cut_next = 0
        answer = await asyncio.wait_for(task, 15 * UNIT)
        assert answer.pending and answer.request.get("op_id") == answer.op_id  # a real reply
        assert [i.op_id for i in await run.hub.store.inbox("default", "me")] == [answer.op_id]


async def test_leaving_async_with_is_silent(tmp_path: Path) -> None:
    """No "Task exception was never retrieved", no "Future exception was never retrieved":
    nothing reported to the loop or logged, over many ask/close cycles."""
    reported: list[dict[str, Any]] = []
    logged: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                logged.append(record)

    handler = Collect()
    logging.getLogger().addHandler(handler)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    try:
        async with serve(tmp_path) as run:
            for i in range(25):
                async with Hub(run.url, run.agent) as hub:
                    # wait ran out: the SDK tells the hub it stops watching, then leaves
                    assert (await hub.ask("me", f"Q{i}?", conversation="c", wait=0.02)).pending
                    in_flight = asyncio.create_task(hub.ask("me", f"R{i}?", conversation="c",
                                                            wait=5))
                    await asyncio.sleep(0)  # let it send; it is open when we leave
                with pytest.raises(ConnectionLost):
                    await in_flight
            gc.collect()
            await asyncio.sleep(0)
    finally:
        logging.getLogger().removeHandler(handler)
        loop.set_exception_handler(None)
    assert reported == []
    assert [r.getMessage() for r in logged if r.name.startswith(("asyncio", "a2h.sdk"))] == []


# ---------------------------------------------------------------------------- rate limits


Script = Callable[[dict[str, Any], int], Awaitable[dict[str, Any]]]


async def scripted(script: Script) -> AsyncIterator[str]:
    """A WebSocket server that says hello and answers each frame as ``script`` says
    (it gets the frame and how many of that type came before)."""
    seen: dict[str, int] = {}

    async def handler(ws: ServerConnection) -> None:
        await ws.send(orjson.dumps({"type": T.HELLO}).decode())
        async for raw in ws:
            frame = orjson.loads(raw)
            n = seen.get(frame["type"], 0)
            seen[frame["type"]] = n + 1
            reply = await script(frame, n)
            await ws.send(orjson.dumps({"id": frame["id"], **reply}).decode())

    async with ws_serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}"


def limited(hint: float | None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": T.ERROR, "code": ErrorCode.RATE_LIMITED,
                             "message": "slow down", "retryable": True}
    if hint is not None:
        frame["retry_after"] = hint
    return frame


async def test_rate_limited_calls_that_are_safe_to_repeat_wait_the_hint() -> None:
    async def script(frame: dict[str, Any], n: int) -> dict[str, Any]:
        if frame["type"] == T.PING:
            return limited(0.2) if n < 2 else {"type": T.OK, "now": 1.0}
        if frame["type"] == T.INBOX:
            return limited(None) if n < 1 else {"type": T.OK, "items": []}
        return limited(0.3)

    async for url in scripted(script):
        async with Hub(url, "token") as hub:
            t0 = time.monotonic()
            assert await hub.ping() == 1.0
            assert time.monotonic() - t0 >= 2 * 0.2  # the hint is a floor, jitter on top
            t0 = time.monotonic()
            assert await hub.inbox() == []
            assert time.monotonic() - t0 >= 0.25  # no hint: 0.25 s
            with pytest.raises(RateLimited) as info:  # not safe to repeat: raised
                await hub.cancel("op")
            assert info.value.retry_after == 0.3


async def test_rate_limit_retries_are_bounded_by_the_callers_timeout() -> None:
    async def script(frame: dict[str, Any], n: int) -> dict[str, Any]:
        return limited(10.0)

    async for url in scripted(script):
        async with Hub(url, "token", retry_timeout=1.0) as hub:
            t0 = time.monotonic()
            with pytest.raises(RateLimited) as info:
                await hub.ping()
            assert info.value.retry_after == 10.0
            with pytest.raises(RateLimited):
                await hub.ask("me", "Q?", conversation="c", wait=0.5)
            assert time.monotonic() - t0 < 5 * UNIT  # never slept the 10 s it cannot afford
