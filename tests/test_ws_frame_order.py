"""Frames read together (in one write of the client) are answered once each, in the order
they came, even when one of them waits for the store or is bad; one over the limit closes
the socket and the hub forgets it. Under the hub's own protocol classes (as ``a2h serve``
runs, hub/server/connections.py) and under uvicorn's own (any other server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_util import until
from inproc import serve
from test_hub_sockets import Raw, ask_frame
from websockets.exceptions import ConnectionClosed


async def _send_together(raw: Raw, frames: list[dict[str, Any]]) -> list[int]:
    """Send ``frames`` in one write to the socket, so the hub reads them together."""
    ids = []
    for frame in frames:
        raw.n += 1
        frame.setdefault("id", raw.n)
        ids.append(frame["id"])
        raw.ws.protocol.send_text(orjson.dumps(frame))
    raw.ws.transport.write(b"".join(raw.ws.protocol.data_to_send()))
    return ids


@pytest.mark.parametrize("plain_asgi", [False, True], ids=["hub-protocols", "uvicorn-protocols"])
async def test_frames_read_together_are_answered_once_in_order(tmp_path: Path,
                                                               plain_asgi: bool) -> None:
    """A frame that waits for the store (the inbox, the history) holds the frames behind
    it; more than FAIR_FRAMES in one read are handled in turns. Nothing is lost, doubled or
    reordered."""
    async with serve(tmp_path, plain_asgi=plain_asgi) as run:
        human = await Raw.open(run, run.human)
        frames: list[dict[str, Any]] = [{"type": "inbox"}]
        frames += [{"type": "ping"} for _ in range(12)]
        frames += [{"type": "history"}, {"type": "ping"}, {"type": "inbox"}]
        frames += [{"type": "ping"} for _ in range(30)]
        ids = await _send_together(human, frames)
        got = [await human.recv() for _ in ids]
        assert [f["id"] for f in got] == ids
        assert all(f["type"] == "ok" for f in got)
        assert (await human.call({"type": "ping"}))["type"] == "ok"  # still read after
        await human.ws.close()


@pytest.mark.parametrize("plain_asgi", [False, True], ids=["hub-protocols", "uvicorn-protocols"])
async def test_a_bad_frame_among_good_ones_is_answered_and_the_rest_go_on(
        tmp_path: Path, plain_asgi: bool) -> None:
    async with serve(tmp_path, plain_asgi=plain_asgi) as run:
        agent = await Raw.open(run, run.agent)
        agent.ws.protocol.send_text(b"{not json")
        agent.ws.protocol.send_binary(b"\x00\x01")
        ids = await _send_together(agent, [{"type": "ping"}, ask_frame("x", wait=0)])
        got = [await agent.recv() for _ in range(4)]
        assert [f.get("code") for f in got[:2]] == ["bad_json", "binary_frame"]
        assert [f["id"] for f in got[2:]] == ids and got[3]["type"] == "ok"
        await agent.ws.close()


@pytest.mark.parametrize("plain_asgi", [False, True], ids=["hub-protocols", "uvicorn-protocols"])
async def test_a_frame_over_the_limit_closes_the_socket_and_the_hub_forgets_it(
        tmp_path: Path, plain_asgi: bool) -> None:
    async with serve(tmp_path, plain_asgi=plain_asgi, max_frame=2000) as run:
        agent = await Raw.open(run, run.agent)
        assert (await agent.call({"type": "ping"}))["type"] == "ok"
        await _send_together(agent, [{"type": "ping", "pad": "x" * 2500}, {"type": "ping"}])
        with pytest.raises(ConnectionClosed):  # too big; the frame after it is not read
            await agent.recv()
        assert agent.ws.close_code == 1009
        await until(lambda: not run.hub.gateway.connections)
