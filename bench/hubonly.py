"""The hub's own CPU per cycle, without sockets: ``HubService`` on SQLite (``--sync full``)
driven in-process through the same entry points and the same frames as the WebSocket
session, with connections whose transport only counts.

    .venv/bin/python -m bench.hubonly [--agents 1000] [--cycles 40000] [--warmup 5000]

Each agent has its own conversation and its own connection subscribed to its request (as
``Session.handle`` does); 4 humans have an inbox connection each and answer every
``inbox.add`` at once; an agent asks again when its ``resolved`` push arrives (closed
loop). What is measured: process CPU (event loop + writer thread, ``time.process_time``)
per cycle over ``--cycles`` cycles after ``--warmup``: decode, admission, rooms, core,
store, commit and fsync, views, encoding, fan-out — everything but the WebSocket protocol
and the socket system calls, which the bare relay pays too. Run it on two trees, one after
the other, to compare them with far less noise than the suite on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

QUESTION = "Deploy build 1234 to production?"


async def run(agents: int, cycles: int, warmup: int) -> dict[str, Any]:
    from hub.config import Settings
    from hub.gateway import Connection, inbox_tag, op_tag
    from hub.protocol import Status, decode_client_frame
    from hub.service import HubService
    from hub.store import Principal, Role
    from hub.store.sqlite import SQLiteStore

    tmp = tempfile.mkdtemp(prefix="a2h-hubonly-")
    settings = Settings(db=str(Path(tmp) / "hub.db"), log_level="warning")
    store = SQLiteStore(settings.db, synchronous="FULL")
    hub = HubService(settings, store)
    await hub.start()
    humans = [f"h{i}" for i in range(4)]
    for h in humans:
        await store.create_token("default", Role.HUMAN, h)
    done = asyncio.get_running_loop().create_future()
    state = {"cycles": 0, "t0": 0.0, "c0": 0.0}

    async def nothing(*_: Any) -> None:
        return None

    def connection(on_text: Any) -> Connection:
        def write_now(frames: list[str]) -> bool:
            for text in frames:
                on_text(text)
            return True

        async def send(text: str) -> None:
            on_text(text)

        try:
            conn = Connection(send, nothing, limit=1 << 30, write_now=write_now)
        except TypeError:  # a tree from before ``write_now`` (bench.instructions --tree)
            conn = Connection(send, nothing, limit=1 << 30)
        hub.gateway.add(conn)
        return conn

    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    human_who = {h: Principal("default", Role.HUMAN, h, f"hh{h}") for h in humans}
    seq = {"n": 0}

    def human_text(handle: str) -> Any:
        def on_text(text: str) -> None:
            m = orjson.loads(text)
            if m["type"] != "inbox.add" or done.done():
                return
            seq["n"] += 1
            frame = orjson.dumps({"type": "respond", "id": seq["n"], "op_id": m["request"]["op_id"],
                                  "value": "yes"}).decode()
            f = decode_client_frame(frame)
            spawn(hub.respond(human_who[handle], f.op_id, Status.ANSWERED, f.value,
                              lambda r: None, "-"))
        return on_text

    for h in humans:
        hub.gateway.subscribe(connection(human_text(h)), inbox_tag("default", h))

    class Agent:
        def __init__(self, i: int) -> None:
            self.i = i
            self.n = 0
            self.who = Principal("default", Role.AGENT, f"a{i}", f"ha{i}")
            self.conn = connection(self.on_text)

        def ask(self) -> None:
            self.n += 1
            op = f"a{self.i}-{self.n}"
            frame = orjson.dumps({"type": "ask", "id": self.n, "op_id": op,
                                  "to": humans[self.i % 4], "question": QUESTION,
                                  "conversation": f"c{self.i}", "wait": 60,
                                  "context": {"t": self.n}}).decode()
            f = decode_client_frame(frame)
            hub.gateway.subscribe(self.conn, op_tag("default", op))
            spawn(hub.ask(self.who, f, lambda r: None, "-"))

        def on_text(self, text: str) -> None:
            m = orjson.loads(text)
            if m["type"] != "resolved":
                return
            state["cycles"] += 1
            c = state["cycles"]
            if c == warmup:
                state["t0"], state["c0"] = time.perf_counter(), time.process_time()
            if c == warmup + cycles:
                done.set_result((time.perf_counter(), time.process_time()))
            if c < warmup + cycles:
                self.ask()

    crowd = [Agent(i) for i in range(agents)]
    for a in crowd:
        a.ask()
    t1, c1 = await done
    wall = t1 - state["t0"]
    cpu = c1 - state["c0"]
    stats = store.statistics()
    if tasks:
        await asyncio.wait(list(tasks))
    await hub.stop()
    return {"agents": agents, "cycles": cycles, "cycles_per_s": round(cycles / wall, 1),
            "cpu_us_per_cycle": round(cpu / cycles * 1e6, 1),
            "cpu_util": round(cpu / wall, 3), "commits": stats["commits"],
            "mean_batch": round(stats["mean_batch"], 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=40_000)
    ap.add_argument("--warmup", type=int, default=5_000)
    args = ap.parse_args()
    import gc

    import uvloop

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)  # as `a2h serve` does
    out = uvloop.run(run(args.agents, args.cycles, args.warmup))
    print(orjson.dumps(out).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
