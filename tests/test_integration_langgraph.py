"""client_sdk.integrations.langgraph: real LangGraph graphs (checkpointed, no LLM) whose
interrupts a person answers through the hub (issue 13, framework adapters).

The person answers here with the SDK; tests/browser/test_hitl_browser.py answers in Chromium.
The restart test runs the agent as real subprocesses on one SQLite checkpoint file.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from e2e_util import UNIT, until
from inproc import serve

from client_sdk import Hub, InvalidRequest
from client_sdk.integrations.langgraph import (
    AGENT_INBOX,
    LANGCHAIN_HITL,
    HubInterrupts,
    HumanDecisionError,
    interrupt_op_id,
    plan_interrupt,
)
from hub.schema import SchemaError, check_schema, validate

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------- the graph


class State(TypedDict):
    command: str
    log: Annotated[list[str], operator.add]


INBOX_CONFIG = {"allow_accept": True, "allow_edit": True, "allow_respond": True,
                "allow_ignore": False}


def review_node(state: State) -> dict[str, Any]:
    """An Agent Inbox review of a shell command; what it decides is appended to ``log``."""
    from langgraph.types import interrupt

    request = {"action_request": {"action": "run_command", "args": {"command": state["command"]}},
               "config": INBOX_CONFIG, "description": "Run this **shell command**?"}
    response = interrupt([request])[0]
    kind = response["type"]
    if kind == "accept":
        return {"log": [f"ran {state['command']}"]}
    if kind == "edit":
        return {"log": [f"ran {response['args']['args']['command']}"]}
    if kind == "response":
        return {"log": [f"feedback {response['args']}"]}
    return {"log": ["ignored"]}


def build_graph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    g.add_node("review", review_node)
    g.add_edge(START, "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=checkpointer)


def thread(tid: str) -> Any:
    return {"configurable": {"thread_id": tid}}


# ---------------------------------------------------------------------------- pure: plans


def test_agent_inbox_plan_allows_only_what_the_config_allows() -> None:
    value = [{"action_request": {"action": "run_command", "args": {"command": "ls"}},
              "config": INBOX_CONFIG, "description": "Run it?"}]
    plan = plan_interrupt("t1", "i1", value)
    (review,) = plan.reviews
    assert review.op_id == interrupt_op_id("t1", "i1", 0)
    assert review.op_id != interrupt_op_id("t1", "i1", 1) != interrupt_op_id("t2", "i1", 0)
    assert review.context["hitl"]["format"] == AGENT_INBOX
    assert review.context["hitl"]["decisions"] == ["accept", "edit", "response"]
    assert review.context["hitl"]["args"] == {"command": "ls"}
    assert review.schema is not None
    check_schema(review.schema)  # the hub would accept the request
    ok = [{"type": "accept", "args": None}, {"type": "accept"},
          {"type": "edit", "args": {"action": "run_command", "args": {"command": "pwd"}}},
          {"type": "response", "args": "use pwd"}]
    for value_ in ok:
        validate(value_, review.schema)
    bad = [{"type": "ignore", "args": None},  # not allowed by this config
           {"type": "edit", "args": {"action": "rm", "args": {}}},  # another action
           {"type": "response", "args": ""}, {"type": "accept", "args": None, "x": 1}, "yes"]
    for value_ in bad:
        with pytest.raises(SchemaError):
            validate(value_, review.schema)
    answers = [_answered(review.op_id, {"type": "accept", "args": None})]
    assert plan.resume_value(answers) == [{"type": "accept", "args": None}]
    single = plan_interrupt("t1", "i1", value[0])
    assert single.resume_value(answers) == {"type": "accept", "args": None}


def test_hitl_plans_batched_and_per_call() -> None:
    value = {"action_requests": [{"name": "send_email", "args": {"to": "a@b.c"},
                                  "description": "Send?"},
                                 {"name": "delete_file", "args": {"path": "r.txt"}}],
             "review_configs": [{"action_name": "send_email",
                                 "allowed_decisions": ["approve", "edit", "reject"]},
                                {"action_name": "delete_file",
                                 "allowed_decisions": ["approve", "reject"]}]}
    plan = plan_interrupt("t", "i", value)
    assert [r.context["hitl"]["decisions"] for r in plan.reviews] == [
        ["approve", "edit", "reject"], ["approve", "reject"]]
    assert [r.context["hitl"]["format"] for r in plan.reviews] == [LANGCHAIN_HITL] * 2
    assert plan.reviews[1].question == "Review the call to `delete_file`.\n\n(2 of 2)"
    s0, s1 = plan.reviews[0].schema, plan.reviews[1].schema
    assert s0 is not None and s1 is not None
    validate({"type": "edit", "edited_action": {"name": "send_email", "args": {}}}, s0)
    with pytest.raises(SchemaError):
        validate({"type": "edit", "edited_action": {"name": "delete_file", "args": {}}}, s1)
    with pytest.raises(SchemaError):
        validate({"type": "respond", "message": "hi"}, s1)
    resume = plan.resume_value([_answered("a", {"type": "approve"}),
                                _declined("b", "keep it")])
    assert resume == {"decisions": [{"type": "approve"},
                                    {"type": "reject", "message": "keep it"}]}
    per_call = plan_interrupt("t", "j", {"type": "tool_approval", "tool_call_id": "c1",
                                        "name": "send_email", "args": {}, "description": "Send?",
                                        "allowed_decisions": ["approve", "respond"]})
    assert per_call.reviews[0].context["hitl"]["decisions"] == ["approve", "respond"]
    assert per_call.resume_value([_answered("a", {"type": "respond", "message": "done"})]) == \
        {"type": "respond", "message": "done"}


def test_a_declined_or_expired_item_without_a_no_raises() -> None:
    value = {"action_request": {"action": "x", "args": {}},
             "config": {"allow_accept": True}, "description": None}
    plan = plan_interrupt("t", "i", value)
    with pytest.raises(HumanDecisionError, match="declined"):
        plan.resume_value([_declined("a", "no")])
    with pytest.raises(HumanDecisionError, match="expired"):
        plan.resume_value([_answer("a", "expired", None)])
    with pytest.raises(ValueError, match="allows no response"):
        plan_interrupt("t", "i", {**value, "config": {"allow_accept": False}})
    text = plan_interrupt("t", "i", "What is the budget?")
    assert text.reviews[0].schema is None and text.reviews[0].question == "What is the budget?"
    assert text.resume_value([_answered("a", "100")]) == "100"


def _answer(op_id: str, status: str, value: Any) -> Any:
    from client_sdk import Answer

    return Answer(status=status, op_id=op_id, value=value, actor="human:me")


def _answered(op_id: str, value: Any) -> Any:
    return _answer(op_id, "answered", value)


def _declined(op_id: str, value: Any) -> Any:
    return _answer(op_id, "declined", value)


# ---------------------------------------------------------------------------- over a hub


async def wait_for_inbox(human: Hub, count: int = 1) -> list[Any]:
    async def ready() -> Any:
        items = await human.inbox()
        return items if len(items) >= count else None

    items: list[Any] = await until(ready, 20, f"{count} inbox item(s)")
    return items


async def test_agent_inbox_interrupt_edited_by_the_person_resumes_the_graph(
        tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    graph = build_graph(InMemorySaver())
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        reviews = HubInterrupts(agent, to="me", timeout=30 * UNIT)
        run = asyncio.ensure_future(reviews.run(graph, {"command": "rm -rf /tmp/x", "log": []},
                                                thread("edit-1")))
        (item,) = await wait_for_inbox(human)
        assert item.conversation == "langgraph:edit-1"
        assert item.context["hitl"]["action"] == "run_command"
        assert item.request["schema"]["anyOf"]
        # The hub's core refuses a decision the config does not allow, from any client.
        with pytest.raises(InvalidRequest, match="form"):
            await human.respond(item.op_id, {"type": "ignore", "args": None})
        await human.respond(item.op_id, {"type": "edit", "args": {
            "action": "run_command", "args": {"command": "ls /tmp/x"}}})
        result = await asyncio.wait_for(run, 30 * UNIT)
        assert result["log"] == ["ran ls /tmp/x"]
        assert await reviews.resume_command(graph, thread("edit-1")) is None
        assert await human.inbox() == []


async def test_a_text_interrupt_is_a_free_text_question(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class Budget(TypedDict):
        budget: str

    def ask(state: Budget) -> dict[str, Any]:
        return {"budget": interrupt("What is the budget?")}

    g = StateGraph(Budget)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    graph = g.compile(checkpointer=InMemorySaver())
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        run = asyncio.ensure_future(
            HubInterrupts(agent, to="me", timeout=30 * UNIT).run(graph, {"budget": ""},
                                                                 thread("text-1")))
        (item,) = await wait_for_inbox(human)
        assert item.question == "What is the budget?" and item.request.get("schema") is None
        await human.respond(item.op_id, "120 EUR")
        assert (await asyncio.wait_for(run, 30 * UNIT))["budget"] == "120 EUR"


# ---------------------------------------------------------------------------- HITL middleware


def hitl_agent(mode: str, checkpointer: Any) -> Any:
    """LangChain v1's create_agent + HumanInTheLoopMiddleware over a scripted chat model."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return f"sent to {to}: {body}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    model = Scripted(messages=iter([
        AIMessage(content="", tool_calls=[
            {"name": "send_email", "args": {"to": "alice@example.com", "body": "hi"},
             "id": "call_1"},
            {"name": "delete_file", "args": {"path": "report.txt"}, "id": "call_2"}]),
        AIMessage(content="All done."),
    ]))
    middleware = HumanInTheLoopMiddleware(
        interrupt_on={"send_email": True,
                      "delete_file": {"allowed_decisions": ["approve", "reject"]}},
        interrupt_mode=mode)  # type: ignore[arg-type]
    return create_agent(model, tools=[send_email, delete_file], middleware=[middleware],
                        checkpointer=checkpointer)


@pytest.mark.parametrize("mode", ["batched", "per_call"])
async def test_hitl_middleware_decisions_answered_with_the_sdk(tmp_path: Path,
                                                               mode: str) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    agent_graph = hitl_agent(mode, InMemorySaver())
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        reviews = HubInterrupts(agent, to="me", timeout=30 * UNIT)
        run = asyncio.ensure_future(reviews.run(
            agent_graph, {"messages": [{"role": "user", "content": "Email Alice, delete it."}]},
            thread(f"hitl-{mode}")))
        items = {i.context["hitl"]["action"]: i for i in await wait_for_inbox(human, 2)}
        assert items["send_email"].context["hitl"]["decisions"] == [
            "approve", "edit", "reject", "respond"]
        assert items["delete_file"].context["hitl"]["decisions"] == ["approve", "reject"]
        assert items["delete_file"].context["hitl"]["args"] == {"path": "report.txt"}
        with pytest.raises(InvalidRequest):  # edit is not allowed for delete_file
            await human.respond(items["delete_file"].op_id, {
                "type": "edit", "edited_action": {"name": "delete_file", "args": {}}})
        await human.respond(items["send_email"].op_id, {"type": "edit", "edited_action": {
            "name": "send_email", "args": {"to": "alice@example.com", "body": "hello"}}})
        await human.respond(items["delete_file"].op_id, {"type": "reject",
                                                         "message": "Keep the report."})
        result = await asyncio.wait_for(run, 30 * UNIT)
        tools = {m.name: m for m in result["messages"] if m.type == "tool"}
        assert "sent to alice@example.com: hello" in str(tools["send_email"].content)
        assert "Keep the report." in str(tools["delete_file"].content)
        assert tools["delete_file"].status == "error"
        assert result["messages"][-1].content == "All done."


# ---------------------------------------------------------------------------- restart


AGENT_SCRIPT = """
import asyncio, json, sys
sys.path.insert(0, {tests!r})
import test_integration_langgraph as t
print(json.dumps(asyncio.run(t.agent_process(*sys.argv[1:]))), flush=True)
"""


async def agent_process(url: str, token: str, checkpoint: str, tid: str) -> Any:
    """One agent process: open the checkpoint, run the thread to completion via the hub."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(checkpoint) as saver, \
            Hub(url, token=token) as hub:
        graph = build_graph(saver)
        result = await HubInterrupts(hub, to="me").run(
            graph, {"command": "deploy", "log": []}, thread(tid))
        return result["log"]


async def start_agent(url: str, token: str, checkpoint: Path,
                      tid: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", AGENT_SCRIPT.format(tests=str(HERE)), url, token,
        str(checkpoint), tid, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)})


@pytest.fixture
def procs() -> Iterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for p in started:  # only the processes this test started, by their pid
        if p.returncode is None:
            os.kill(p.pid, signal.SIGKILL)


async def test_a_restarted_agent_process_reattaches_and_resumes_once(
        tmp_path: Path, procs: list[asyncio.subprocess.Process]) -> None:
    """Agent process 1 puts the interrupt in the inbox and is killed; the person answers;
    process 2 on the same checkpoint file re-attaches to the same item and resumes the thread
    with that answer, once; a third process finds nothing left to ask."""
    checkpoint = tmp_path / "checkpoints.sqlite"
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.human) as human:
        first = await start_agent(srv.url, srv.agent, checkpoint, "restart-1")
        procs.append(first)
        (item,) = await wait_for_inbox(human)
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 10 * UNIT)
        await human.respond(item.op_id, {"type": "accept", "args": None})

        second = await start_agent(srv.url, srv.agent, checkpoint, "restart-1")
        procs.append(second)
        out, err = await asyncio.wait_for(second.communicate(), 60 * UNIT)
        assert second.returncode == 0, err.decode()[-3000:]
        assert json.loads(out) == ["ran deploy"]  # the answer, applied once

        history = [a for a in await human.history() if a.op_id == item.op_id]
        assert len(history) == 1 and [a.op_id for a in await human.history()] == [item.op_id]

        # A third run of the finished thread starts a new turn: the old answer is not reused
        # and a new interrupt (new id, new item) is asked.
        third = await start_agent(srv.url, srv.agent, checkpoint, "restart-1")
        procs.append(third)
        (new_item,) = await wait_for_inbox(human)
        assert new_item.op_id != item.op_id
        await human.respond(new_item.op_id, {"type": "response", "args": "not now"})
        out, err = await asyncio.wait_for(third.communicate(), 60 * UNIT)
        assert third.returncode == 0, err.decode()[-3000:]
        assert json.loads(out) == ["ran deploy", "feedback not now"]


def test_the_core_sdk_imports_no_framework() -> None:
    """``import client_sdk`` stays as light as the core install: the adapters are extras."""
    import subprocess

    code = ("import sys, client_sdk, client_sdk.integrations; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'langgraph', 'langchain', 'langchain_core', 'agents', 'openai', 'httpx'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60 * UNIT, cwd=HERE.parent).stdout
    assert out.strip() == "[]"
