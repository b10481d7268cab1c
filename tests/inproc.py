"""A real hub served by uvicorn inside the test's own event loop, on port 0.

Real sockets, but the test can reach the service's internals (rooms, gateway, clock). The
server runs the hub's own protocol classes, as ``a2h serve`` does
(hub/server/connections.py); ``plain_asgi=True`` serves it with uvicorn's own classes
instead, as any other deployment of the ASGI app would.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from hub.clock import Clock
from hub.config import Settings
from hub.server import create_app
from hub.server.connections import ConnectionGuard, protocols
from hub.service import HubService
from hub.store import Role, Store, open_store


@dataclass
class Running:
    url: str
    hub: HubService
    agent: str
    human: str
    human2: str

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"


@contextlib.asynccontextmanager
async def serve(tmp: Path, *, store: Store | None = None, clock: Clock | None = None,
                plain_asgi: bool = False, **settings: object) -> AsyncIterator[Running]:
    s = Settings(db=str(tmp / "hub.db"), **settings)  # type: ignore[arg-type]
    store = store or open_store(s.db)
    app = create_app(s, store=store, clock=clock)
    hub: HubService = app.state.hub
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    http: type[asyncio.Protocol] | str
    ws: type[asyncio.Protocol] | str
    if plain_asgi:
        http, ws = "httptools", "websockets-sansio"
    else:
        http, ws = protocols(ConnectionGuard(max_per_ip=0, header_timeout=0))
    config = uvicorn.Config(app, http=http, ws=ws, ws_per_message_deflate=False,
                            ws_max_size=s.max_frame, lifespan="on", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    real = getattr(store, "inner", store)
    agent = await real.create_token("default", Role.AGENT, "bot")
    human = await real.create_token("default", Role.HUMAN, "me")
    human2 = await real.create_token("default", Role.HUMAN, "you")
    try:
        yield Running(f"http://127.0.0.1:{port}", hub, agent, human, human2)
    finally:
        server.should_exit = True
        await task
