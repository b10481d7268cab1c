"""The OpenAPI 3.1 description of the hub's HTTP routes, built from the app's route table.

:data:`OPERATIONS` describes each ``(method, path)``; :func:`document` walks the routes the
app really serves and picks each one's description, so the document lists exactly what is
served, and :func:`undescribed` names any route nobody described (a test keeps it empty).
The WebSocket protocol is described in docs/protocol.md, not here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hub.protocol import EXPIRES_LIMIT, MAX_WAIT_SECONDS, NAME_CHARS, NAME_MAX, WAIT_LIMIT
from hub.server.admin import TOKEN_EXPIRES_LIMIT

DEFAULT_CONVERSATION = "default"
#: A name's pattern (tenants, handles, conversations, op_ids): hub.protocol.is_name.
NAME_PATTERN = r"^[A-Za-z0-9._:~+=@-]{1,200}$"

Json = dict[str, Any]


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Json, description: str) -> Json:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR_TEXT = {400: "invalid request", 401: "no or a bad token", 403: "wrong role or cross-site",
               404: "not found (in this tenant)", 409: "conflict / already resolved",
               413: "body too large", 429: "a limit was reached",
               503: "overloaded (do not retry by yourself) or unavailable (retry)"}


def _errors(*statuses: int) -> Json:
    return {str(s): _json(_ref("Error"), _ERROR_TEXT[s]) for s in statuses}


_ANY: Json = {}
_NAME: Json = {"type": "string", "pattern": NAME_PATTERN,
               "description": f"1..{NAME_MAX} of {NAME_CHARS}"}
_OP_ID = {"name": "op_id", "in": "path", "required": True, "schema": _NAME}
_WAIT = {"name": "wait", "in": "query", "required": False,
         "description": f"seconds to block while pending (0..{WAIT_LIMIT:g}; default 0)",
         "schema": {"type": "number", "minimum": 0, "maximum": WAIT_LIMIT}}
_REQ = {"type": "object", "properties": {"request": _ref("Request")}}
_ITEMS = {"type": "object", "properties": {"items": {"type": "array", "items": _ref("Request")}}}
_OAI_ERR = _json(_ref("OpenAIError"), "OpenAI-style error")
_BEARER_OR_SESSION: list[Json] = [{"bearer": []}, {"session": []}]
_PUBLIC: list[Json] = [{}]

SCHEMAS: dict[str, Json] = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message", "retryable"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "retryable": {"type": "boolean"},
                       "retry_after": {"type": "number"}, "param": {"type": "string"},
                       "request": _ref("Request")}}}},
    "OpenAIError": {"type": "object", "properties": {
        "error": {"type": "object", "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}},
        "a2h": {"type": "object", "description": "the request concerned, for outcomes"}}},
    "Request": {"type": "object", "properties": {
        "op_id": {"type": "string"}, "conversation": {"type": "string"},
        "to": {"type": "string"}, "from": {"type": "string"},
        "kind": {"enum": ["question", "approval"]},
        "question": {"type": "string"},
        "choices": {"type": ["array", "null"], "items": {"type": "string"}},
        "context": _ANY, "default": _ANY, "schema": _ANY, "tools": _ANY,
        "status": {"enum": ["pending", "answered", "declined", "expired", "cancelled"]},
        "value": _ANY, "actor": {"type": ["string", "null"]},
        "created_at": {"type": "number"}, "deadline": {"type": "number"},
        "resolved_at": {"type": ["number", "null"]},
        "human_seconds": {"type": ["number", "null"]}}},
    "Ask": {"type": "object", "required": ["to", "question"], "properties": {
        "to": {**_NAME, "description": "the human's handle"},
        "question": {"type": "string", "description": "Markdown"},
        "conversation": {**_NAME, "default": DEFAULT_CONVERSATION},
        "kind": {"enum": ["question", "approval"], "default": "question"},
        "choices": {"type": ["array", "null"], "items": {"type": "string"}},
        "context": _ANY, "default": _ANY,
        "wait": {"type": "number", "minimum": 0, "maximum": WAIT_LIMIT,
                 "description": "block up to this many seconds (default: answer at once)"},
        "expires_in": {"type": ["number", "null"], "exclusiveMinimum": 0,
                       "maximum": EXPIRES_LIMIT},
        "schema": _ANY, "tools": {"type": "array"},
        "op_id": {**_NAME, "description": "alternative to the Idempotency-Key header"}}},
    "Respond": {"type": "object", "properties": {
        "value": _ANY, "status": {"enum": ["answered", "declined"], "default": "answered"}}},
    "ChatCompletionRequest": {"type": "object", "required": ["model", "messages"],
                              "properties": {
        "model": {"type": "string", "description": "a human's handle, or human/<handle>"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "stream": {"type": "boolean"}, "response_format": {"type": "object"},
        "tools": {"type": "array"}, "tool_choice": _ANY,
        "user": {**_NAME, "description": "conversation, unless metadata.conversation is set"},
        "metadata": {"type": "object", "properties": {"conversation": _NAME}},
        "wait": {"type": "number", "minimum": 0, "maximum": WAIT_LIMIT,
                 "default": MAX_WAIT_SECONDS},
        "expires_in": {"type": "number", "exclusiveMinimum": 0, "maximum": EXPIRES_LIMIT}}},
    "ChatCompletion": {"type": "object", "properties": {
        "id": {"type": "string"}, "object": {"const": "chat.completion"},
        "created": {"type": "integer"}, "model": {"type": "string"},
        "choices": {"type": "array"}, "usage": {"type": "object"},
        "a2h": {"type": "object", "description": "the resolution: op_id, actor, "
                                                "human_seconds, ..."}}},
    "NewToken": {"type": "object", "required": ["role", "name"], "properties": {
        "role": {"enum": ["agent", "human", "admin"]}, "name": _NAME,
        "expires_in": {"type": "number", "exclusiveMinimum": 0,
                       "maximum": TOKEN_EXPIRES_LIMIT,
                       "description": "seconds (at most ten years); omit: never expires"}}},
}

#: (method, path as the router writes it, without converters) -> the operation.
OPERATIONS: dict[tuple[str, str], Json] = {
    ("POST", "/api/requests"): {
        "summary": "Create a request (agent), or re-attach to it",
        "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                        "schema": _NAME,
                        "description": "the op_id; the hub issues one if absent"}],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("Ask")}}},
        "responses": {"201": _json(_REQ, "created"),
                      "200": _json(_REQ, "re-attached (same op_id and payload)"),
                      **_errors(400, 401, 403, 404, 409, 413, 429, 503)}},
    ("GET", "/api/requests/{op_id}"): {
        "summary": "Read a request; long-poll with ?wait= (returns at once when resolved)",
        "parameters": [_OP_ID, _WAIT],
        "responses": {"200": _json(_REQ, "the request (possibly still pending)"),
                      **_errors(400, 401, 403, 404)}},
    ("POST", "/api/requests/{op_id}/cancel"): {
        "summary": "Cancel a pending request (agent)", "parameters": [_OP_ID],
        "responses": {"200": _json(_REQ, "cancelled"), **_errors(401, 403, 404, 409)}},
    ("POST", "/api/requests/{op_id}/respond"): {
        "summary": "Answer or decline a request addressed to me (human)",
        "security": _BEARER_OR_SESSION, "parameters": [_OP_ID],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("Respond")}}},
        "responses": {"200": _json(_REQ, "resolved"), **_errors(400, 401, 403, 404, 409)}},
    ("GET", "/api/inbox"): {
        "summary": "My pending requests, nearest deadline first (human)",
        "security": _BEARER_OR_SESSION,
        "responses": {"200": _json(_ITEMS, "pending requests"), **_errors(401, 403)}},
    ("GET", "/api/history"): {
        "summary": "My resolved requests, newest first (human)",
        "security": _BEARER_OR_SESSION,
        "parameters": [{"name": "limit", "in": "query", "schema": {
            "type": "integer", "minimum": 1, "maximum": 500, "default": 50}}],
        "responses": {"200": _json(_ITEMS, "resolved requests"), **_errors(400, 401, 403)}},
    ("POST", "/v1/chat/completions"): {
        "summary": "Ask a person through an OpenAI-compatible call (agent)",
        "parameters": [
            {"name": "Idempotency-Key", "in": "header", "required": False,
             "schema": {"type": "string"}},
            {"name": "X-A2H-Wait", "in": "header", "required": False,
             "schema": {"type": "number", "minimum": 0, "maximum": WAIT_LIMIT}}],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("ChatCompletionRequest")}}},
        "responses": {
            "200": {"description": "the answer: a chat.completion, or with stream=true "
                                   "server-sent events",
                    "content": {"application/json": {"schema": _ref("ChatCompletion")},
                                "text/event-stream": {"schema": {"type": "string"}}}},
            "400": _OAI_ERR, "401": _OAI_ERR, "403": _OAI_ERR, "404": _OAI_ERR,
            "408": {"description": "still pending (request_pending: retry the same call) "
                                   "or expired (request_expired)",
                    "content": {"application/json": {"schema": _ref("OpenAIError")}}},
            "409": _OAI_ERR, "422": _OAI_ERR}},
    ("GET", "/v1/models"): {
        "summary": "The tenant's humans, as models",
        "responses": {"200": _json({"type": "object"}, "model list"), "401": _OAI_ERR}},
    ("GET", "/v1/models/{model}"): {
        "summary": "One human, as a model",
        "parameters": [{"name": "model", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {"200": _json({"type": "object"}, "the model"),
                      "401": _OAI_ERR, "404": _OAI_ERR}},
    ("POST", "/api/session"): {
        "summary": "Sign in a browser: exchange a human token for a session cookie",
        "security": _PUBLIC,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["token"],
            "properties": {"token": {"type": "string"}}}}}},
        "responses": {"204": {"description": "signed in (Set-Cookie: a2h_session)"},
                      **_errors(400, 401, 403)}},
    ("DELETE", "/api/session"): {
        "summary": "Sign out a browser", "security": _PUBLIC,
        "responses": {"204": {"description": "signed out"}, **_errors(403)}},
    ("GET", "/api/me"): {
        "summary": "Who am I (the token's or session's tenant, handle and role)",
        "security": _BEARER_OR_SESSION,
        "responses": {"200": _json({"type": "object", "properties": {
            "tenant": {"type": "string"}, "handle": {"type": "string"},
            "role": {"enum": ["agent", "human", "admin"]}}}, "the caller"),
            **_errors(401)}},
    ("POST", "/api/admin/tokens"): {
        "summary": "Create a token in my tenant (admin)",
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("NewToken")}}},
        "responses": {"201": _json({"type": "object"}, "the token (shown once)"),
                      **_errors(400, 401, 403)}},
    ("GET", "/api/admin/tokens"): {
        "summary": "The tokens of my tenant, without their secrets (admin)",
        "responses": {"200": _json({"type": "object"}, "tokens"), **_errors(401, 403)}},
    ("POST", "/api/admin/tokens/revoke"): {
        "summary": "Revoke a token of my tenant by value or sha256 hex (admin)",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["token"],
            "properties": {"token": {"type": "string"}}}}}},
        "responses": {"204": {"description": "revoked"}, **_errors(400, 401, 403, 404)}},
    ("POST", "/api/admin/notify"): {
        "summary": "Add a webhook or an ntfy topic for my tenant or one person (admin); a "
                   "webhook's signing secret is in this answer only (docs/notifications.md)",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "properties": {
                "webhook": {"type": "string", "format": "uri"},
                "ntfy": {"type": "string", "format": "uri"},
                "token": {"type": "string"}, "human": {"type": "string"}}}}}},
        "responses": {"201": _json({"type": "object"}, "the endpoint (and its secret)"),
                      **_errors(400, 401, 403)}},
    ("GET", "/api/admin/notify"): {
        "summary": "Notification endpoints of my tenant: pending deliveries, last error, "
                   "why disabled (admin)",
        "responses": {"200": _json({"type": "object"}, "endpoints"), **_errors(401, 403)}},
    ("DELETE", "/api/admin/notify/{endpoint_id}"): {
        "summary": "Remove a notification endpoint and its pending deliveries (admin)",
        "parameters": [{"name": "endpoint_id", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {"204": {"description": "removed"}, **_errors(401, 403, 404)}},
    ("GET", "/api/push/key"): {
        "summary": "The hub's VAPID public key, for PushManager.subscribe (human)",
        "security": _BEARER_OR_SESSION,
        "responses": {"200": _json({"type": "object"}, "public_key, base64url"),
                      **_errors(401, 403, 503)}},
    ("POST", "/api/push/subscriptions"): {
        "summary": "Get Web Push notifications in this browser (human): "
                   "PushSubscription.toJSON()",
        "security": _BEARER_OR_SESSION,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["endpoint", "keys"]}}}},
        "responses": {"201": _json({"type": "object"}, "the subscription's id"),
                      **_errors(400, 401, 403, 429)}},
    ("DELETE", "/api/push/subscriptions"): {
        "summary": "Stop Web Push notifications in a browser of mine (human)",
        "security": _BEARER_OR_SESSION,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["endpoint"]}}}},
        "responses": {"204": {"description": "removed"}, **_errors(400, 401, 403, 404)}},
    ("GET", "/api/admin/humans"): {
        "summary": "The humans of my tenant (admin)",
        "responses": {"200": _json({"type": "object"}, "handles"), **_errors(401, 403)}},
    ("GET", "/healthz"): {
        "summary": "Liveness: the store answers", "security": _PUBLIC,
        "responses": {"200": _json({"type": "object"}, "ok"),
                      "503": _json({"type": "object"}, "the store does not answer")}},
    ("GET", "/metrics"): {
        "summary": "Prometheus metrics (admin bearer token, unless --metrics-public)",
        "responses": {"200": {"description": "Prometheus text format",
                              "content": {"text/plain": {"schema": {"type": "string"}}}},
                      **_errors(401, 403)}},
    **{(method, "/mcp"): {
        "summary": "MCP server, Streamable HTTP (agent bearer token; docs/integrations.md)",
        "responses": {"200": {"description": "a JSON-RPC response or an SSE stream"},
                      **_errors(401, 403)}} for method in ("GET", "POST", "DELETE")},
    ("GET", "/openapi.json"): {
        "summary": "This document", "security": _PUBLIC,
        "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")}},
}

_CONVERTER = re.compile(r"{(\w+):\w+}")


def http_operations(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    """Every (method, path) the routes serve over HTTP (HEAD implied by GET is left out)."""
    out: list[tuple[str, str]] = []
    for route in routes:
        if isinstance(route, Route) and route.methods:
            path = _CONVERTER.sub(r"{\1}", route.path)
            out += [(m, path) for m in sorted(route.methods - {"HEAD"})]
    return out


def undescribed(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    """The served (method, path) pairs :data:`OPERATIONS` does not describe."""
    return [op for op in http_operations(routes) if op not in OPERATIONS]


def document(routes: Iterable[BaseRoute]) -> Json:
    """The OpenAPI 3.1 document for the HTTP routes among ``routes``."""
    paths: dict[str, Json] = {}
    for method, path in http_operations(routes):
        op = OPERATIONS.get((method, path), {"summary": "(not described)", "responses": {}})
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "A2H hub", "version": "1",
                 "description": "Agents ask people; people answer. See docs/http-api.md."},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "a2h_session"},
            },
            "schemas": SCHEMAS,
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


async def openapi(request: Request) -> Response:
    """GET /openapi.json: the description of the routes this app serves."""
    doc = getattr(request.app.state, "openapi", None)
    if doc is None:
        doc = request.app.state.openapi = document(request.app.routes)
    return JSONResponse(doc)
