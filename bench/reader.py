"""CPU per inbound frame of the two ways a frame reaches the hub (issue 12).

    .venv/bin/python -m bench.reader [--rounds 4] [--sockets 10] [--frames 4000]

One process, one loop: a hub served by uvicorn on 127.0.0.1 port 0 and ``--sockets`` raw
``websockets`` clients, each sending ``ping`` frames in bursts of 20 and reading the 20
replies. Alternately, the server runs the hub's own protocol classes (``a2h serve``: frames
go from ``data_received`` to the session's ``Reader``) and uvicorn's own ``websockets-sansio``
class (frames through the ASGI ``receive``, as under any other server). Prints the process
CPU per ping of each, client included; the difference is what the direct read saves.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import tempfile
import time
from pathlib import Path

import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from hub.config import Settings
from hub.server import create_app
from hub.server.connections import ConnectionGuard, protocols
from hub.store import Role, open_store

BURST = 20


async def _cpu_per_ping(direct: bool, sockets: int, frames: int) -> float:
    with tempfile.TemporaryDirectory(prefix="a2h-reader-") as tmp:
        s = Settings(db=str(Path(tmp) / "hub.db"), rate=1e9, burst=1e9)
        store = open_store(s.db)
        app = create_app(s, store=store)
        if direct:
            http, ws = protocols(ConnectionGuard(max_per_ip=0, header_timeout=0))
            config = uvicorn.Config(app, http=http, ws=ws, ws_per_message_deflate=False,
                                    lifespan="on", log_level="warning")
        else:
            config = uvicorn.Config(app, ws="websockets-sansio", ws_per_message_deflate=False,
                                    lifespan="on", log_level="warning")
        server = uvicorn.Server(config)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                await asyncio.sleep(0.005)
            token = await store.create_token("default", Role.AGENT, "bench")
            conns = [await connect(f"ws://127.0.0.1:{port}/ws", compression=None,
                                   additional_headers={"Authorization": f"Bearer {token}"})
                     for _ in range(sockets)]
            for c in conns:
                await c.recv()  # hello
            rounds = max(1, frames // (BURST * sockets))

            async def drive(c: ClientConnection) -> None:
                for _ in range(rounds):
                    for _ in range(BURST):
                        await c.send('{"type":"ping","id":1}')
                    for _ in range(BURST):
                        await c.recv()

            t0 = time.process_time()
            await asyncio.gather(*(drive(c) for c in conns))
            cpu = time.process_time() - t0
            for c in conns:
                await c.close()
            return cpu / (rounds * BURST * sockets) * 1e6
        finally:
            server.should_exit = True
            await task


async def _main(args: argparse.Namespace) -> None:
    got: dict[str, list[float]] = {"direct (hub protocol)": [], "ASGI receive": []}
    for _ in range(args.rounds):
        for name, direct in (("direct (hub protocol)", True), ("ASGI receive", False)):
            got[name].append(await _cpu_per_ping(direct, args.sockets, args.frames))
    for name, values in got.items():
        print(f"{name:>22}: CPU per ping (client + server) µs, each round: "
              f"{', '.join(f'{v:.1f}' for v in values)}; median {sorted(values)[len(values) // 2]:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--sockets", type=int, default=10)
    p.add_argument("--frames", type=int, default=40_000)
    args = p.parse_args()
    try:
        import uvloop
        uvloop.run(_main(args))
    except ImportError:  # pragma: no cover
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
