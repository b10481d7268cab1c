from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

import hub.server.admin as admin
import hub.server.http_api as http_api
import hub.server.openai_compat as openai_compat
import hub.server.ops as ops
import hub.server.push as push
import hub.server.session as session
from hub.bus import open_bus
from hub.clock import Clock
from hub.config import Settings
from hub.server.mcp import mcp_endpoint
from hub.server.runs_api import frame_handlers as run_frame_handlers
from hub.server.ws import websocket_endpoint
from hub.service import HubService
from hub.store import Store, open_store

WEB_DIR = Path(__file__).resolve().parents[1] / "web"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")

SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds CSP, nosniff, frame and referrer policies to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               clock: Clock | None = None, web_dir: Path | None = None) -> Starlette:
    settings = settings or Settings()
    if store is None:
        store = open_store(settings.store or settings.db, synchronous=settings.sync,
                           commit_delay=settings.commit_delay,
                           commit_siblings=settings.commit_siblings,
                           commit_gap=settings.commit_gap)
    hub = HubService(settings, store, clock, open_bus(settings.bus, drop=settings.bus_drop))
    mcp = mcp_endpoint(hub)  # None without the mcp extra

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with hub, (mcp.running() if mcp else contextlib.nullcontext()):
            yield

    async def socket(websocket: WebSocket) -> None:
        # A Python function: Starlette tells an endpoint from an ASGI app by
        # ``inspect.isfunction``, which a compiled one (hub/_native.py) is not.
        await websocket_endpoint(websocket)

    routes = [
        WebSocketRoute("/ws", socket),
        Route("/healthz", ops.healthz),
        Route("/metrics", ops.metrics),
        Route("/api/session", session.login, methods=["POST"]),
        Route("/api/session", session.logout, methods=["DELETE"]),
        Route("/api/me", session.me),
    ]
    routes += admin.routes()
    routes += push.routes()
    routes += extra_routes()
    if mcp is not None:
        routes.append(mcp.route())
    directory = web_dir or WEB_DIR
    if directory.is_dir():
        routes.append(Mount("/", app=StaticFiles(directory=str(directory), html=True)))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])
    app.state.hub = hub
    # WebSocket frames beyond the core set, by frame type (ws.Session dispatches them).
    app.state.frame_handlers = run_frame_handlers()
    return app


def extra_routes() -> list[Route]:
    """Routes of the HTTP API and the OpenAI-compatible endpoint."""
    return [*http_api.routes(), *openai_compat.routes()]
