"""LangGraph interrupts answered in Chromium (issue 13, framework adapters).

A real checkpointed graph (no LLM) is interrupted; client_sdk.integrations.langgraph puts the
review in the inbox; the person decides in the page (web/js/hitl.js); the graph resumes with
that decision and runs to completion.
"""

from __future__ import annotations

from typing import Any

import pytest
from browser_util import AsyncRunner, Human, SdkClient, playwright_expect
from e2e_util import UNIT, HubProcess, create_token
from test_integration_langgraph import build_graph, hitl_agent, thread

from client_sdk.integrations.langgraph import HubInterrupts

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


@pytest.fixture(scope="module")
def lg_agent(hub: HubProcess, runner: AsyncRunner) -> Any:
    client = SdkClient(runner, hub.url, create_token(hub.db, agent="langgraph"))
    yield client
    client.close()


def open_inbox(context: Any, url: str, token: str) -> Any:
    page = context.new_page()
    page.goto(f"{url}/#token={token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    return page


def test_agent_inbox_interrupt_edited_in_the_browser(hub: HubProcess, lg_agent: SdkClient,
                                                     human: Human, context: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    graph = build_graph(InMemorySaver())
    reviews = HubInterrupts(lg_agent.hub, to=human.handle, timeout=60 * UNIT)
    run = lg_agent.runner.submit(reviews.run(graph, {"command": "rm -rf build", "log": []},
                                             thread(f"browser-{human.handle}")))
    page = open_inbox(context, hub.url, human.token)
    item = page.locator("article.item")
    expect(item).to_have_count(1)
    expect(item.locator(".hitl-action")).to_contain_text("run_command")
    expect(item.locator(".hitl-action")).to_contain_text('"command": "rm -rf build"')
    expect(item.locator("strong")).to_have_text("shell command")  # the description's Markdown
    expect(item.locator("button[data-decision=ignore]")).to_have_count(0)  # not allowed
    expect(item.locator("button[data-decision=accept]")).to_be_visible()
    item.locator("summary", has_text="Edit the arguments").click()
    item.locator("textarea.json-editor").fill('{"command": "rm -rf build/tmp"}')
    item.locator("button[data-decision=edit]").click()
    result = run.result(60 * UNIT)
    assert result["log"] == ["ran rm -rf build/tmp"]
    expect(page.locator("article.item:not(.resolved)")).to_have_count(0)


def test_hitl_middleware_decided_in_the_browser(hub: HubProcess, lg_agent: SdkClient,
                                                human: Human, context: Any) -> None:
    """LangChain's HumanInTheLoopMiddleware (batched): approve one call, reject the other
    with a reason, in the page; the agent runs the one and tells the model about the other."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = hitl_agent("batched", InMemorySaver())
    reviews = HubInterrupts(lg_agent.hub, to=human.handle, timeout=60 * UNIT)
    run = lg_agent.runner.submit(reviews.run(
        graph, {"messages": [{"role": "user", "content": "Email Alice, delete the report."}]},
        thread(f"browser-hitl-{human.handle}")))
    page = open_inbox(context, hub.url, human.token)
    items = page.locator("article.item")
    expect(items).to_have_count(2)
    send = items.filter(has_text="send_email")
    delete = items.filter(has_text="delete_file")
    expect(delete.locator("button[data-decision=respond]")).to_have_count(0)
    expect(delete.locator("form.hitl-edit")).to_have_count(0)
    send.locator("button[data-decision=approve]").click()
    delete.locator("textarea.hitl-message").fill("Keep the report.")
    delete.locator("button[data-decision=reject]").click()
    result = run.result(60 * UNIT)
    tools = {m.name: m for m in result["messages"] if m.type == "tool"}
    assert "sent to alice@example.com: hi" in str(tools["send_email"].content)
    assert "Keep the report." in str(tools["delete_file"].content)
    assert result["messages"][-1].content == "All done."
