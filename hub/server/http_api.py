"""The plain HTTP API: the WebSocket protocol's calls as JSON over HTTP.

For clients without the SDK (docs/http-api.md has a curl example for each call)::

    POST /api/requests                    agent   create (Idempotency-Key = op_id), or re-attach
    GET  /api/requests/{op_id}?wait=S     agent   read; long-poll up to S s, at once if resolved
    POST /api/requests/{op_id}/cancel     agent   cancel a pending request
    GET  /api/inbox                       human   pending requests addressed to me
    POST /api/requests/{op_id}/respond    human   answer (or decline) one of them
    GET  /api/history?limit=N             human   my resolved requests, newest first
    GET  /openapi.json                    anyone  the OpenAPI description of /api and /v1

Every error is ``{"error": {"code", "message", "retryable"}}`` with the HTTP status of
``hub.protocol.ERROR_TABLE`` (``request`` rides along for ``conflict`` and
``already_resolved``). The tenant comes from the token only: a request of another
tenant is answered exactly like a missing one (404 ``not_found``). Humans may use the
browser session cookie instead of a bearer token; then state-changing calls from another
site are refused (403), since a cookie alone is no proof of intent.

The handlers are shells: they decode once at the edge (``parse_ask``) and hand events to
the service; every rule about requests lives in the core.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hub.core import AnswerSubmitted, CancelRequested
from hub.core import Request as HubRequest
from hub.protocol import (
    MAX_WAIT_SECONDS,
    Ask,
    BadJson,
    Denied,
    HubError,
    Invalid,
    OpId,
    RetryLater,
    Status,
    TooLarge,
    Unauthorized,
    parse_ask,
)
from hub.schema import SchemaError, check_schema, check_tools
from hub.server.auth import authenticate, bearer, cross_site
from hub.service import HubService
from hub.store import Principal, Role

log = logging.getLogger("a2h.http")

#: The longest any HTTP call may block (the official OpenAI clients time out at 600 s).
MAX_HTTP_WAIT = 600.0
#: Largest JSON body of the plain API (a WebSocket frame's limit applies when larger).
MAX_API_BODY = 64 * 1024
_rids = itertools.count(1)

ASK_FIELDS = frozenset({"op_id", "to", "question", "conversation", "kind", "choices", "context",
                        "default", "wait", "expires_in", "schema", "tools"})
DEFAULT_CONVERSATION = "default"
#: Client-chosen op_ids must be usable in a URL path segment as they are.
OP_ID_RE = re.compile(r"^[A-Za-z0-9._:~+=@-]{1,200}$")


def new_rid() -> str:
    return f"h{next(_rids)}"


def hub_of(request: Request) -> HubService:
    hub: HubService = request.app.state.hub
    return hub


# ---------------------------------------------------------------------------- edges


def error_body(exc: HubError) -> dict[str, Any]:
    err: dict[str, Any] = {"code": exc.code.value, "message": exc.message,
                           "retryable": exc.retryable}
    if exc.request is not None:
        err["request"] = exc.request
    return {"error": err}


def error_response(exc: HubError) -> JSONResponse:
    headers = {"www-authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse(error_body(exc), status_code=exc.http_status, headers=headers)


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, at most ``limit`` bytes (TooLarge / BadJson otherwise)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        raise BadJson("the body is not valid JSON") from None


async def read_object(request: Request, limit: int = MAX_API_BODY) -> dict[str, Any]:
    body = await read_json(request, limit)
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    return body


async def principal(request: Request, *roles: Role, state_changing: bool = False) -> Principal:
    """Who is calling, refused unless their role is one of ``roles``.

    Raises:
        Unauthorized: no or a bad token / session.
        Denied: wrong role, or a cookie-authenticated state change from another site.
    """
    hub = hub_of(request)
    if state_changing and bearer(request) is None \
            and cross_site(request, hub.settings.allowed_origins):
        raise Denied("cross-site request refused")
    who = await authenticate(request, hub, websocket=False)
    if who is None:
        raise Unauthorized("send 'Authorization: Bearer <token>' (a valid, unrevoked token)")
    if who.role not in roles:
        wanted = " or ".join(r.value for r in roles)
        raise Denied(f"this call needs a token of role {wanted}, not {who.role.value}")
    return who


def wait_param(raw: str | None, default: float) -> float:
    """A ``wait`` in seconds: 0..MAX_HTTP_WAIT."""
    if raw is None or raw == "":
        return default
    try:
        wait = float(raw)
    except ValueError:
        raise Invalid("'wait' must be a number of seconds") from None
    if not 0 <= wait <= MAX_HTTP_WAIT:  # also refuses NaN
        raise Invalid(f"'wait' must be 0..{MAX_HTTP_WAIT:g} seconds")
    return wait


Handler = Callable[[Request], Awaitable[Response]]


def endpoint(fn: Handler) -> Handler:
    """Turn HubErrors into error objects; anything else is a logged 500."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except HubError as exc:
            return error_response(exc)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(RetryLater("internal error"))

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


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
                             or not 0 <= wait <= MAX_HTTP_WAIT):
        raise Invalid(f"field 'wait' must be 0..{MAX_HTTP_WAIT:g} seconds")
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


def op_id_of(request: Request, body: dict[str, Any]) -> str:
    """The op_id: the Idempotency-Key header (or field ``op_id``), else 128 random bits."""
    key = request.headers.get("idempotency-key")
    in_body = body.get("op_id")
    if in_body is not None and not isinstance(in_body, str):
        raise Invalid("field 'op_id' must be a string")
    if key is not None and in_body is not None and key != in_body:
        raise Invalid("the Idempotency-Key header and field 'op_id' differ")
    op_id = key if key is not None else in_body
    if op_id is None:
        return secrets.token_hex(16)
    if not OP_ID_RE.match(op_id):
        raise Invalid("an Idempotency-Key is 1..200 of A-Z a-z 0-9 and . _ : ~ + = @ - "
                      "(a random UUID is ideal)")
    return op_id


@endpoint
async def create_request(request: Request) -> Response:
    """POST /api/requests: 201 with the new request, or 200 re-attached (same op_id and
    payload); 409 ``conflict`` when the op_id was used with another payload."""
    who = await principal(request, Role.AGENT, state_changing=True)
    hub = hub_of(request)
    body = await read_object(request, max(MAX_API_BODY, hub.settings.max_frame))
    op_id = op_id_of(request, body)
    body.pop("op_id", None)
    ask, schema, tools, wait = parse_create(body, op_id)
    rid = new_rid()
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
    who = await principal(request, Role.AGENT)
    wait = wait_param(request.query_params.get("wait"), 0.0)
    req = await hub_of(request).wait_for(who, request.path_params["op_id"], wait, new_rid())
    return request_json(req)


@endpoint
async def cancel_request(request: Request) -> Response:
    """POST /api/requests/{op_id}/cancel: 200 cancelled, or 409 ``already_resolved``
    carrying the resolution that won."""
    who = await principal(request, Role.AGENT, state_changing=True)
    op_id = OpId(request.path_params["op_id"])
    req = await hub_of(request).call(who, CancelRequested(op_id), new_rid())
    return request_json(req)


# ---------------------------------------------------------------------------- humans


@endpoint
async def inbox(request: Request) -> Response:
    """GET /api/inbox: pending requests addressed to this human, nearest deadline first."""
    who = await principal(request, Role.HUMAN)
    items = await hub_of(request).inbox(who)
    return JSONResponse({"items": [r.view() for r in items]})


@endpoint
async def history(request: Request) -> Response:
    """GET /api/history?limit=N: this human's resolved requests, newest first."""
    who = await principal(request, Role.HUMAN)
    raw = request.query_params.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= 500:
        raise Invalid("'limit' must be an integer 1..500")
    items = await hub_of(request).history(who, int(raw))
    return JSONResponse({"items": [r.view() for r in items]})


@endpoint
async def respond(request: Request) -> Response:
    """POST /api/requests/{op_id}/respond ``{"value": ..., "status": "answered"|"declined"}``."""
    who = await principal(request, Role.HUMAN, state_changing=True)
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
    req = await hub.call(who, event, new_rid())
    return request_json(req)


# ---------------------------------------------------------------------------- OpenAPI


async def openapi(request: Request) -> Response:
    """GET /openapi.json: the hand-written description of /api and /v1."""
    return JSONResponse(openapi_document())


def routes() -> list[Route]:
    return [
        Route("/api/requests", create_request, methods=["POST"]),
        Route("/api/requests/{op_id:str}", get_request, methods=["GET"]),
        Route("/api/requests/{op_id:str}/cancel", cancel_request, methods=["POST"]),
        Route("/api/requests/{op_id:str}/respond", respond, methods=["POST"]),
        Route("/api/inbox", inbox, methods=["GET"]),
        Route("/api/history", history, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]


# ---------------------------------------------------------------------------- the document


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {400: "invalid request", 401: "no or a bad token", 403: "wrong role or cross-site",
            404: "no such request in this tenant", 409: "conflict / already resolved",
            413: "body too large", 503: "overloaded (do not retry by yourself)"}
    return {str(s): _json(_ref("Error"), text[s]) for s in statuses}


_OP_ID = {"name": "op_id", "in": "path", "required": True, "schema": {"type": "string"}}
_WAIT = {"name": "wait", "in": "query", "required": False,
         "description": "seconds to block while pending (0..600; default 0)",
         "schema": {"type": "number", "minimum": 0, "maximum": MAX_HTTP_WAIT}}
_REQ = {"type": "object", "properties": {"request": _ref("Request")}}
_ITEMS = {"type": "object", "properties": {"items": {"type": "array", "items": _ref("Request")}}}
_OAI_ERR = _json(_ref("OpenAIError"), "OpenAI-style error")


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the plain HTTP API and of /v1 (hand-written)."""
    any_json: dict[str, Any] = {}
    return {
        "openapi": "3.1.0",
        "info": {"title": "A2H hub", "version": "1",
                 "description": "Agents ask people; people answer. See docs/http-api.md."},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "a2h_session"},
            },
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message", "retryable"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                   "retryable": {"type": "boolean"},
                                   "request": _ref("Request")}}}},
                "OpenAIError": {"type": "object", "properties": {"error": {
                    "type": "object", "properties": {
                        "message": {"type": "string"}, "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]}}}}},
                "Request": {"type": "object", "properties": {
                    "op_id": {"type": "string"}, "conversation": {"type": "string"},
                    "to": {"type": "string"}, "from": {"type": "string"},
                    "kind": {"enum": ["question", "approval"]},
                    "question": {"type": "string"},
                    "choices": {"type": ["array", "null"], "items": {"type": "string"}},
                    "context": any_json, "default": any_json, "schema": any_json,
                    "tools": any_json,
                    "status": {"enum": ["pending", "answered", "declined", "expired",
                                        "cancelled"]},
                    "value": any_json, "actor": {"type": ["string", "null"]},
                    "created_at": {"type": "number"}, "deadline": {"type": "number"},
                    "resolved_at": {"type": ["number", "null"]},
                    "human_seconds": {"type": ["number", "null"]}}},
                "Ask": {"type": "object", "required": ["to", "question"], "properties": {
                    "to": {"type": "string", "description": "the human's handle"},
                    "question": {"type": "string", "description": "Markdown"},
                    "conversation": {"type": "string", "default": DEFAULT_CONVERSATION},
                    "kind": {"enum": ["question", "approval"], "default": "question"},
                    "choices": {"type": ["array", "null"], "items": {"type": "string"}},
                    "context": any_json, "default": any_json,
                    "wait": {"type": "number", "minimum": 0, "maximum": MAX_HTTP_WAIT,
                             "description": "block up to this many seconds (default: "
                                            "answer at once)"},
                    "expires_in": {"type": ["number", "null"], "exclusiveMinimum": 0},
                    "schema": any_json, "tools": {"type": "array"},
                    "op_id": {"type": "string",
                              "description": "alternative to the Idempotency-Key header"}}},
                "Respond": {"type": "object", "properties": {
                    "value": any_json,
                    "status": {"enum": ["answered", "declined"], "default": "answered"}}},
                "ChatCompletionRequest": {"type": "object", "required": ["model", "messages"],
                                          "properties": {
                    "model": {"type": "string", "description": "a human's handle, or "
                                                               "human/<handle>"},
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "stream": {"type": "boolean"}, "response_format": {"type": "object"},
                    "tools": {"type": "array"}, "tool_choice": any_json,
                    "user": {"type": "string", "description": "conversation, unless "
                                                             "metadata.conversation is set"},
                    "metadata": {"type": "object",
                                 "properties": {"conversation": {"type": "string"}}},
                    "wait": {"type": "number", "minimum": 0, "maximum": MAX_HTTP_WAIT,
                             "default": MAX_WAIT_SECONDS},
                    "expires_in": {"type": "number", "exclusiveMinimum": 0}}},
                "ChatCompletion": {"type": "object", "properties": {
                    "id": {"type": "string"}, "object": {"const": "chat.completion"},
                    "created": {"type": "integer"}, "model": {"type": "string"},
                    "choices": {"type": "array"}, "usage": {"type": "object"},
                    "a2h": {"type": "object", "description": "the resolution: op_id, actor, "
                                                            "human_seconds, ..."}}},
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/requests": {"post": {
                "summary": "Create a request (agent), or re-attach to it",
                "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                                "schema": {"type": "string", "pattern": OP_ID_RE.pattern},
                                "description": "the op_id; the hub issues one if absent"}],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref("Ask")}}},
                "responses": {"201": _json(_REQ, "created"),
                              "200": _json(_REQ, "re-attached (same op_id and payload)"),
                              **_errors(400, 401, 403, 404, 409, 413, 503)}}},
            "/api/requests/{op_id}": {"get": {
                "summary": "Read a request; long-poll with ?wait= (returns at once when "
                           "resolved)",
                "parameters": [_OP_ID, _WAIT],
                "responses": {"200": _json(_REQ, "the request (possibly still pending)"),
                              **_errors(400, 401, 403, 404)}}},
            "/api/requests/{op_id}/cancel": {"post": {
                "summary": "Cancel a pending request (agent)", "parameters": [_OP_ID],
                "responses": {"200": _json(_REQ, "cancelled"), **_errors(401, 403, 404, 409)}}},
            "/api/requests/{op_id}/respond": {"post": {
                "summary": "Answer or decline a request addressed to me (human)",
                "security": [{"bearer": []}, {"session": []}], "parameters": [_OP_ID],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref("Respond")}}},
                "responses": {"200": _json(_REQ, "resolved"),
                              **_errors(400, 401, 403, 404, 409)}}},
            "/api/inbox": {"get": {
                "summary": "My pending requests, nearest deadline first (human)",
                "security": [{"bearer": []}, {"session": []}],
                "responses": {"200": _json(_ITEMS, "pending requests"), **_errors(401, 403)}}},
            "/api/history": {"get": {
                "summary": "My resolved requests, newest first (human)",
                "security": [{"bearer": []}, {"session": []}],
                "parameters": [{"name": "limit", "in": "query", "schema": {
                    "type": "integer", "minimum": 1, "maximum": 500, "default": 50}}],
                "responses": {"200": _json(_ITEMS, "resolved requests"),
                              **_errors(400, 401, 403)}}},
            "/v1/chat/completions": {"post": {
                "summary": "Ask a person through an OpenAI-compatible call (agent)",
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "required": False,
                     "schema": {"type": "string"}},
                    {"name": "X-A2H-Wait", "in": "header", "required": False,
                     "schema": {"type": "number"}}],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref("ChatCompletionRequest")}}},
                "responses": {
                    "200": {"description": "the answer: a chat.completion, or with "
                                           "stream=true server-sent events",
                            "content": {"application/json": {"schema": _ref("ChatCompletion")},
                                        "text/event-stream": {"schema": {"type": "string"}}}},
                    "400": _OAI_ERR, "401": _OAI_ERR, "403": _OAI_ERR, "404": _OAI_ERR,
                    "408": {"description": "still pending (request_pending: retry the same "
                                           "call) or expired (request_expired)",
                            "content": {"application/json": {"schema": _ref("OpenAIError")}}},
                    "409": _OAI_ERR, "422": _OAI_ERR}}},
            "/v1/models": {"get": {
                "summary": "The tenant's humans, as models",
                "responses": {"200": _json({"type": "object"}, "model list"),
                              "401": _OAI_ERR}}},
            "/v1/models/{model}": {"get": {
                "summary": "One human, as a model",
                "parameters": [{"name": "model", "in": "path", "required": True,
                                "schema": {"type": "string"}}],
                "responses": {"200": _json({"type": "object"}, "the model"),
                              "401": _OAI_ERR, "404": _OAI_ERR}}},
        },
    }
