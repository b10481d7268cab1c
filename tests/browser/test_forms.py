"""Schema forms and tool calls in the inbox (issue 5's browser test, with issue 3's setup).

Requests with a ``schema`` or ``tools`` are created through the plain HTTP API
(``POST /api/requests``); the human fills the generated form in Chromium and the agent reads
the structured answer back through the SDK.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
from typing import Any

import httpx
import pytest
from browser_util import ARTIFACTS, Human, SdkClient, ms, playwright_expect
from e2e_util import UNIT, HubProcess, create_token

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


@pytest.fixture(scope="module")
def agent_token(hub: HubProcess) -> str:
    return create_token(hub.db, agent="forms")


def create(hub: HubProcess, token: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{hub.url}/api/requests", json=body, timeout=30 * UNIT,
                   headers={"authorization": f"Bearer {token}"})
    if r.status_code == 404:
        pytest.skip("this hub has no POST /api/requests (plain HTTP API)")
    assert r.status_code == 201, r.text
    view: dict[str, Any] = r.json()["request"]
    return view


def open_inbox(context: Any, url: str, token: str) -> Any:
    page = context.new_page()
    page.goto(f"{url}/#token={token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    return page


SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "Shown on the release page"},
        "copies": {"type": "integer", "minimum": 1},
        "price": {"type": "number"},
        "public": {"type": "boolean"},
        "channel": {"enum": ["stable", "beta", "nightly"]},
        "notes": {"type": "string"},
    },
    "required": ["title", "copies", "price", "public", "channel"],
    "additionalProperties": False,
}


def test_schema_form_sends_a_json_object(hub: HubProcess, agent: SdkClient, agent_token: str,
                                         human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    view = create(hub, agent_token, {"to": human.handle, "question": "Fill in the release",
                                     "schema": SCHEMA, "expires_in": 120})
    item = page.get_by_role("article", name=re.compile("Fill in the release"))
    expect(item).to_be_visible()
    title = item.get_by_role("textbox", name="title")
    expect(title).to_have_attribute("required", "")
    expect(item.locator("label", has_text="title").locator(".req")).to_have_text("*")
    expect(item.locator("label", has_text="notes").locator(".req")).to_have_count(0)
    expect(item.get_by_text("Shown on the release page")).to_be_visible()

    # Native validation keeps an incomplete form from being sent.
    item.get_by_role("button", name="Send").click()
    expect(title).to_be_focused()
    assert agent.wait(view["op_id"], wait=0).status == "pending"

    title.fill("Spring release")
    item.get_by_role("spinbutton", name="copies").fill("3")
    item.get_by_role("spinbutton", name="price").fill("9.5")
    item.get_by_role("checkbox", name="public").check()
    item.get_by_role("combobox", name="channel").select_option(label="beta")
    item.get_by_role("button", name="Send").click()

    answer = agent.wait(view["op_id"], wait=10)
    assert answer.status == "answered"
    assert answer.value == {"title": "Spring release", "copies": 3, "price": 9.5,
                            "public": True, "channel": "beta"}
    expect(item).to_contain_text("Accepted")


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "book_room", "description": "Book a meeting room",
        "parameters": {"type": "object", "properties": {
            "room": {"type": "string", "enum": ["Ada", "Grace"]},
            "people": {"type": "integer"},
            "video": {"type": "boolean"}},
            "required": ["room", "people"]}}},
]


def test_tool_call_form(hub: HubProcess, agent: SdkClient, agent_token: str, human: Human,
                        context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    view = create(hub, agent_token, {"to": human.handle, "question": "What should I do next?",
                                     "tools": TOOLS, "expires_in": 120})
    item = page.get_by_role("article", name=re.compile("What should I do next"))
    expect(item).to_be_visible()
    tool = item.get_by_role("combobox", name="Tool")
    expect(tool.locator("option")).to_have_text(["get_weather", "book_room"])
    expect(item).to_contain_text("Current weather for a city")
    tool.select_option(label="book_room")
    expect(item).to_contain_text("Book a meeting room")
    item.get_by_role("combobox", name="room").select_option(label="Grace")
    item.get_by_role("spinbutton", name="people").fill("4")
    item.get_by_role("button", name="Call tool").click()

    answer = agent.wait(view["op_id"], wait=10)
    assert answer.status == "answered"
    call = answer.value["tool_call"]
    assert call["name"] == "book_room"
    args = call["arguments"]
    if isinstance(args, str):  # the hub may keep OpenAI's string encoding
        args = json.loads(args)
    assert args == {"room": "Grace", "people": 4, "video": False}


def test_tools_request_can_still_get_a_text_answer(
        hub: HubProcess, agent: SdkClient, agent_token: str, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    view = create(hub, agent_token, {"to": human.handle, "question": "Anything to add?",
                                     "tools": TOOLS, "expires_in": 120})
    item = page.get_by_role("article", name=re.compile("Anything to add"))
    item.get_by_role("textbox", name="Answer").fill("no tool needed")
    item.get_by_role("button", name="Send").click()
    assert agent.wait(view["op_id"], wait=10).value == "no tool needed"
    expect(item).to_contain_text("Accepted")


# ---------------------------------------------------------------------------- via the openai client


def _openai_client(hub: HubProcess, token: str) -> Any:
    openai = pytest.importorskip("openai")
    r = httpx.get(f"{hub.url}/v1/models", headers={"authorization": f"Bearer {token}"},
                  timeout=10 * UNIT)
    if r.status_code == 404:
        pytest.skip("this hub has no /v1 (OpenAI-compatible) endpoints")
    return openai.OpenAI(base_url=f"{hub.url}/v1", api_key=token, timeout=60 * UNIT,
                         max_retries=2)


def test_chat_completion_with_a_schema_and_earlier_messages(
        hub: HubProcess, agent_token: str, human: Human, context: Any) -> None:
    client = _openai_client(hub, agent_token)
    page = open_inbox(context, hub.url, human.token)
    schema = {"type": "object", "properties": {
        "verdict": {"type": "string", "enum": ["ship", "hold"]},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 10}},
        "required": ["verdict", "confidence"], "additionalProperties": False}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(
            client.chat.completions.create, model=human.handle,
            messages=[{"role": "system", "content": "You review releases."},
                      {"role": "user", "content": "Release 3.1 has *two* open bugs."},
                      {"role": "assistant", "content": "Noted."},
                      {"role": "user", "content": "Ship or hold release 3.1?"}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "review", "schema": schema,
                                             "strict": True}})
        item = page.get_by_role("article", name=re.compile("Ship or hold release 3.1"))
        expect(item).to_be_visible(timeout=ms(15))
        item.locator("details.context summary").click()
        messages = item.locator("li.message")
        expect(messages).to_have_count(3)
        expect(messages.nth(1)).to_contain_text("two open bugs")
        expect(messages.nth(1).locator("em")).to_have_text("two")
        item.get_by_role("combobox", name="verdict").select_option(label="hold")
        item.get_by_role("spinbutton", name="confidence").fill("8")
        item.get_by_role("button", name="Send").click()
        completion = fut.result(ms(30) / 1000)
    assert completion.choices[0].finish_reason == "stop"
    assert json.loads(completion.choices[0].message.content) == {"verdict": "hold",
                                                                "confidence": 8}


def test_chat_completion_answered_with_a_tool_call(
        hub: HubProcess, agent_token: str, human: Human, context: Any) -> None:
    client = _openai_client(hub, agent_token)
    page = open_inbox(context, hub.url, human.token)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(client.chat.completions.create, model=human.handle,
                          messages=[{"role": "user", "content": "Need a room for 3 people"}],
                          tools=TOOLS, tool_choice="required")
        item = page.get_by_role("article", name=re.compile("Need a room for 3 people"))
        expect(item).to_be_visible(timeout=ms(15))
        expect(item.get_by_role("group", name="Answer with a tool call")).to_be_visible()
        expect(item.get_by_role("textbox", name="Answer")).to_have_count(0)  # a call is required
        item.get_by_role("combobox", name="Tool").select_option(label="book_room")
        item.get_by_role("combobox", name="room").select_option(label="Ada")
        item.get_by_role("spinbutton", name="people").fill("3")
        item.get_by_role("checkbox", name="video").check()
        item.get_by_role("button", name="Call tool").click()
        completion = fut.result(ms(30) / 1000)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "book_room"
    assert json.loads(call.function.arguments) == {"room": "Ada", "people": 3, "video": True}


def test_screenshot_of_the_forms(hub: HubProcess, agent_token: str, human: Human,
                                 context: Any) -> None:
    create(hub, agent_token, {"to": human.handle, "question": "Fill in the release",
                              "schema": SCHEMA, "expires_in": 300})
    create(hub, agent_token, {"to": human.handle, "question": "What should I do next?",
                              "tools": TOOLS, "expires_in": 600})
    page = open_inbox(context, hub.url, human.token)
    expect(page.get_by_role("article")).to_have_count(2)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inbox-forms.png"), full_page=True)
