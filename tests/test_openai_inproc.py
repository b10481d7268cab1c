"""``/v1/chat/completions`` and ``/v1/models`` in-process: the request and response shapes,
errors and streaming, against the app with httpx's ASGITransport (the official ``openai``
client included) and the fake clock. tests/test_openai_compat.py keeps the official clients
against a real ``a2h serve``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from e2e_util import until
from openai import AsyncOpenAI
from test_http_inproc import BASE, Edge, Live, data, edge, inbox, nested

from hub.clock import FakeClock
from hub.core import Request
from hub.errors import Unauthorized
from hub.protocol import Kind, OpId, Status
from hub.server.openai_compat import REATTACH_WINDOW, choose_op_id, parse_chat
from hub.store import Principal, Role


def q(text: str = "Ship it?") -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def sdk(e: Edge, token: str | None = None, **kw: Any) -> AsyncOpenAI:
    """The official client, talking to the app in-process (it is built on httpx2)."""
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=e.app), base_url=BASE)
    return AsyncOpenAI(base_url=BASE + "/v1", api_key=token or e.agent, max_retries=0,
                       http_client=http, **kw)


async def chat(e: Edge, token: str | None = None, headers: dict[str, str] | None = None,
               **body: Any) -> httpx.Response:
    body.setdefault("model", "me")
    return await e.call("POST", "/v1/chat/completions", token or e.agent, json=body,
                        headers=headers or {})


async def item_for(e: Edge, question: str) -> dict[str, Any]:
    async def find() -> dict[str, Any] | None:
        return next((i for i in await inbox(e) if question in i["question"]), None)
    found: dict[str, Any] = await until(find, 10, f"inbox shows {question!r}")
    return found


async def respond(e: Edge, op_id: str, value: Any, status: str = "answered") -> None:
    r = await e.call("POST", f"/api/requests/{op_id}/respond", e.human,
                     json={"value": value, "status": status})
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------- answers


async def test_completion_shape(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question = q()
        messages = [{"role": "system", "content": "You are a release manager."},
                    {"role": "user", "content": "We have a green build."},
                    {"role": "assistant", "content": "Noted."},
                    {"role": "user", "content": [{"type": "text", "text": question}]}]
        call = asyncio.ensure_future(chat(e, messages=messages, temperature=0.2))
        item = await item_for(e, question)
        assert item["question"] == question
        assert [m["content"] for m in item["context"]["messages"]] == [
            "You are a release manager.", "We have a green build.", "Noted."]
        assert item["conversation"].startswith("chat:bot:")
        await respond(e, item["op_id"], "yes, ship it")
        r = await asyncio.wait_for(call, 10)
        assert r.status_code == 200 and r.headers["x-a2h-op-id"] == item["op_id"]
        done = r.json()
        assert done["id"] == f"chatcmpl-{item['op_id']}"
        assert (done["object"], done["model"]) == ("chat.completion", "me")
        (choice,) = done["choices"]
        assert choice["message"] == {"role": "assistant", "content": "yes, ship it",
                                     "refusal": None}
        assert choice["finish_reason"] == "stop"
        assert done["usage"]["total_tokens"] == 0
        assert done["a2h"]["actor"] == "human:me" and done["a2h"]["status"] == "answered"
        assert done["a2h"]["attached"] is False


async def test_official_client_in_process(tmp_path: Path) -> None:
    async with edge(tmp_path) as e, sdk(e) as client:
        question = q("Official?")
        call = asyncio.ensure_future(client.chat.completions.create(
            model="human/me", messages=user(question),  # type: ignore[arg-type]
            metadata={"conversation": "release-42"}))
        item = await item_for(e, question)
        assert item["conversation"] == "release-42"
        await respond(e, item["op_id"], "sure")
        done = await asyncio.wait_for(call, 10)
        assert done.choices[0].message.content == "sure"
        assert [m.id async for m in client.models.list()] == ["me", "you"]
        assert (await client.models.retrieve("human/you")).id == "you"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("them")  # another tenant's human


async def test_tool_call_answer_shape(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    async with edge(tmp_path) as e:
        question = q("Tools?")
        call = asyncio.ensure_future(chat(e, messages=user(question), tools=tools))
        item = await item_for(e, question)
        await respond(e, item["op_id"], {"tool_call": {"name": "get_weather",
                                                       "arguments": {"city": "Lyon"}}})
        choice = (await asyncio.wait_for(call, 10)).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] is None
        (tc,) = choice["message"]["tool_calls"]
        assert tc["type"] == "function" and tc["id"].startswith("call_")
        assert tc["function"] == {"name": "get_weather", "arguments": '{"city":"Lyon"}'}


# ---------------------------------------------------------------------------- outcomes


async def test_408_body_and_headers(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await chat(e, messages=user(q("Raw?")), headers={"x-a2h-wait": "0"})
        assert r.status_code == 408
        assert r.headers["x-should-retry"] == "true"
        assert r.headers["retry-after-ms"] == "100"
        err = r.json()["error"]
        assert err["code"] == "request_pending" and err["type"] == "timeout_error"
        assert set(err) == {"message", "type", "param", "code"}
        assert r.json()["a2h"]["op_id"] == r.headers["x-a2h-op-id"]
        assert r.json()["a2h"]["status"] == "pending"


async def test_declined_cancelled_and_expired_are_errors_never_empty(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question = q("Decline?")
        call = asyncio.ensure_future(chat(e, messages=user(question)))
        item = await item_for(e, question)
        await respond(e, item["op_id"], "ask someone else", status="declined")
        r = await asyncio.wait_for(call, 10)
        assert r.status_code == 422 and r.headers["x-should-retry"] == "false"
        assert r.json()["error"]["code"] == "request_declined"
        assert "ask someone else" in r.json()["error"]["message"]

        question = q("Cancel?")
        call = asyncio.ensure_future(chat(e, messages=user(question)))
        item = await item_for(e, question)
        assert (await e.call("POST", f"/api/requests/{item['op_id']}/cancel",
                             e.agent)).status_code == 200
        r = await asyncio.wait_for(call, 10)
        assert r.status_code == 409 and r.json()["error"]["code"] == "request_cancelled"
        assert r.headers["x-should-retry"] == "false"

        question = q("Expire?")
        call = asyncio.ensure_future(chat(e, messages=user(question), expires_in=5, wait=20))
        await item_for(e, question)
        e.clock.advance(6)
        r = await asyncio.wait_for(call, 10)
        assert r.status_code == 408 and r.json()["error"]["code"] == "request_expired"
        assert r.headers["x-should-retry"] == "false" and "retry-after-ms" not in r.headers


async def test_idempotency_key_reattaches_and_guards_the_payload(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question, key = q("Keyed?"), str(uuid.uuid4())
        headers = {"idempotency-key": key}
        first = asyncio.ensure_future(chat(e, messages=user(question), headers=headers))
        second = asyncio.ensure_future(chat(e, messages=user(question), headers=headers))
        item = await item_for(e, question)
        await respond(e, item["op_id"], "once")
        a, b = await asyncio.wait_for(first, 10), await asyncio.wait_for(second, 10)
        assert a.json()["id"] == b.json()["id"] == f"chatcmpl-{item['op_id']}"
        assert [i for i in await inbox(e) if question in i["question"]] == []
        again = await chat(e, messages=user(question), headers=headers)
        assert again.json()["id"] == a.json()["id"] and again.json()["a2h"]["attached"]
        clash = await chat(e, messages=user("another question"), headers=headers)
        assert clash.status_code == 409 and clash.json()["error"]["code"] == "conflict"
        assert clash.headers["x-should-retry"] == "false"


async def test_same_call_after_resolution_reattaches_within_the_window(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question = q("Twice?")
        call = asyncio.ensure_future(chat(e, messages=user(question)))
        item = await item_for(e, question)
        await respond(e, item["op_id"], "42")
        first = (await asyncio.wait_for(call, 10)).json()
        second = (await chat(e, messages=user(question))).json()
        assert first["id"] == second["id"]
        assert second["choices"][0]["message"]["content"] == "42"


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("extra, param", [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, "audio"),
    ({"modalities": ["audio"]}, "modalities"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}]},
     "messages[0].content[1]"),
    ({"messages": [{"role": "system", "content": "no user message"}]}, "messages"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "oneOf": []}}}},
     "response_format.json_schema.schema"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0]"),
    ({"extra_body": {"wait": -1}}, "wait"),
    ({"extra_body": {"wait": 601}}, "wait"),
    ({"extra_body": {"expires_in": "soon"}}, "expires_in"),
    ({"extra_body": {"expires_in": 1e308}}, "expires_in"),
    ({"model": "a b"}, "model"),
    ({"user": "x\ny"}, "user"),
    ({"metadata": {"conversation": ""}}, "metadata.conversation"),
])
async def test_unsupported_parameters_are_named(tmp_path: Path, extra: dict[str, Any],
                                                param: str) -> None:
    body: dict[str, Any] = {"model": "me", "messages": user(q("never asked")), **extra}
    async with edge(tmp_path) as e, sdk(e) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(**body)
        err = info.value
        assert err.status_code == 400 and err.param == param
        assert param.split("[")[0].split(".")[0] in err.message
        assert err.response.headers["x-should-retry"] == "false"
        assert await inbox(e) == []


async def test_unknown_model_and_bad_tokens(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await chat(e, model="nobody", messages=user("hi"))
        assert r.status_code == 404
        assert r.json()["error"] == {"message": r.json()["error"]["message"],
                                     "type": "invalid_request_error", "param": "model",
                                     "code": "model_not_found"}
        assert (await chat(e, model="them", messages=user("hi"))).status_code == 404
        r = await chat(e, "a2h_wrong", messages=user("hi"))
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert r.json()["error"]["type"] == "authentication_error"
        r = await chat(e, e.human, messages=user("hi"))
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        r = await e.call("GET", "/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert (await e.call("GET", "/v1/models/nobody", e.agent)).status_code == 404
        r = await e.call("GET", "/v1/models", e.other_agent)
        assert [m["id"] for m in r.json()["data"]] == ["them"]


async def test_bodies_are_decoded_once_with_bounded_nesting(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/v1/chat/completions", e.agent, content=b"{nope")
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
        r = await chat(e, messages=user("hi"), metadata={"deep": nested(100)})
        assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"]
        r = await e.call("POST", "/v1/chat/completions", e.agent, json=[1])
        assert r.status_code == 400 and r.json()["error"]["param"] == "body"


async def test_non_streaming_call_ends_with_401_when_the_token_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with edge(tmp_path) as e:
        async def revoked(*a: Any, **kw: Any) -> Any:
            raise Unauthorized("the token was revoked")
        monkeypatch.setattr(type(e.hub), "ask_and_wait", revoked)
        r = await chat(e, messages=user(q()))
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


# ---------------------------------------------------------------------------- streaming


async def stream(e: Edge, question: str, **body: Any) -> Live:
    live = Live(e.app, "POST", "/v1/chat/completions", e.agent,
                {"model": "me", "messages": user(question), "stream": True, **body})
    return await live.start()


async def test_stream_role_at_once_keep_alives_on_the_clock_then_the_answer(
        tmp_path: Path) -> None:
    async with edge(tmp_path, sse_keepalive=7.0) as e:
        question = q("Stream?")
        live = await stream(e, question, stream_options={"include_usage": True})
        try:
            assert live.status == 200
            assert live.headers["content-type"].startswith("text/event-stream")
            op_id = live.headers["x-a2h-op-id"]
            first = data(await live.event())
            assert first["object"] == "chat.completion.chunk"
            assert first["id"] == f"chatcmpl-{op_id}"
            assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
            for _ in range(2):  # one keep-alive per 7 s of the hub's clock, no sooner
                await until(lambda: 7.0 in e.clock.naps, 10, "the keep-alive tick parks")
                e.clock.advance(6.9)
                assert 7.0 in e.clock.naps  # not yet
                e.clock.advance(0.1)
                assert await live.event() == ": keep-alive"
            await respond(e, op_id, "streamed answer")
            content, finish, usage, done = await live.rest()
            assert data(content)["choices"][0]["delta"] == {"content": "streamed answer"}
            fin = data(finish)
            assert fin["choices"][0]["finish_reason"] == "stop"
            assert fin["a2h"]["actor"] == "human:me"
            assert data(usage)["choices"] == [] and data(usage)["usage"]["total_tokens"] == 0
            assert done == "data: [DONE]"
            assert 7.0 not in e.clock.naps  # the tick was cancelled with the stream
        finally:
            await live.aclose()


async def test_stream_ends_pending_when_the_wait_runs_out(tmp_path: Path) -> None:
    async with edge(tmp_path, sse_keepalive=15.0) as e:
        live = await stream(e, q("Slow?"), wait=20)
        try:
            data(await live.event())  # the role chunk
            await until(lambda: 15.0 in e.clock.naps, 10, "the first tick parks")
            e.clock.advance(15)
            assert await live.event() == ": keep-alive"
            await until(lambda: 5.0 in e.clock.naps, 10, "the last, shorter tick parks")
            e.clock.advance(5)
            (error,) = await live.rest()
            body = data(error)
            assert body["error"]["code"] == "request_pending"
            assert body["a2h"]["op_id"] == live.headers["x-a2h-op-id"]
        finally:
            await live.aclose()


async def test_stream_ends_with_an_error_event_when_the_token_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service raises Unauthorized from a wait when the caller's token is revoked or
    expires while it blocks: the stream sends an error event and closes (no [DONE])."""
    async with edge(tmp_path, sse_keepalive=7.0) as e:
        revoke = asyncio.Event()

        async def wait_for(*a: Any, **kw: Any) -> Any:
            await revoke.wait()
            raise Unauthorized("the token was revoked")
        monkeypatch.setattr(type(e.hub), "wait_for", wait_for)
        live = await stream(e, q("Revoked?"))
        try:
            data(await live.event())
            await until(lambda: 7.0 in e.clock.naps, 10, "the tick parks")
            e.clock.advance(7)
            assert await live.event() == ": keep-alive"
            revoke.set()
            (error,) = await live.rest()
            err = data(error)["error"]
            assert err["code"] == "invalid_api_key" and err["type"] == "authentication_error"
            assert 7.0 not in e.clock.naps
        finally:
            await live.aclose()


async def test_revoking_the_token_ends_an_open_stream(tmp_path: Path) -> None:
    async with edge(tmp_path, sse_keepalive=7.0) as e:
        live = await stream(e, q("Revoke me?"))
        try:
            data(await live.event())
            await until(lambda: 7.0 in e.clock.naps, 10, "the stream waits")
            r = await e.call("POST", "/api/admin/tokens/revoke", e.admin,
                             json={"token": e.agent})
            assert r.status_code == 204
            (error,) = await live.rest()
            assert data(error)["error"]["type"] == "authentication_error"
            assert 7.0 not in e.clock.naps
        finally:
            await live.aclose()


async def test_a_client_that_leaves_ends_the_stream_and_its_tasks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with edge(tmp_path, sse_keepalive=7.0) as e:
        ended: list[str] = []
        real_wait_for = e.hub.wait_for

        async def wait_for(self: Any, *a: Any, **kw: Any) -> Any:  # patched on the class
            try:
                return await real_wait_for(*a, **kw)
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise
        monkeypatch.setattr(type(e.hub), "wait_for", wait_for)
        live = await stream(e, q("Leaving?"))
        data(await live.event())
        await until(lambda: 7.0 in e.clock.naps, 10, "the tick parks")
        await live.aclose()
        assert ended == ["cancelled"] and 7.0 not in e.clock.naps


async def test_stream_refusals_are_plain_http_errors(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question, key = q("Keyed stream?"), str(uuid.uuid4())
        first = await chat(e, messages=user(question), headers={"idempotency-key": key,
                                                                "x-a2h-wait": "0"})
        assert first.status_code == 408
        r = await chat(e, messages=user("other"), stream=True, headers={"idempotency-key": key})
        assert r.status_code == 409 and r.headers["content-type"] == "application/json"
        assert r.json()["error"]["code"] == "conflict"


async def test_stream_of_a_declined_request_and_wait_zero(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        question = q("Decline stream?")
        live = await stream(e, question)
        try:
            data(await live.event())
            item = await item_for(e, question)
            await respond(e, item["op_id"], "no", status="declined")
            (error,) = await live.rest()
            assert data(error)["error"]["code"] == "request_declined"
        finally:
            await live.aclose()
        live = await stream(e, q("Now?"), wait=0)
        try:
            role, error = await live.rest()
            assert data(role)["choices"][0]["delta"]["role"] == "assistant"
            assert data(error)["error"]["code"] == "request_pending"
        finally:
            await live.aclose()


# ---------------------------------------------------------------------------- pure parts


WHO = Principal("default", Role.AGENT, "bot", "ab" * 32)


def test_conversation_comes_from_metadata_then_user_then_token() -> None:
    base: dict[str, Any] = {"model": "me", "messages": user("hi")}
    assert parse_chat({**base, "metadata": {"conversation": "m"}, "user": "u"}, WHO,
                      None).conversation == "m"
    assert parse_chat({**base, "user": "u"}, WHO, None).conversation == "u"
    assert parse_chat(base, WHO, None).conversation == "chat:bot:abababab"
    assert parse_chat(base, WHO, "5").wait == 5.0
    assert parse_chat({**base, "wait": 7}, WHO, "5").wait == 7.0
    assert parse_chat(base, WHO, None).wait == 60.0


class _FakeStore:
    def __init__(self) -> None:
        self.rows: dict[str, Request] = {}

    async def get_request(self, tenant: str, op_id: str) -> Request | None:
        return self.rows.get(op_id)


class _FakeHub:
    def __init__(self) -> None:
        self.store = _FakeStore()
        self.clock = FakeClock(1000.0)


def _row(op_id: str, status: Status, resolved_at: float | None) -> Request:
    return Request(tenant="default", op_id=OpId(op_id), conversation="c", to="me",
                   sender="agent:bot", kind=Kind.QUESTION, question="q", choices=None,
                   context=None, default=None, schema=None, tools=None, payload_hash="h",
                   status=status, value=None, actor=None, created_at=0.0, deadline=1.0,
                   fixed_deadline=False, resolved_at=resolved_at)


async def test_derived_op_ids_move_to_a_new_generation_after_the_window() -> None:
    hub: Any = _FakeHub()
    call = parse_chat({"model": "me", "messages": user("same question")}, WHO, None)

    async def pick(key: str | None = None) -> str:
        return await choose_op_id(hub, WHO, call, key)

    first = await pick()
    assert len(first) == 32 and await pick() == first  # deterministic
    other_token = Principal("default", Role.AGENT, "bot", "cd" * 32)
    assert await choose_op_id(hub, other_token, call, None) != first  # token-scoped

    hub.store.rows[first] = _row(first, Status.PENDING, None)
    assert await pick() == first  # pending: re-attach
    hub.store.rows[first] = _row(first, Status.ANSWERED, hub.clock.now())
    hub.clock.advance(REATTACH_WINDOW - 1)
    assert await pick() == first  # recently resolved: the same resolution again
    hub.clock.advance(2)
    second = await pick()
    assert second != first  # resolved long ago: a new question
    hub.store.rows[second] = _row(second, Status.PENDING, None)
    assert await pick() == second

    keyed = await pick("my-key")
    hub.store.rows[keyed] = _row(keyed, Status.ANSWERED, 0.0)
    assert await pick("my-key") == keyed  # with a key: fixed for the retention
