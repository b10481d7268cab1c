"""Browser sessions: a human token is exchanged for an HttpOnly, SameSite=Strict cookie."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hub.protocol import ERROR_TABLE, ErrorCode
from hub.server.auth import SESSION_COOKIE, authenticate, cross_site
from hub.service import HubService
from hub.store import Role


def error_response(code: ErrorCode, message: str) -> JSONResponse:
    status, retryable = ERROR_TABLE[code]
    return JSONResponse({"error": {"code": code.value, "message": message,
                                   "retryable": retryable}}, status_code=status)


async def login(request: Request) -> Response:
    hub: HubService = request.app.state.hub
    if cross_site(request, hub.settings.allowed_origins):
        return error_response(ErrorCode.FORBIDDEN, "cross-site request refused")
    try:
        body = orjson.loads(await request.body())
        token = body["token"]
        if not isinstance(token, str):
            raise TypeError
    except Exception:
        return error_response(ErrorCode.INVALID, 'send {"token": "<human token>"}')
    who = await hub.store.principal(token.strip(), hub.clock.now())
    if who is None:
        return error_response(ErrorCode.UNAUTHORIZED, "this token is not valid (revoked, "
                              "expired or mistyped)")
    if who.role is not Role.HUMAN:
        return error_response(ErrorCode.FORBIDDEN, "only a human token opens the inbox")
    ttl = hub.settings.session_ttl
    session = await hub.store.create_session(who.token_hash, hub.clock.now(), ttl)
    resp = Response(status_code=204)
    resp.set_cookie(SESSION_COOKIE, session, max_age=int(ttl), httponly=True,
                    samesite="strict", secure=request.url.scheme == "https", path="/")
    return resp


async def logout(request: Request) -> Response:
    hub: HubService = request.app.state.hub
    if cross_site(request, hub.settings.allowed_origins):
        return error_response(ErrorCode.FORBIDDEN, "cross-site request refused")
    session = request.cookies.get(SESSION_COOKIE)
    if session:
        await hub.store.end_session(session)
    resp = Response(status_code=204)
    resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return resp


async def me(request: Request) -> Response:
    hub: HubService = request.app.state.hub
    who = await authenticate(request, hub, websocket=False)
    if who is None:
        return error_response(ErrorCode.UNAUTHORIZED, "not signed in")
    return JSONResponse({"tenant": who.tenant, "handle": who.name, "role": who.role.value})
