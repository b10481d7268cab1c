"""MCP over streamable HTTP at ``/mcp``, inside the hub (tools: ``hub/mcp_tools.py``).

Every HTTP request to ``/mcp`` must carry ``Authorization: Bearer <agent token>``: a
missing, unknown or revoked token is answered 401 (another role's token 403) before the
MCP layer sees the request, so no tool ever runs for it. The tools then act for the token
of the request that carries each call, through :class:`hub.service.HubService`, like the
HTTP API does.

The ``mcp`` package is an extra: :func:`mcp_endpoint` returns ``None`` without it, and
the hub serves everything else as before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from hub.core import CancelRequested
from hub.errors import Denied, Unauthorized
from hub.protocol import OpId, error_body, parse_ask
from hub.server.auth import bearer
from hub.service import HubService
from hub.store import Principal, Role, token_hash_of

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from hub.mcp_tools import AskSpec

log = logging.getLogger("a2h.mcp")

#: Header naming the person a call asks when it names none (e.g. for request_permission).
TO_HEADER = "x-a2h-to"


def mcp_endpoint(hub: HubService) -> McpEndpoint | None:
    """The ``/mcp`` endpoint, or None when the ``mcp`` package is not installed."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        log.info("the mcp package is not installed: no /mcp endpoint "
                 "(pip install 'a2h-hub[mcp]')")
        return None
    return McpEndpoint(hub)


class HubBackend:
    """One principal's way to the hub, in process."""

    def __init__(self, hub: HubService, who: Principal) -> None:
        self.hub = hub
        self.who = who
        self.secret = who.token_hash.encode()

    async def humans(self) -> list[str]:
        return list(await self.hub.store.list_humans(self.who.tenant))

    async def ask(self, spec: AskSpec, op_id: str) -> dict[str, Any]:
        ask = parse_ask(spec.frame(op_id, 0.0), 0)
        req, _ = await self.hub.submit(self.who, ask, f"mcp:{op_id[:8]}")
        return req.view()

    async def wait(self, op_id: str, wait: float) -> dict[str, Any]:
        return (await self.hub.wait_for(self.who, op_id, wait, f"mcp:{op_id[:8]}")).view()

    async def cancel(self, op_id: str) -> None:
        await self.hub.call(self.who, CancelRequested(OpId(op_id)), f"mcp:{op_id[:8]}")

    def now(self) -> float:
        return self.hub.clock.now()

    async def sleep(self, seconds: float) -> None:
        await self.hub.clock.sleep(seconds)


def _headers(ctx: Context) -> Mapping[str, str]:
    return ctx.headers or {}


class HubBridge:
    """The tools' view of the hub: the principal comes from each call's own request."""

    def __init__(self, hub: HubService) -> None:
        self.hub = hub
        self.progress_interval = hub.settings.mcp_progress_interval
        self.closing = False

    async def backend(self, ctx: Context) -> HubBackend:
        from mcp.server.mcpserver.exceptions import ToolError

        value = _headers(ctx).get("authorization", "")
        scheme, _, token = value.partition(" ")
        who = None
        if scheme.lower() == "bearer" and token.strip():
            who = await self.hub.store.principal(token.strip(), self.hub.clock.now())
        if who is None or who.role is not Role.AGENT:  # the guard lets none of these through
            raise ToolError("unauthorized: send an agent token")
        return HubBackend(self.hub, who)

    def default_conversation(self, ctx: Context) -> str:
        from hub.mcp_tools import session_conversation

        headers = _headers(ctx)
        # 2026-07-28 connections have no session: one conversation per token then.
        token = headers.get("authorization", "").partition(" ")[2].strip()
        return session_conversation(headers.get("mcp-session-id"), token_hash_of(token)[:16])

    def default_to(self, ctx: Context) -> str | None:
        return _headers(ctx).get(TO_HEADER) or None


class McpEndpoint:
    """The MCP server, its streamable HTTP session manager, and the bearer-token guard."""

    def __init__(self, hub: HubService) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from hub.mcp_tools import build_server

        self.hub = hub
        self.bridge = HubBridge(hub)
        self.server = build_server(self.bridge)
        # Every request carries a bearer token (no cookies), so a rebound DNS name or a
        # foreign Origin gains nothing: the host checks meant for unauthenticated local
        # servers would only refuse the hub's own public name.
        self.server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self.sessions = self.server.session_manager

    def route(self) -> Route:
        return Route("/mcp", self, methods=["GET", "POST", "DELETE"])

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP sessions; on exit, calls still blocked keep their requests open."""
        async with self.sessions.run():
            try:
                yield
            finally:
                self.bridge.closing = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.requests import HTTPConnection

        conn = HTTPConnection(scope)
        token = bearer(conn)
        who = await self.hub.store.principal(token, self.hub.clock.now()) if token else None
        if who is None:
            exc: Denied = Unauthorized("send 'Authorization: Bearer <agent token>' with a "
                                       "valid A2H agent token")
            response = JSONResponse(error_body(exc), status_code=exc.http_status,
                                    headers={"www-authenticate": "Bearer"})
        elif who.role is not Role.AGENT:
            exc = Denied(f"a {who.role.value} token cannot use MCP tools; use an agent token")
            response = JSONResponse(error_body(exc), status_code=exc.http_status)
        else:
            await self.sessions.handle_request(scope, receive, send)
            return
        await response(scope, receive, send)
