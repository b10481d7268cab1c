"""Issue 13 in Chromium: an MCP tool call over ``/mcp`` answered by a person in the inbox,
and a typed answer (a pydantic model) filled in the generated form."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from browser_util import AsyncRunner, Human, SdkClient, playwright_expect
from e2e_util import UNIT, HubProcess, create_token
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from test_typed_answers import Channel, Release

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


def open_inbox(context: Any, url: str, token: str) -> Any:
    page = context.new_page()
    page.goto(f"{url}/#token={token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    return page


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30 * UNIT, read=300 * UNIT))
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as c:
        yield c


async def call_tool(url: str, token: str, name: str, args: dict[str, Any]) -> CallToolResult:
    async with mcp_client(url, token) as client:
        return await client.call_tool(name, args)


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_an_mcp_question_answered_in_the_inbox(hub: HubProcess, runner: AsyncRunner,
                                               human: Human, context: Any) -> None:
    token = create_token(hub.db, agent="mcp-browser")
    page = open_inbox(context, hub.url, human.token)
    call = runner.submit(call_tool(hub.url, token, "ask_human", {
        "question": "Which **region** for the MCP deploy?", "to": human.handle,
        "choices": ["eu-west", "us-east"]}))
    item = page.get_by_role("article", name=re.compile("MCP deploy"))
    expect(item).to_be_visible()
    item.get_by_role("button", name="us-east").click()
    result = call.result(30 * UNIT)
    assert text_of(result) == "us-east"
    assert result.structured_content is not None
    assert result.structured_content["actor"] == f"human:{human.handle}"
    expect(item).to_have_count(0)


def test_a_permission_rejected_in_the_inbox_with_a_comment(
        hub: HubProcess, runner: AsyncRunner, human: Human, context: Any) -> None:
    token = create_token(hub.db, agent="mcp-browser")
    page = open_inbox(context, hub.url, human.token)

    async def ask() -> CallToolResult:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}",
                                           "x-a2h-to": human.handle},
                                  timeout=httpx2.Timeout(30 * UNIT, read=300 * UNIT))
        async with http, Client(streamable_http_client(f"{hub.url}/mcp",
                                                       http_client=http)) as client:
            return await client.call_tool("request_permission", {
                "tool_name": "Bash", "input": {"command": "git push --force"}})

    call = runner.submit(ask())
    item = page.get_by_role("article", name=re.compile("Bash"))
    expect(item).to_be_visible()
    item.get_by_role("textbox", name=re.compile("Comment")).fill("no force pushes")
    item.get_by_role("button", name="Reject").click()
    decision = json.loads(text_of(call.result(30 * UNIT)))
    assert decision == {"behavior": "deny", "message": "no force pushes"}


def test_a_typed_answer_filled_in_the_form(hub: HubProcess, agent: SdkClient, human: Human,
                                           context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    asking = agent.ask(human.handle, "Fill in the typed release", schema=Release)
    item = page.get_by_role("article", name=re.compile("typed release"))
    expect(item).to_be_visible()
    expect(item.get_by_text("Shown on the release page")).to_be_visible()
    item.get_by_role("textbox", name="Title").fill("Autumn")
    item.get_by_role("spinbutton", name="Copies").fill("2")
    item.get_by_role("combobox", name="Channel").select_option(label="stable")
    item.get_by_role("checkbox", name="Public").check()
    item.get_by_role("button", name="Send").click()
    answer = asking.result(30 * UNIT)
    assert answer.status == "answered"
    assert answer.value == Release(title="Autumn", copies=2, channel=Channel.STABLE,
                                   public=True)
