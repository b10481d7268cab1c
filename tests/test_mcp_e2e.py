"""The MCP tools with the official ``mcp`` client, over streamable HTTP (``/mcp`` on a real
``a2h serve``) and over stdio (a real ``a2h mcp`` subprocess); the person answers with
the SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from client_sdk import Hub, Item

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
#: The hub's progress interval in these tests (the default is 15 s).
PROGRESS = 0.3


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    db = tmp_path_factory.mktemp("mcp") / "mcp.db"
    create_token(db, human="me")  # the default tenant's only person
    create_token(db, human="ann", tenant="two")
    create_token(db, human="bob", tenant="two")
    with HubProcess(db, "--mcp-progress-interval", str(PROGRESS)) as hp:
        yield hp


@pytest.fixture(scope="module")
def agent_token(hub: HubProcess) -> str:
    return create_token(hub.db, agent="mcp-agent")


@pytest.fixture(scope="module")
def human_token(hub: HubProcess) -> str:
    return create_token(hub.db, human="me")


Connect = Callable[..., contextlib.AbstractAsyncContextManager[Client]]


@contextlib.asynccontextmanager
async def over_http(hub: HubProcess, token: str, **headers: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}", **headers},
                              timeout=httpx2.Timeout(30 * UNIT, read=300 * UNIT))
    async with http, Client(streamable_http_client(f"{hub.url}/mcp", http_client=http)) as c:
        yield c


@contextlib.asynccontextmanager
async def over_stdio(hub: HubProcess, token: str, **env: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "hub.cli", "mcp"], cwd=str(ROOT),
        env={"A2H_URL": hub.url, "A2H_TOKEN": token,
             "A2H_MCP_PROGRESS_INTERVAL": str(PROGRESS),
             "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env})
    async with Client(params) as c:
        yield c


@pytest.fixture(params=["http", "stdio"])
def connect(request: pytest.FixtureRequest, hub: HubProcess) -> Connect:
    if request.param == "http":
        return lambda token, **kw: over_http(hub, token, **kw)
    return lambda token, **kw: over_stdio(hub, token, **kw)


async def one_item(human: Hub, question_part: str) -> Item:
    async def find() -> Item | None:
        items = [i for i in await human.inbox() if question_part in i.question]
        return items[0] if len(items) == 1 else None

    item: Item = await until(find, 20, what=f"an inbox item with {question_part!r}")
    return item


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_ask_human_blocks_until_the_person_answers(
        connect: Connect, hub: HubProcess, agent_token: str, human_token: str) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"ask_human", "request_approval", "request_permission"} <= set(tools)
        assert "blocks until" in (tools["ask_human"].description or "")
        call = asyncio.create_task(client.call_tool(
            "ask_human", {"question": "Which color? (e2e)", "choices": ["red", "blue"],
                          "context": {"why": "a test"}},
            progress_callback=on_progress))
        item = await one_item(human, "Which color? (e2e)")
        assert item.choices == ["red", "blue"] and item.context == {"why": "a test"}
        assert item.conversation.startswith("mcp:")
        # While blocked, progress notifications keep arriving (every PROGRESS seconds).
        await until(lambda: len(progress) >= 2, 10, what="two progress notifications")
        assert not call.done()
        assert progress[0][1] is not None and "me" in progress[0][1]
        await human.respond(item.op_id, "blue")
        result = await asyncio.wait_for(call, 20 * UNIT)
    assert not result.is_error
    assert text_of(result) == "blue"
    assert result.structured_content == {"status": "answered", "value": "blue",
                                         "actor": "human:me", "op_id": item.op_id}


async def test_a_retried_call_reattaches_to_the_same_request(
        connect: Connect, hub: HubProcess, agent_token: str, human_token: str) -> None:
    args = {"question": "Retry me? (e2e)", "conversation": "retries"}
    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        first = asyncio.create_task(client.call_tool("ask_human", args))
        item = await one_item(human, "Retry me? (e2e)")
        # The client retries (same tool, same arguments) while the first call still waits.
        second = asyncio.create_task(client.call_tool("ask_human", args))
        await until(lambda: _pending_waits(human, item.op_id), 10, what="the retry attached")
        assert [i.op_id for i in await human.inbox() if "Retry me?" in i.question] == \
            [item.op_id]
        await human.respond(item.op_id, "yes")
        a, b = await asyncio.wait_for(asyncio.gather(first, second), 20 * UNIT)
    assert a.structured_content == b.structured_content
    assert a.structured_content is not None and a.structured_content["op_id"] == item.op_id
    # A retry after the answer (its response was lost), from a new MCP session: the same
    # answer, no new inbox item.
    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        again = await asyncio.wait_for(client.call_tool("ask_human", args), 20 * UNIT)
        assert again.structured_content == a.structured_content
        assert not [i for i in await human.inbox() if "Retry me?" in i.question]


async def _pending_waits(human: Hub, op_id: str) -> bool:
    # Both calls are blocked on the one request: it is still the only item, still pending.
    items = [i for i in await human.inbox() if i.op_id == op_id]
    return len(items) == 1


async def test_a_cancelled_call_cancels_the_request(
        connect: Connect, hub: HubProcess, agent_token: str, human_token: str) -> None:
    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        call = asyncio.create_task(client.call_tool("ask_human",
                                                    {"question": "Cancel me? (e2e)"}))
        item = await one_item(human, "Cancel me? (e2e)")
        call.cancel()  # the client sends notifications/cancelled (or closes the stream)
        with contextlib.suppress(asyncio.CancelledError):
            await call

        async def gone() -> bool:
            return not [i for i in await human.inbox() if i.op_id == item.op_id]

        await until(gone, 20, what="the request left the inbox")
        history = {a.op_id: a for a in await human.history(20)}
        assert history[item.op_id].status == "cancelled"


async def test_request_approval_returns_the_decision_and_comment(
        connect: Connect, hub: HubProcess, agent_token: str, human_token: str) -> None:
    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        call = asyncio.create_task(client.call_tool(
            "request_approval", {"action": "Deploy build 7 (e2e)",
                                 "details": {"env": "prod"}}))
        item = await one_item(human, "Deploy build 7 (e2e)")
        assert item.kind == "approval" and '"env": "prod"' in item.question
        await human.approve(item.op_id, "go ahead")
        result = await asyncio.wait_for(call, 20 * UNIT)
    assert text_of(result) == "Approved by me: go ahead"
    assert result.structured_content is not None
    assert result.structured_content["value"] == {"approved": True, "comment": "go ahead"}


@pytest.mark.parametrize("allow", [True, False], ids=["allow", "deny"])
async def test_request_permission_in_the_claude_code_shape(
        connect: Connect, hub: HubProcess, agent_token: str, human_token: str,
        allow: bool) -> None:
    tool_input = {"command": f"rm -rf build-{allow}"}
    async with connect(agent_token) as client, Hub(hub.url, human_token) as human:
        call = asyncio.create_task(client.call_tool(
            "request_permission", {"tool_name": "Bash", "input": tool_input,
                                   "tool_use_id": f"toolu_{allow}"}))
        item = await one_item(human, f"build-{allow}")
        assert item.kind == "approval" and "Bash" in item.question
        if allow:
            await human.approve(item.op_id)
        else:
            await human.reject(item.op_id, "not the build folder")
        result = await asyncio.wait_for(call, 20 * UNIT)
    decision = json.loads(text_of(result))
    if allow:
        assert decision == {"behavior": "allow", "updatedInput": tool_input}
    else:
        assert decision == {"behavior": "deny", "message": "not the build folder"}


async def test_to_is_required_where_the_tenant_has_several_people(
        connect: Connect, hub: HubProcess) -> None:
    token = create_token(hub.db, agent="two-agent", tenant="two")
    async with connect(token) as client:
        result = await client.call_tool("ask_human", {"question": "Who? (e2e)"})
        assert result.is_error and "ann, bob" in text_of(result)
        result = await client.call_tool("ask_human", {"question": "Who?", "to": "carol"})
        assert result.is_error and "carol" in text_of(result) and "ann, bob" in text_of(result)


async def test_a_bad_token_is_refused_over_http(hub: HubProcess, human_token: str) -> None:
    for headers in ({}, {"authorization": "Bearer not-a-token"},
                    {"authorization": f"Bearer {human_token}"}):
        r = httpx.post(f"{hub.url}/mcp", headers={**headers, "accept":
                                                   "application/json, text/event-stream"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "ask_human",
                                        "arguments": {"question": "sneaky"}}},
                       timeout=30 * UNIT)
        assert r.status_code == (403 if "authorization" in headers and
                                 headers["authorization"].endswith(human_token) else 401)
        assert r.json()["error"]["code"] in ("unauthorized", "forbidden")
    with pytest.raises(Exception):  # noqa: B017 - the official client fails to connect
        async with over_http(hub, "not-a-token") as client:
            await client.list_tools()
    async with Hub(hub.url, human_token) as human:
        assert not [i for i in await human.inbox() if "sneaky" in i.question]


async def test_a_bad_token_is_refused_over_stdio(hub: HubProcess) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the server exits: the hub refused it
        async with over_stdio(hub, "not-a-token") as client:
            await client.list_tools()
