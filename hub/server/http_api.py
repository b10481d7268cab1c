"""The plain HTTP API: the WebSocket protocol's calls as JSON over HTTP.

For clients without the SDK (docs/http-api.md has a curl example for each call)::

    POST /api/requests                    agent   create (Idempotency-Key = op_id), or re-attach
    GET  /api/requests/{op_id}?wait=S     agent   read; long-poll up to S s, at once if resolved
    POST /api/requests/{op_id}/cancel     agent   cancel a pending request
    GET  /api/inbox                       human   pending requests addressed to me
    POST /api/requests/{op_id}/respond    human   answer (or decline) one of them
    GET  /api/history?limit=N             human   my resolved requests, newest first
    GET  /openapi.json                    anyone  the OpenAPI description of the routes

Every error is ``{"error": {"code", "message", "retryable"}}`` with the HTTP status of
``hub.errors.ERROR_TABLE`` (``request`` rides along for ``conflict`` and
``already_resolved``; ``hub.server.errors`` is the one mapping). A long-poll whose token is
revoked or expires while it blocks answers 401. The tenant comes from the token only: a
request of another tenant is answered exactly like a missing one (404 ``not_found``). Humans may use the
browser session cookie instead of a bearer token; then state-changing calls from another
site are refused (403), since a cookie alone is no proof of intent.

The handlers are shells: they decode once at the edge (``parse_ask``) and hand events to
the service; every rule about requests lives in the core. The OpenAPI document is
built beside the routes, in ``hub.server.openapi``.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import hub.server.openapi as openapi
from hub.core import AnswerSubmitted, CancelRequested
from hub.core import Request as HubRequest
from hub.errors import Invalid
from hub.protocol import (
    MAX_WAIT_SECONDS,
    NAME_CHARS,
    WAIT_LIMIT,
    Ask,
    OpId,
    Status,
    fresh_op_id,
    is_name,
    parse_ask,
)
from hub.schema import SchemaError, check_schema, check_tools
from hub.server.auth import authenticate, hub_of
from hub.server.bodies import MAX_API_BODY, read_object
from hub.server.errors import endpoint
from hub.service import listing
from hub.store import Role

ASK_FIELDS = frozenset({"op_id", "to", "question", "conversation", "kind", "choices", "context",
                        "default", "wait", "expires_in", "schema", "tools"})
DEFAULT_CONVERSATION = openapi.DEFAULT_CONVERSATION


def new_rid(request: Request) -> str:
    """A request id for the logs (``h<n>``), counted by this hub."""
    return hub_of(request).next_rid("h")


def wait_param(raw: str | None, default: float) -> float:
    """A ``wait`` query parameter in seconds: 0..WAIT_LIMIT."""
    if raw is None or raw == "":
        return default
    try:
        wait = float(raw)
    except ValueError:
        raise Invalid("'wait' must be a number of seconds", param="wait") from None
    if not 0 <= wait <= WAIT_LIMIT:  # also refuses NaN
        raise Invalid(f"'wait' must be 0..{WAIT_LIMIT:g} seconds", param="wait")
    return wait


def request_json(req: HubRequest, status: int = 200, **extra: Any) -> JSONResponse:
    return JSONResponse({"request": req.view(), **extra}, status_code=status)


# ---------------------------------------------------------------------------- agents


def parse_create(body: dict[str, Any], op_id: str) -> tuple[Ask, Any, Any, float | None]:
    """Decode a create body into (ask, schema, tools, wait-or-None). Raises Invalid."""
    unknown = sorted(set(body) - ASK_FIELDS)
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}")
    wait = body.get("wait")
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float))
                             or not 0 <= wait <= WAIT_LIMIT):
        raise Invalid(f"field 'wait' must be 0..{WAIT_LIMIT:g} seconds", param="wait")
    obj = dict(body)
    obj["op_id"] = op_id
    obj.setdefault("conversation", DEFAULT_CONVERSATION)
    # Without a wait the call answers at once, but the request stays open for a
    # following long-poll as if the caller waited the default (deadline = now + 60 + 10 s).
    obj["wait"] = MAX_WAIT_SECONDS if wait is None else wait
    ask = parse_ask(obj, 0)
    schema, tools = body.get("schema"), body.get("tools")
    if schema is not None:
        try:
            check_schema(schema)
        except SchemaError as exc:
            raise Invalid(f"field 'schema': {exc}") from None
    if tools is not None:
        try:
            check_tools(tools)
        except SchemaError as exc:
            raise Invalid(str(exc)) from None
    return ask, schema, tools, None if wait is None else float(wait)


def op_id_of(request: Request, body: dict[str, Any], now: float) -> str:
    """The op_id: the Idempotency-Key header (or field ``op_id``), else a fresh one
    (``fresh_op_id``: the time ``now``, then 128 random bits)."""
    key = request.headers.get("idempotency-key")
    in_body = body.get("op_id")
    if in_body is not None and not isinstance(in_body, str):
        raise Invalid("field 'op_id' must be a string", param="op_id")
    if key is not None and in_body is not None and key != in_body:
        raise Invalid("the Idempotency-Key header and field 'op_id' differ")
    op_id = key if key is not None else in_body
    if op_id is None:
        return fresh_op_id(now, secrets.token_hex(16))
    if not is_name(op_id):
        raise Invalid(f"an Idempotency-Key is 1..200 of {NAME_CHARS} (a random UUID is ideal)",
                      param="op_id")
    return op_id


@endpoint
async def create_request(request: Request) -> Response:
    """POST /api/requests: 201 with the new request, or 200 re-attached (same op_id and
    payload); 409 ``conflict`` when the op_id was used with another payload."""
    who = await authenticate(request, Role.AGENT, state_changing=True)
    hub = hub_of(request)
    body = await read_object(request, max(MAX_API_BODY, hub.settings.max_frame))
    op_id = op_id_of(request, body, hub.clock.now())
    body.pop("op_id", None)
    ask, schema, tools, wait = parse_create(body, op_id)
    rid = new_rid(request)
    if wait is None:
        req, attached = await hub.submit(who, ask, rid, schema=schema, tools=tools)
    else:
        req, attached = await hub.ask_and_wait(who, ask, rid, schema=schema, tools=tools)
    resp = request_json(req, 200 if attached else 201, attached=attached)
    resp.headers["location"] = f"/api/requests/{req.op_id}"
    return resp


@endpoint
async def get_request(request: Request) -> Response:
    """GET /api/requests/{op_id}?wait=S: the request; blocks up to S seconds while it is
    pending (each read extends an open-ended deadline to now + S + 10 s)."""
    who = await authenticate(request, Role.AGENT)
    wait = wait_param(request.query_params.get("wait"), 0.0)
    req = await hub_of(request).wait_for(who, request.path_params["op_id"], wait, new_rid(request))
    return request_json(req)


@endpoint
async def cancel_request(request: Request) -> Response:
    """POST /api/requests/{op_id}/cancel: 200 cancelled, or 409 ``already_resolved``
    carrying the resolution that won."""
    who = await authenticate(request, Role.AGENT, state_changing=True)
    op_id = OpId(request.path_params["op_id"])
    req = await hub_of(request).call(who, CancelRequested(op_id), new_rid(request))
    return request_json(req)


# ---------------------------------------------------------------------------- humans


@endpoint
async def inbox(request: Request) -> Response:
    """GET /api/inbox: pending requests addressed to this human, nearest deadline first."""
    who = await authenticate(request, Role.HUMAN)
    items = await hub_of(request).inbox(who)
    return JSONResponse({"items": listing(items)})


@endpoint
async def history(request: Request) -> Response:
    """GET /api/history?limit=N: this human's resolved requests, newest first."""
    who = await authenticate(request, Role.HUMAN)
    raw = request.query_params.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= 500:
        raise Invalid("'limit' must be an integer 1..500")
    items = await hub_of(request).history(who, int(raw))
    return JSONResponse({"items": listing(items)})


@endpoint
async def respond(request: Request) -> Response:
    """POST /api/requests/{op_id}/respond ``{"value": ..., "status": "answered"|"declined"}``."""
    who = await authenticate(request, Role.HUMAN, state_changing=True)
    hub = hub_of(request)
    body = await read_object(request, max(MAX_API_BODY, hub.settings.max_frame))
    unknown = sorted(set(body) - {"value", "status"})
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}")
    status_raw = body.get("status", Status.ANSWERED.value)
    if status_raw not in (Status.ANSWERED.value, Status.DECLINED.value):
        raise Invalid("field 'status' must be 'answered' or 'declined'")
    event = AnswerSubmitted(OpId(request.path_params["op_id"]), who.name, Status(status_raw),
                            body.get("value"))
    req = await hub.call(who, event, new_rid(request))
    return request_json(req)


# ---------------------------------------------------------------------------- routes


def routes() -> list[Route]:
    return [
        Route("/api/requests", create_request, methods=["POST"]),
        Route("/api/requests/{op_id:str}", get_request, methods=["GET"]),
        Route("/api/requests/{op_id:str}/cancel", cancel_request, methods=["POST"]),
        Route("/api/requests/{op_id:str}/respond", respond, methods=["POST"]),
        Route("/api/inbox", inbox, methods=["GET"]),
        Route("/api/history", history, methods=["GET"]),
        Route("/openapi.json", openapi.openapi, methods=["GET"]),
    ]
