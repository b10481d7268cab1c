"""``/v1/chat/completions`` and ``/v1/models`` with the official ``openai`` package, over a
real ``a2h serve``. A person answers through the SDK (``client_sdk.Hub``).

The end-to-end set: the official clients' own behaviour (retries driven by 408 and
``x-should-retry``, streaming, ``.parse()``, tool calls) over real sockets. Shapes, errors,
bounds and SSE timing are tested in-process in tests/test_openai_inproc.py."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from client_sdk import Hub as SdkHub
from client_sdk import InvalidRequest, Item

T = TypeVar("T")


@dataclass
class Env:
    url: str
    agent: str
    human: str
    other_agent: str

    def client(self, **kw: Any) -> AsyncOpenAI:
        kw.setdefault("max_retries", 0)
        return AsyncOpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", self.agent),
                           timeout=30 * UNIT, **kw)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    db: Path = tmp_path_factory.mktemp("openai") / "hub.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    create_token(db, human="you")
    other = create_token(db, agent="spy", tenant="other")
    create_token(db, human="boss", tenant="other")
    with HubProcess(db, env={"A2H_SSE_KEEPALIVE": "0.05"}) as proc:
        yield Env(proc.url, agent, human, other)


def run(coro: Awaitable[T]) -> T:
    """Run on a fresh loop in a worker thread: Playwright's sync API (browser tests in the
    same session) leaves a running loop in the main thread, where asyncio.run refuses."""
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 30 * UNIT)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, bounded()).result()


def q(text: str = "Ship it?") -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


async def item_for(h: SdkHub, question: str) -> Item:
    async def find() -> Item | None:
        return next((i for i in await h.inbox() if question in i.question), None)
    return await until(find, 20, f"inbox shows {question!r}")


async def answer(env: Env, question: str, value: Any, status: str = "answered") -> Item:
    async with SdkHub(env.url, token=env.human) as h:
        item = await item_for(h, question)
        await h.respond(item.op_id, value, status=status)
        return item


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------- answers


def test_async_client_gets_the_answer(env: Env) -> None:
    question = q()
    messages = [{"role": "system", "content": "You are a release manager."},
                {"role": "user", "content": "We have a green build."},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": [{"type": "text", "text": question}]}]

    async def main() -> tuple[ChatCompletion, Item]:
        async with env.client() as client:
            call = asyncio.ensure_future(client.chat.completions.create(
                model="me", messages=messages, temperature=0.2, max_tokens=50))
            item = await answer(env, question, "yes, ship it")
            return await call, item

    done, item = run(main())
    assert isinstance(done, ChatCompletion)
    assert done.id == f"chatcmpl-{item.op_id}"
    assert done.object == "chat.completion" and done.model == "me"
    choice = done.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "yes, ship it"
    assert choice.finish_reason == "stop"
    assert done.usage is not None and done.usage.total_tokens == 0
    extra = (done.model_extra or {})["a2h"]
    assert extra["actor"] == "human:me" and extra["status"] == "answered"
    assert isinstance(extra["human_seconds"], float)
    # the question is the last user message; the earlier ones are context
    assert item.question == question
    assert [m["content"] for m in item.context["messages"]] == [
        "You are a release manager.", "We have a green build.", "Noted."]
    assert item.conversation.startswith("chat:bot:")


def test_sync_client_gets_the_answer(env: Env) -> None:
    question = q("Sync?")

    def blocking() -> ChatCompletion:
        with OpenAI(base_url=env.url + "/v1", api_key=env.agent, max_retries=0,
                    timeout=30 * UNIT) as client:
            return client.chat.completions.create(
                model="human/me", messages=user(question),
                metadata={"conversation": "release-42"})

    async def main() -> tuple[ChatCompletion, Item]:
        call = asyncio.ensure_future(asyncio.to_thread(blocking))
        item = await answer(env, question, "sure")
        return await call, item

    done, item = run(main())
    assert done.choices[0].message.content == "sure"
    assert done.id == f"chatcmpl-{item.op_id}"
    assert item.conversation == "release-42"


def test_408_and_the_clients_own_retry_reattach(env: Env) -> None:
    question = q("Slow?")
    statuses: list[int] = []

    async def hook(response: Any) -> None:
        statuses.append(response.status_code)

    async def main() -> tuple[ChatCompletion, Item, int]:
        http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [hook]})
        async with env.client(max_retries=50, http_client=http) as client:
            call = asyncio.ensure_future(client.chat.completions.create(
                model="me", messages=user(question), extra_body={"wait": 0.2}))
            async with SdkHub(env.url, token=env.human) as h:
                item = await item_for(h, question)

                async def retried() -> bool:
                    return statuses.count(408) >= 2
                await until(retried, 20, "two 408s, each retried")
                # three calls so far, one request: one inbox item, not three
                same = [i for i in await h.inbox() if question in i.question]
                assert [i.op_id for i in same] == [item.op_id]
                await h.respond(item.op_id, "finally")
            return await call, item, len(same)

    done, item, _ = run(main())
    assert done.choices[0].message.content == "finally"
    assert done.id == f"chatcmpl-{item.op_id}"
    assert statuses[-1] == 200 and statuses.count(408) >= 2


def test_streaming(env: Env) -> None:
    question = q("Stream?")

    async def main() -> tuple[list[Any], Item]:
        async with env.client() as client:
            stream = await client.chat.completions.create(
                model="me", messages=user(question), stream=True,
                stream_options={"include_usage": True})

            async def consume() -> list[Any]:
                return [chunk async for chunk in stream]
            chunks = asyncio.ensure_future(consume())
            item = await answer(env, question, "streamed answer")
            return await chunks, item

    chunks, item = run(main())
    assert all(c.id == f"chatcmpl-{item.op_id}" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed answer"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 0


def test_stream_sends_role_at_once_then_keep_alives(env: Env) -> None:
    question = q("Keep alive?")

    async def main() -> list[str]:
        lines: list[str] = []
        answered: asyncio.Future[Item] | None = None
        async with httpx.AsyncClient(timeout=30 * UNIT) as http, http.stream(
                "POST", env.url + "/v1/chat/completions",
                json={"model": "me", "messages": user(question), "stream": True},
                headers={"Authorization": f"Bearer {env.agent}"}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                lines.append(line)
                if line == ": keep-alive" and answered is None:
                    answered = asyncio.ensure_future(answer(env, question, "alive"))
        if answered is not None:
            await answered
        return lines

    lines = run(main())
    data = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert lines[0].startswith("data: ") and data[0]["choices"][0]["delta"]["role"] == \
        "assistant"
    assert ": keep-alive" in lines
    assert lines.index(": keep-alive") < next(
        i for i, x in enumerate(lines) if "alive\"" in x and "content" in x)
    assert "data: [DONE]" in lines[-2:]


# ---------------------------------------------------------------------------- forms


class Weather(BaseModel):
    city: str
    celsius: int
    sunny: bool


def test_json_schema_form_answer(env: Env) -> None:
    question = q("Weather?")

    async def main() -> tuple[Any, Item]:
        async with env.client() as client:
            call = asyncio.ensure_future(client.chat.completions.parse(
                model="me", messages=user(question), response_format=Weather))
            async with SdkHub(env.url, token=env.human) as h:
                item = await item_for(h, question)
                with pytest.raises(InvalidRequest):  # the hub validates before accepting
                    await h.respond(item.op_id, {"city": "Oslo", "celsius": "cold",
                                                 "sunny": False})
                with pytest.raises(InvalidRequest):
                    await h.respond(item.op_id, {"city": "Oslo"})
                await h.respond(item.op_id, {"city": "Oslo", "celsius": -3, "sunny": False})
            return await call, item

    done, item = run(main())
    schema = item.request["schema"]
    assert set(schema["properties"]) == {"city", "celsius", "sunny"}
    assert schema["properties"]["celsius"]["type"] == "integer"
    assert sorted(schema["required"]) == ["celsius", "city", "sunny"]
    message = done.choices[0].message
    assert json.loads(message.content) == {"city": "Oslo", "celsius": -3, "sunny": False}
    assert message.parsed == Weather(city="Oslo", celsius=-3, sunny=False)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "escalate", "parameters": {
        "type": "object", "properties": {}}}},
]


def test_tool_call_answer(env: Env) -> None:
    question = q("Tools?")

    async def main() -> tuple[ChatCompletion, Item]:
        async with env.client() as client:
            call = asyncio.ensure_future(client.chat.completions.create(
                model="me", messages=user(question), tools=TOOLS))
            async with SdkHub(env.url, token=env.human) as h:
                item = await item_for(h, question)
                with pytest.raises(InvalidRequest):
                    await h.respond(item.op_id, {"tool_call": {"name": "rm", "arguments": {}}})
                with pytest.raises(InvalidRequest):
                    await h.respond(item.op_id, {"tool_call": {"name": "get_weather",
                                                               "arguments": {"unit": "c"}}})
                await h.respond(item.op_id, {"tool_call": {
                    "name": "get_weather", "arguments": {"city": "Lyon", "unit": "c"}}})
            return await call, item

    done, item = run(main())
    assert item.request["tools"] == TOOLS
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (tc,) = choice.message.tool_calls or []
    assert tc.type == "function" and tc.id.startswith("call_")
    assert tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"city": "Lyon", "unit": "c"}


def test_tool_results_come_back_to_the_person(env: Env) -> None:
    question = q("Weather after the tool?")
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"},
    ]

    async def main() -> tuple[list[Any], Item]:
        async with env.client() as client:
            stream = await client.chat.completions.create(
                model="me", messages=messages, tools=TOOLS, tool_choice="required",
                stream=True)

            async def consume() -> list[Any]:
                return [c async for c in stream]
            chunks = asyncio.ensure_future(consume())
            async with SdkHub(env.url, token=env.human) as h:
                item = await item_for(h, question)
                with pytest.raises(InvalidRequest, match="tool call"):
                    await h.respond(item.op_id, "text is not enough: a tool call is required")
                await h.respond(item.op_id, {"tool_call": {"name": "escalate",
                                                           "arguments": {}}})
            return await chunks, item

    chunks, item = run(main())
    assert "21 C, sunny" in item.question and "get_weather" in item.question
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["escalate"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


# ---------------------------------------------------------------------------- errors


def test_unknown_model_and_bad_tokens(env: Env) -> None:
    async def main() -> None:
        async with env.client() as client:
            with pytest.raises(openai.NotFoundError) as nf:
                await client.chat.completions.create(model="nobody", messages=user("hi"))
            assert nf.value.code == "model_not_found"
            # another tenant's human is no model of mine
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="boss", messages=user("hi"))
        async with env.client(api_key="a2h_wrong") as client:
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="me", messages=user("hi"))
        async with env.client(api_key=env.human) as client:
            with pytest.raises(openai.PermissionDeniedError):
                await client.chat.completions.create(model="me", messages=user("hi"))

    run(main())


def test_declined_cancelled_and_expired_are_errors_never_empty(env: Env) -> None:
    calls: list[int] = []

    async def hook(response: Any) -> None:
        calls.append(response.status_code)

    async def main() -> None:
        http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [hook]})
        async with env.client(max_retries=5, http_client=http) as client:
            question = q("Decline?")
            call = asyncio.ensure_future(client.chat.completions.create(
                model="me", messages=user(question)))
            await answer(env, question, "ask someone else", status="declined")
            with pytest.raises(openai.UnprocessableEntityError) as declined:
                await call
            assert declined.value.code == "request_declined"
            assert "ask someone else" in declined.value.message

            question = q("Cancel?")
            call = asyncio.ensure_future(client.chat.completions.create(
                model="me", messages=user(question)))
            async with SdkHub(env.url, token=env.human) as h:
                item = await item_for(h, question)
            async with httpx.AsyncClient() as raw:
                r = await raw.post(f"{env.url}/api/requests/{item.op_id}/cancel",
                                   headers={"Authorization": f"Bearer {env.agent}"})
                assert r.status_code == 200
            with pytest.raises(openai.ConflictError) as cancelled:
                await call
            assert cancelled.value.code == "request_cancelled"

            calls.clear()
            t0 = time.monotonic()
            with pytest.raises(openai.APIStatusError) as expired:
                await client.chat.completions.create(
                    model="me", messages=user(q("Expire?")),
                    extra_body={"expires_in": 0.2, "wait": 20})
            assert expired.value.status_code == 408
            assert expired.value.code == "request_expired"
            assert expired.value.response.headers["x-should-retry"] == "false"
            assert calls == [408]  # not retried
            assert time.monotonic() - t0 < 10 * UNIT

    run(main())
