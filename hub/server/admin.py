"""Admin HTTP API: an admin token manages the tokens and humans of its own tenant.

    POST /api/admin/tokens         {"role": "agent"|"human"|"admin", "name": "...",
                                    "expires_in": seconds?}  -> 201 {"token": "...", ...}
    GET  /api/admin/tokens         -> {"tokens": [{hash, role, name, created_at, ...}]}
    POST /api/admin/tokens/revoke  {"token": "<token or its sha256 hex>"} -> 204 | 404
    GET  /api/admin/humans         -> {"humans": ["me", ...]}

Bearer tokens only (no cookies), so cross-site requests cannot reach these.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hub.protocol import ErrorCode
from hub.server.auth import bearer
from hub.server.session import error_response
from hub.service import HubService
from hub.store import Principal, Role

_NAME_MAX = 200


async def _admin(request: Request) -> tuple[HubService, Principal | None, Response | None]:
    hub: HubService = request.app.state.hub
    token = bearer(request)
    who = await hub.store.principal(token, hub.clock.now()) if token else None
    if who is None:
        return hub, None, error_response(ErrorCode.UNAUTHORIZED, "an admin bearer token is needed")
    if who.role is not Role.ADMIN:
        return hub, None, error_response(ErrorCode.FORBIDDEN, "only an admin token may do this")
    return hub, who, None


async def _json(request: Request) -> dict[str, Any] | None:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


async def create_token(request: Request) -> Response:
    hub, who, denied = await _admin(request)
    if denied is not None or who is None:
        return denied  # type: ignore[return-value]
    body = await _json(request)
    if body is None:
        return error_response(ErrorCode.BAD_JSON, "send a JSON object")
    try:
        role = Role(str(body.get("role")))
    except ValueError:
        return error_response(ErrorCode.INVALID, "role must be agent, human or admin")
    name = body.get("name")
    if not isinstance(name, str) or not name or len(name) > _NAME_MAX:
        return error_response(ErrorCode.INVALID, f"name must be 1..{_NAME_MAX} characters")
    expires_in = body.get("expires_in")
    if expires_in is not None and (isinstance(expires_in, bool)
                                   or not isinstance(expires_in, (int, float))
                                   or expires_in <= 0):
        return error_response(ErrorCode.INVALID, "expires_in must be a positive number")
    expires_at = hub.clock.now() + expires_in if expires_in else None
    token = await hub.store.create_token(who.tenant, role, name, expires_at)
    hub.forget_humans(who.tenant)  # a new human may now be asked
    return JSONResponse({"token": token, "tenant": who.tenant, "role": role.value,
                         "name": name, "expires_at": expires_at}, status_code=201)


async def list_tokens(request: Request) -> Response:
    hub, who, denied = await _admin(request)
    if denied is not None or who is None:
        return denied  # type: ignore[return-value]
    return JSONResponse({"tokens": await hub.store.list_tokens(who.tenant)})


async def revoke_token(request: Request) -> Response:
    hub, who, denied = await _admin(request)
    if denied is not None or who is None:
        return denied  # type: ignore[return-value]
    body = await _json(request)
    token = body.get("token") if body else None
    if not isinstance(token, str) or not token:
        return error_response(ErrorCode.INVALID, 'send {"token": "<token or its hash>"}')
    if not await hub.store.revoke_token(token, hub.clock.now(), tenant=who.tenant):
        return error_response(ErrorCode.NOT_FOUND, "no such active token in this tenant")
    return Response(status_code=204)


async def list_humans(request: Request) -> Response:
    hub, who, denied = await _admin(request)
    if denied is not None or who is None:
        return denied  # type: ignore[return-value]
    return JSONResponse({"humans": await hub.store.list_humans(who.tenant)})


def routes() -> list[Route]:
    return [
        Route("/api/admin/tokens", create_token, methods=["POST"]),
        Route("/api/admin/tokens", list_tokens, methods=["GET"]),
        Route("/api/admin/tokens/revoke", revoke_token, methods=["POST"]),
        Route("/api/admin/humans", list_humans, methods=["GET"]),
    ]
