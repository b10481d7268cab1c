"""Admin HTTP API: an admin token manages the tokens and humans of its own tenant.

    POST /api/admin/tokens         {"role": "agent"|"human"|"admin", "name": "...",
                                    "expires_in": seconds?}  -> 201 {"token": "...", ...}
    GET  /api/admin/tokens         -> {"tokens": [{hash, role, name, created_at, ...}]}
    POST /api/admin/tokens/revoke  {"token": "<token or its sha256 hex>"} -> 204 | 404
    GET  /api/admin/humans         -> {"humans": ["me", ...]}
    POST   /api/admin/notify       {"webhook": URL} | {"ntfy": URL, "token"?}, "human"?
                                   -> 201 {"endpoint": {...}, "secret": "whsec_..."?}
    GET    /api/admin/notify       -> {"endpoints": [{id, channel, url, human, pending,
                                       last_error, disabled_reason, ...}]}
    DELETE /api/admin/notify/{id}  -> 204 | 404

Notification endpoints (docs/notifications.md): a webhook's signing secret is in the
answer that creates it, and never again.

Bearer tokens only (no cookies), so cross-site requests cannot reach these.

Bounds: ``name`` is a name like every other (1..200 of ``A-Z a-z 0-9 . _ : ~ + = @ -``,
``hub.protocol.check_name``), refused with 400 ``invalid`` naming the field. A token's
``expires_in`` is > 0 and at most :data:`TOKEN_EXPIRES_LIMIT` (ten years): longer than a
request's 30 days, since tokens are credentials rotated on their own schedule, but finite,
so no arithmetic overflows and nothing "expires" in 1e308 s. Omit it for a token that never
expires.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hub.errors import Invalid, NotFound
from hub.notify import endpoints
from hub.protocol import check_name
from hub.server.auth import authenticate, hub_of
from hub.server.bodies import read_object
from hub.server.errors import endpoint
from hub.store import Principal, Role

#: The longest ``expires_in`` of a token: ten years.
TOKEN_EXPIRES_LIMIT = 10 * 365 * 86400.0
#: Largest body of an admin call.
MAX_ADMIN_BODY = 4096


async def _admin(request: Request) -> Principal:
    """The calling admin (bearer token only). Raises Unauthorized / Denied."""
    return await authenticate(request, Role.ADMIN, cookies=False)


def _expires_in(body: dict[str, Any]) -> float | None:
    value = body.get("expires_in")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value <= TOKEN_EXPIRES_LIMIT:  # also refuses NaN and infinities
        raise Invalid(f"field 'expires_in' must be > 0 and <= {TOKEN_EXPIRES_LIMIT:g} seconds "
                      "(ten years); omit it for a token that never expires", param="expires_in")
    return float(value)


@endpoint
async def create_token(request: Request) -> Response:
    who = await _admin(request)
    hub = hub_of(request)
    body = await read_object(request, MAX_ADMIN_BODY)
    try:
        role = Role(str(body.get("role")))
    except ValueError:
        raise Invalid("field 'role' must be agent, human or admin", param="role") from None
    name = check_name("name", body.get("name"))
    expires_in = _expires_in(body)
    expires_at = hub.clock.now() + expires_in if expires_in is not None else None
    token = await hub.store.create_token(who.tenant, role, name, expires_at)
    hub.forget_humans(who.tenant)  # a new human may now be asked
    return JSONResponse({"token": token, "tenant": who.tenant, "role": role.value,
                         "name": name, "expires_at": expires_at}, status_code=201)


@endpoint
async def list_tokens(request: Request) -> Response:
    who = await _admin(request)
    return JSONResponse({"tokens": await hub_of(request).store.list_tokens(who.tenant)})


@endpoint
async def revoke_token(request: Request) -> Response:
    who = await _admin(request)
    hub = hub_of(request)
    body = await read_object(request, MAX_ADMIN_BODY)
    token = body.get("token")
    if not isinstance(token, str) or not 1 <= len(token) <= 200:
        raise Invalid('send {"token": "<token or its hash>"}', param="token")
    # Through the service: the token's sockets close and its blocked calls end at once.
    if not await hub.revoke(token, tenant=who.tenant):
        raise NotFound("no such active token in this tenant")
    return Response(status_code=204)


@endpoint
async def list_humans(request: Request) -> Response:
    who = await _admin(request)
    return JSONResponse({"humans": await hub_of(request).store.list_humans(who.tenant)})


@endpoint
async def add_notify(request: Request) -> Response:
    who = await _admin(request)
    hub = hub_of(request)
    body = await read_object(request, MAX_ADMIN_BODY)
    unknown = sorted(set(body) - {"webhook", "ntfy", "token", "human"})
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}", param=unknown[0])
    if ("webhook" in body) == ("ntfy" in body):
        raise Invalid('send {"webhook": URL} or {"ntfy": URL}', param="webhook")
    human = body.get("human")
    if human is not None:
        human = check_name("human", human)
    now = hub.clock.now()
    secret = None
    if "webhook" in body:
        ep, secret = endpoints.webhook(who.tenant, human, body["webhook"], now)
    else:
        ep = endpoints.ntfy_topic(who.tenant, human, body["ntfy"], body.get("token"), now)
    await hub.store.add_endpoint(ep)
    out: dict[str, Any] = {"endpoint": ep.view()}
    if secret is not None:
        out["secret"] = secret
    return JSONResponse(out, status_code=201)


@endpoint
async def list_notify(request: Request) -> Response:
    who = await _admin(request)
    eps = await hub_of(request).store.list_endpoints(who.tenant)
    return JSONResponse({"endpoints": [e.view() for e in eps]})


@endpoint
async def remove_notify(request: Request) -> Response:
    who = await _admin(request)
    if not await hub_of(request).store.remove_endpoint(request.path_params["endpoint_id"],
                                                      tenant=who.tenant):
        raise NotFound("no such endpoint in this tenant")
    return Response(status_code=204)


def routes() -> list[Route]:
    return [
        Route("/api/admin/tokens", create_token, methods=["POST"]),
        Route("/api/admin/tokens", list_tokens, methods=["GET"]),
        Route("/api/admin/tokens/revoke", revoke_token, methods=["POST"]),
        Route("/api/admin/humans", list_humans, methods=["GET"]),
        Route("/api/admin/notify", add_notify, methods=["POST"]),
        Route("/api/admin/notify", list_notify, methods=["GET"]),
        Route("/api/admin/notify/{endpoint_id:str}", remove_notify, methods=["DELETE"]),
    ]
