"""Browser sessions: a human token is exchanged for an HttpOnly, SameSite=Strict cookie.

    POST   /api/session  {"token": "<human token>"}  -> 204 + cookie
    DELETE /api/session                              -> 204, cookie cleared
    GET    /api/me                                   -> {"tenant", "handle", "role"}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hub.errors import BadJson, Denied, Invalid, Unauthorized
from hub.protocol import loads
from hub.server.auth import SESSION_COOKIE, authenticate, cross_site, hub_of
from hub.server.errors import endpoint
from hub.store import Role

#: Largest login body: a token and some slack.
MAX_LOGIN_BODY = 4096


@endpoint
async def login(request: Request) -> Response:
    hub = hub_of(request)
    if cross_site(request, hub.settings.allowed_origins):
        raise Denied("cross-site request refused")
    usage = 'send {"token": "<human token>"}'
    raw = await request.body()
    if len(raw) > MAX_LOGIN_BODY:
        raise Invalid(usage)
    try:
        body = loads(raw)
    except BadJson:
        raise Invalid(usage) from None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str):
        raise Invalid(usage)
    who = await hub.store.principal(token.strip(), hub.clock.now())
    if who is None:
        raise Unauthorized("this token is not valid (revoked, expired or mistyped)")
    if who.role is not Role.HUMAN:
        raise Denied("only a human token opens the inbox")
    ttl = hub.settings.session_ttl
    session = await hub.store.create_session(who.token_hash, hub.clock.now(), ttl)
    resp = Response(status_code=204)
    resp.set_cookie(SESSION_COOKIE, session, max_age=int(ttl), httponly=True,
                    samesite="strict", secure=request.url.scheme == "https", path="/")
    return resp


@endpoint
async def logout(request: Request) -> Response:
    hub = hub_of(request)
    if cross_site(request, hub.settings.allowed_origins):
        raise Denied("cross-site request refused")
    session = request.cookies.get(SESSION_COOKIE)
    if session:
        await hub.store.end_session(session)
    resp = Response(status_code=204)
    resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return resp


@endpoint
async def me(request: Request) -> Response:
    who = await authenticate(request)
    return JSONResponse({"tenant": who.tenant, "handle": who.name, "role": who.role.value})
