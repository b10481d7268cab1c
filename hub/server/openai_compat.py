"""An OpenAI-compatible ``/v1/chat/completions`` where the model is a person.

Theory of operation
-------------------
``model`` names a human (``me`` or ``human/me``); the last user message is the question,
the messages before it are context the inbox shows collapsed. The call is an ask that
blocks up to ``wait`` seconds (default 60; extra body field ``wait`` or header
``X-A2H-Wait``) and comes back as a standard ``chat.completion``.

A call still pending at the end of its wait answers **408** with ``x-should-retry: true``
and a tiny ``retry-after-ms``, so the official clients' own retries become the long-poll.
The retry must land on the same request, so the op_id is *derived*, never random::

    op_id = HMAC-SHA256(key = token hash, msg = Idempotency-Key header | canonical payload
                        [+ generation])[:128 bits]

Keyed by the token hash, op_ids are unguessable and scoped to the token (two agents
asking the same thing get two requests). With an ``Idempotency-Key`` the op_id is fixed
for as long as the hub keeps the request (``--retention``). Without one, the payload
(human, conversation, messages, tools, response format, expiry) is the key; it re-attaches
while that request is pending and for ``REATTACH_WINDOW`` seconds after it resolved, after
which the same call is a new question: the hub then moves to the next *generation* of the
derived op_id (gen 0, 1, 2 ... — the first one that is free, pending or recently resolved).

Every re-attach extends an open-ended deadline to now + wait + 10 s (the core does that),
so a client that keeps retrying keeps its question alive, and one that gives up lets it
expire shortly after.

Outcomes: answered → 200 completion (``finish_reason`` ``stop``, or ``tool_calls`` for a
tool-call answer); pending → 408 ``request_pending`` (retry); expired → 408
``request_expired`` with ``x-should-retry: false``; declined → 422 ``request_declined``;
cancelled → 409 ``request_cancelled``. Never an empty completion. Each is an
:class:`~hub.server.errors.OpenAIError`, so every error leaves through the one mapping in
``hub.server.errors``.

Streaming (``stream: true``) answers with the role chunk at once, then ``: keep-alive``
comments every ``--sse-keepalive`` seconds of the hub's clock while the person thinks, then
the answer, the finish chunk and ``[DONE]`` — or an ``error`` event and no ``[DONE]``: when
the wait runs out, the request ends without an answer, or the caller's token is revoked or
expires while the stream is open.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hub.core import Request as HubRequest
from hub.errors import HubError
from hub.protocol import (
    EXPIRES_LIMIT,
    MAX_WAIT_SECONDS,
    NAME_CHARS,
    NAME_MAX,
    WAIT_LIMIT,
    Ask,
    Conversation,
    Kind,
    OpId,
    Status,
    is_name,
)
from hub.records import record
from hub.schema import SchemaError, check_schema, check_tools, is_tool_call, tool_names
from hub.server.auth import authenticate, hub_of
from hub.server.bodies import read_json
from hub.server.errors import OpenAIError, openai_body, openai_endpoint
from hub.server.http_api import new_rid
from hub.service import HubService
from hub.store import Principal, Role

#: Seconds after a request resolved during which the same call (no Idempotency-Key)
#: re-attaches to it and gets its resolution again; later it asks anew.
REATTACH_WINDOW = 600.0
#: Largest chat-completions body. An inbox item must fit a human socket's outbox.
MAX_CHAT_BODY = 256 * 1024
#: How many generations of a derived op_id are tried before falling back to a fresh one.
MAX_GENERATIONS = 1000

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


class ParamError(OpenAIError):
    """A 400 naming the offending request parameter (OpenAI's ``param``)."""

    def __init__(self, message: str, param: str, oai_code: str = "invalid_value") -> None:
        super().__init__(message, status=400, oai_code=oai_code, param=param)


def unsupported(param: str, why: str) -> ParamError:
    return ParamError(f"'{param}' is not supported: {why}", param, "unsupported_parameter")


def model_not_found(model: str, hint: str = "") -> OpenAIError:
    return OpenAIError(f"the model {model!r} does not exist{hint}", status=404,
                       oai_code="model_not_found", param="model")


# ---------------------------------------------------------------------------- outcomes


def outcome_error(req: HubRequest) -> OpenAIError:
    """The error for a request that did not end in an answer (yet)."""
    who, extra = req.to, _extra(req)
    if req.status is Status.PENDING:
        return OpenAIError(f"{who} has not answered yet; retry the same call to keep "
                           f"waiting (it re-attaches to request {req.op_id})", status=408,
                           oai_code="request_pending", retry=True, a2h=extra)
    if req.status is Status.EXPIRED:
        return OpenAIError(f"the question to {who} expired unanswered", status=408,
                           oai_code="request_expired", a2h=extra)
    if req.status is Status.DECLINED:
        reason = _reason(req.value)
        return OpenAIError(f"{who} declined to answer" + (f": {reason}" if reason else ""),
                           status=422, oai_code="request_declined", a2h=extra)
    return OpenAIError("the request was cancelled", status=409, oai_code="request_cancelled",
                       a2h=extra)


def _reason(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("comment"), str):
        return str(value["comment"])
    return ""


def _extra(req: HubRequest, attached: bool | None = None) -> dict[str, Any]:
    out = {"op_id": req.op_id, "conversation": req.conversation, "status": req.status.value,
           "actor": req.actor, "human_seconds": req.human_seconds,
           "resolved_at": req.resolved_at, "deadline": req.deadline}
    if attached is not None:
        out["attached"] = attached
    return out


# ---------------------------------------------------------------------------- decoding


@record
class ChatCall:
    """A chat-completions body, decoded once."""

    model: str
    handle: str
    question: str
    context: dict[str, Any]
    conversation: str
    schema: Any
    tools: Any
    stream: bool
    include_usage: bool
    wait: float
    expires_in: float | None

    def payload(self) -> bytes:
        """What makes two calls "the same question" (wait is not part of it)."""
        return orjson.dumps([self.handle, self.conversation, self.question, self.context,
                             self.schema, self.tools, self.expires_in],
                            option=orjson.OPT_SORT_KEYS)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_chat(body: Any, who: Principal, wait_header: str | None) -> ChatCall:
    """Decode and check a chat-completions body. Raises ParamError naming the parameter."""
    if not isinstance(body, dict):
        raise ParamError("the body must be a JSON object", "body")
    _refuse_unsupported(body)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ParamError("'model' must name a human (their handle)", "model",
                         "missing_required_parameter")
    handle = model.strip().removeprefix("human/")
    if not is_name(handle):
        raise ParamError(f"'model' must name a human: a handle is 1..{NAME_MAX} of "
                         f"{NAME_CHARS}", "model")
    question, context = parse_messages(body.get("messages"))
    schema = parse_response_format(body.get("response_format"))
    tools, required = parse_tools(body.get("tools"), body.get("tool_choice"))
    if required:
        context["tool_choice"] = "required"
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise ParamError("'stream' must be a boolean", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise ParamError("'stream_options' must be an object", "stream_options")
    include_usage = bool(opts.get("include_usage"))
    wait_raw: Any = body.get("wait")
    if wait_raw is None and wait_header is not None:
        try:
            wait_raw = float(wait_header)
        except ValueError:
            raise ParamError("header X-A2H-Wait must be a number of seconds", "wait") from None
    wait = MAX_WAIT_SECONDS if wait_raw is None else wait_raw
    if not _number(wait) or not 0 <= wait <= WAIT_LIMIT:
        raise ParamError(f"'wait' must be 0..{WAIT_LIMIT:g} seconds", "wait")
    expires_in = body.get("expires_in")
    if expires_in is not None and (not _number(expires_in)
                                   or not 0 < expires_in <= EXPIRES_LIMIT):
        raise ParamError(f"'expires_in' must be a number of seconds > 0 and <= "
                         f"{EXPIRES_LIMIT:g} (30 days)", "expires_in")
    return ChatCall(
        model=model, handle=handle, question=question, context=context,
        conversation=conversation_of(body, who), schema=schema, tools=tools, stream=stream,
        include_usage=include_usage, wait=float(wait),
        expires_in=None if expires_in is None else float(expires_in),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise unsupported("n", "a person gives one answer (n must be 1)")
    if body.get("logprobs"):
        raise unsupported("logprobs", "a person's answer has no token probabilities")
    if body.get("top_logprobs") is not None:
        raise unsupported("top_logprobs", "a person's answer has no token probabilities")
    if body.get("audio") is not None:
        raise unsupported("audio", "answers are text")
    modalities = body.get("modalities")
    if modalities is not None and (not isinstance(modalities, list)
                                   or any(m != "text" for m in modalities)):
        raise unsupported("modalities", "answers are text")
    for legacy in ("functions", "function_call"):
        if body.get(legacy) is not None:
            raise unsupported(legacy, "use 'tools' and 'tool_choice'")
    if body.get("web_search_options") is not None:
        raise unsupported("web_search_options", "a person answers without web search here")


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ParamError(f"'{where}' must be a string or a list of parts", where)
    parts: list[str] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
        elif kind in ("image_url", "input_image"):
            raise unsupported(at, "images in messages are not supported; send text")
        elif kind == "input_audio":
            raise unsupported(at, "audio in messages is not supported; send text")
        elif kind == "file":
            raise unsupported(at, "files in messages are not supported; send text")
        else:
            raise ParamError(f"'{at}' must be a text part", at)
    return "\n".join(parts)


def parse_messages(raw: Any) -> tuple[str, dict[str, Any]]:
    """(question, context). The question is the last user message; the messages before it
    are ``context.messages``; tool calls and results after it are appended to the question
    (they are what the person must act on)."""
    if not isinstance(raw, list) or not raw:
        raise ParamError("'messages' must be a non-empty list", "messages",
                         "missing_required_parameter")
    msgs: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ParamError(f"'{where}' must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise ParamError(f"'{where}.role' must be one of {', '.join(sorted(ROLES))}",
                             f"{where}.role")
        if m.get("audio") is not None:
            raise unsupported(f"{where}.audio", "audio in messages is not supported")
        out: dict[str, Any] = {"role": role, "content": _text(m.get("content"),
                                                               f"{where}.content")}
        if isinstance(m.get("name"), str):
            out["name"] = m["name"]
        if role == "assistant" and isinstance(m.get("tool_calls"), list):
            out["tool_calls"] = [_tool_call_view(c) for c in m["tool_calls"]]
        if role == "tool" and isinstance(m.get("tool_call_id"), str):
            out["tool_call_id"] = m["tool_call_id"]
        msgs.append(out)
    last_user = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=None)
    if last_user is None:
        raise ParamError("'messages' needs a user message: the last one is the question",
                         "messages")
    question = msgs[last_user]["content"]
    after = [_render(m, msgs) for m in msgs[last_user + 1:]]
    if after:
        question = "\n\n".join([question, *after])
    if not question.strip():
        raise ParamError(f"'messages[{last_user}].content' is empty: it is the question",
                         f"messages[{last_user}].content")
    return question, {"messages": msgs[:last_user]}


def _tool_call_view(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        return {}
    fn = call.get("function")
    if not isinstance(fn, dict):
        fn = {}
    return {"id": call.get("id"), "type": "function",
            "function": {"name": fn.get("name"), "arguments": fn.get("arguments")}}


def _render(m: dict[str, Any], msgs: list[dict[str, Any]]) -> str:
    """A message after the question, as Markdown for the person."""
    if m["role"] == "tool":
        name = _tool_name_of(m.get("tool_call_id"), msgs)
        return f"**Tool result**{f' (`{name}`)' if name else ''}:\n\n```\n{m['content']}\n```"
    if m["role"] == "assistant":
        lines = [f"**You answered:** {m['content']}"] if m["content"] else []
        for c in m.get("tool_calls", ()):
            fn = c.get("function") or {}
            lines.append(f"**You called** `{fn.get('name')}` with `{fn.get('arguments')}`")
        return "\n\n".join(lines)
    return f"**{m['role'].capitalize()}:** {m['content']}"


def _tool_name_of(call_id: Any, msgs: list[dict[str, Any]]) -> str | None:
    for m in msgs:
        for c in m.get("tool_calls", ()):
            if c.get("id") == call_id and call_id is not None:
                name = (c.get("function") or {}).get("name")
                return name if isinstance(name, str) else None
    return None


def parse_response_format(rf: Any) -> Any:
    """The JSON schema the answer must satisfy, or None for free text."""
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise ParamError("'response_format' must be an object", "response_format")
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise unsupported("response_format", "type must be text, json_object or json_schema")
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
        raise ParamError("'response_format.json_schema.schema' must be a JSON schema object",
                         "response_format.json_schema.schema")
    schema = js["schema"]
    try:
        check_schema(schema)
    except SchemaError as exc:
        raise ParamError(f"'response_format.json_schema.schema' {exc}",
                         "response_format.json_schema.schema") from None
    if "title" not in schema and isinstance(js.get("name"), str):
        schema = {"title": js["name"], **schema}
    return schema


def parse_tools(tools: Any, choice: Any) -> tuple[Any, bool]:
    """(tools shown to the person or None, whether a tool call is required)."""
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise ParamError("'tool_choice' needs 'tools'", "tool_choice")
        return None, False
    try:
        check_tools(tools)
    except SchemaError as exc:
        raise ParamError(str(exc), exc.path if exc.path.startswith("tools") else "tools") \
            from None
    if choice is None or choice == "auto":
        return tools, False
    if choice == "none":
        return None, False
    if choice == "required":
        return tools, True
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        picked = [t for t in tools if t["function"]["name"] == name]
        if not picked:
            raise ParamError(f"'tool_choice' names {name!r}, not one of "
                             f"{', '.join(tool_names(tools))}", "tool_choice")
        return picked, True
    raise unsupported("tool_choice", "use none, auto, required or a function")


def conversation_of(body: dict[str, Any], who: Principal) -> str:
    """``metadata.conversation``, else ``user``, else one conversation per token."""
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ParamError("'metadata' must be an object", "metadata")
    for value, param in (((meta or {}).get("conversation"), "metadata.conversation"),
                         (body.get("user"), "user")):
        if value is None:
            continue
        if not is_name(value):
            raise ParamError(f"'{param}' must be 1..{NAME_MAX} of {NAME_CHARS}", param)
        return str(value)
    return f"chat:{who.name}:{who.token_hash[:8]}"


# ---------------------------------------------------------------------------- op_ids


def derive_op_id(who: Principal, key: bytes, generation: int = 0) -> str:
    """128 bits of HMAC-SHA256 keyed by the token hash: unguessable, token-scoped."""
    msg = key + b"\x00" + str(generation).encode()
    return hmac.new(who.token_hash.encode(), msg, hashlib.sha256).hexdigest()[:32]


async def choose_op_id(hub: HubService, who: Principal, call: ChatCall,
                       idempotency_key: str | None) -> str:
    if idempotency_key is not None:
        if not 1 <= len(idempotency_key) <= 200:
            raise ParamError("the Idempotency-Key header is 1..200 characters",
                             "Idempotency-Key")
        return derive_op_id(who, b"key\x00" + idempotency_key.encode())
    key = b"payload\x00" + call.payload()
    now = hub.clock.now()
    for gen in range(MAX_GENERATIONS):
        op_id = derive_op_id(who, key, gen)
        existing = await hub.store.get_request(who.tenant, op_id)
        if existing is None or not existing.terminal or existing.resolved_at is None \
                or now - existing.resolved_at <= REATTACH_WINDOW:
            return op_id
    return derive_op_id(who, key + os.urandom(16))


def ask_of(call: ChatCall, op_id: str) -> Ask:
    return Ask(id=0, op_id=OpId(op_id), to=call.handle, question=call.question,
               conversation=Conversation(call.conversation), kind=Kind.QUESTION,
               context=call.context, wait=call.wait, expires_in=call.expires_in)


# ---------------------------------------------------------------------------- completions


def assistant_message(req: HubRequest) -> tuple[dict[str, Any], str]:
    """(message, finish_reason) for an answered request."""
    value = req.value
    if is_tool_call(value):
        call = value["tool_call"]
        return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [{
            "id": f"call_{req.op_id[:24]}", "type": "function",
            "function": {"name": call["name"],
                         "arguments": orjson.dumps(call.get("arguments") or {}).decode()},
        }]}, "tool_calls"
    content = value if isinstance(value, str) else orjson.dumps(value).decode()
    return {"role": "assistant", "content": content, "refusal": None}, "stop"


def completion(req: HubRequest, call: ChatCall, attached: bool) -> dict[str, Any]:
    message, finish = assistant_message(req)
    return {
        "id": f"chatcmpl-{req.op_id}", "object": "chat.completion",
        "created": int(req.created_at), "model": call.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish,
                     "logprobs": None}],
        "usage": dict(USAGE), "system_fingerprint": None,
        "a2h": _extra(req, attached),
    }


@openai_endpoint
async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions."""
    who = await authenticate(request, Role.AGENT, cookies=False)
    hub = hub_of(request)
    body = await read_json(request, MAX_CHAT_BODY)
    call = parse_chat(body, who, request.headers.get("x-a2h-wait"))
    if not await hub.known_human(who.tenant, call.handle):
        raise model_not_found(call.model, f": no human {call.handle!r} in this tenant "
                              "(GET /v1/models lists them)")
    op_id = await choose_op_id(hub, who, call, request.headers.get("idempotency-key"))
    ask = ask_of(call, op_id)
    rid = new_rid(request)
    if call.stream:
        # Commit (or re-attach) first, so that refusals are plain HTTP errors; then stream.
        req, attached = await hub.submit(who, ask, rid, schema=call.schema, tools=call.tools)
        return StreamingResponse(
            _stream(hub, who, call, req, attached, rid),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no",
                     "x-a2h-op-id": op_id})
    req, attached = await hub.ask_and_wait(who, ask, rid, schema=call.schema,
                                           tools=call.tools)
    if req.status is not Status.ANSWERED:
        raise outcome_error(req)
    return JSONResponse(completion(req, call, attached), headers={"x-a2h-op-id": op_id})


def keepalive_seconds(hub: HubService) -> float:
    """Seconds between SSE keep-alive comments (``--sse-keepalive``, ``A2H_SSE_KEEPALIVE``)."""
    return hub.settings.sse_keepalive


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def _stream(hub: HubService, who: Principal, call: ChatCall, req: HubRequest,
                  attached: bool, rid: str) -> AsyncIterator[bytes]:
    """Role chunk at once, ``: keep-alive`` comments while the person thinks, then the
    answer, the finish chunk and ``[DONE]`` — or an ``error`` event (no ``[DONE]``).

    One re-attach blocks for the whole wait (each returns at once on resolution); beside
    it, the hub's clock ticks the keep-alives and ends the wait, so both are driven by a
    fake clock in tests.
    """
    clock = hub.clock
    end = clock.now() + call.wait
    interval = keepalive_seconds(hub)
    base = {"id": f"chatcmpl-{req.op_id}", "object": "chat.completion.chunk",
            "created": int(req.created_at), "model": call.model, "system_fingerprint": None}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                          "logprobs": None}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    waiter: asyncio.Task[HubRequest] | None = None
    tick: asyncio.Task[None] | None = None
    try:
        if not req.terminal and call.wait > 0:
            waiter = asyncio.ensure_future(hub.wait_for(who, req.op_id, call.wait, rid))
        while waiter is not None:
            left = end - clock.now()
            if left <= 0:
                break  # the wait ran out on the hub's clock: the request is still pending
            tick = asyncio.ensure_future(clock.sleep(min(interval, left) if interval > 0
                                                     else left))
            await asyncio.wait((waiter, tick), return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                req = waiter.result()  # raises what the service raised (Unauthorized, ...)
                break
            if end - clock.now() > 0:
                yield b": keep-alive\n\n"
    except HubError as exc:
        yield _sse(openai_body(exc))
        return
    finally:
        # Owned here: cancelled and awaited, whichever way the stream ends (a client that
        # goes away cancels us; that cancellation keeps propagating).
        tasks = [t for t in (waiter, tick) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if req.status is not Status.ANSWERED:
        yield _sse(openai_body(outcome_error(req)))
        return
    message, finish = assistant_message(req)
    if finish == "tool_calls":
        calls = [{"index": 0, **c} for c in message["tool_calls"]]
        yield chunk({"tool_calls": calls})
    else:
        yield chunk({"content": message["content"]})
    yield chunk({}, finish, a2h=_extra(req, attached))
    if call.include_usage:
        yield _sse({**base, "choices": [], "usage": dict(USAGE)})
    yield b"data: [DONE]\n\n"


# ---------------------------------------------------------------------------- models


def model_entry(handle: str, tenant: str) -> dict[str, Any]:
    return {"id": handle, "object": "model", "created": 0, "owned_by": f"a2h:{tenant}"}


@openai_endpoint
async def list_models(request: Request) -> Response:
    """GET /v1/models: the tenant's humans."""
    who = await authenticate(request, cookies=False)
    humans = await hub_of(request).store.list_humans(who.tenant)
    return JSONResponse({"object": "list",
                         "data": [model_entry(h, who.tenant) for h in humans]})


@openai_endpoint
async def get_model(request: Request) -> Response:
    """GET /v1/models/{model}."""
    who = await authenticate(request, cookies=False)
    model = request.path_params["model"]
    handle = model.removeprefix("human/")
    if not await hub_of(request).known_human(who.tenant, handle):
        raise model_not_found(model)
    return JSONResponse(model_entry(handle, who.tenant))


def routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]

