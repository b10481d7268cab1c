"""client_sdk.integrations.openai_agents: a real OpenAI Agents SDK run (a scripted model, no
network) whose ``needs_approval`` tool a person approves or rejects in the hub (issue 13)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import UNIT, until
from inproc import serve

from client_sdk import Hub
from client_sdk.integrations.openai_agents import HubApprovals, approval_op_id


def scripted_agent(calls: list[dict[str, Any]], seen: list[Any]) -> Any:
    """An agent whose model asks to call ``refund`` once, then reports what the tool said."""
    from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)  # no network: traces would go to OpenAI

    @function_tool(needs_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        calls.append({"order_id": order_id, "amount": amount})
        return f"refunded {amount} on {order_id}"

    class Scripted(Model):
        def __init__(self) -> None:
            self.turn = 0

        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> ModelResponse:
            self.turn += 1
            if self.turn == 1:
                out: Any = ResponseFunctionToolCall(
                    type="function_call", call_id="call_refund_1", name="refund",
                    arguments='{"order_id": "A-1234", "amount": 42.5}', id="fc_1",
                    status="completed")
            else:
                tool_out = [i for i in input if isinstance(i, dict)
                            and i.get("type") == "function_call_output"]
                seen.append(tool_out[-1]["output"] if tool_out else None)
                out = ResponseOutputMessage(
                    type="message", id="msg_1", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", annotations=[],
                                                text=f"tool said: {seen[-1]}")])
            return ModelResponse(output=[out], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    return Agent(name="Refunds", instructions="Refund when asked.", tools=[refund],
                 model=Scripted())


async def approve_in_inbox(human: Hub, *, approve: bool, comment: str) -> Any:
    items = await until(human.inbox, 20, "the approval in the inbox")
    (item,) = items
    if approve:
        await human.approve(item.op_id, comment)
    else:
        await human.reject(item.op_id, comment)
    return item


async def test_approved_tool_call_runs(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    seen: list[Any] = []
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        approvals = HubApprovals(agent, to="me", timeout=30 * UNIT)
        run = asyncio.ensure_future(approvals.run(scripted_agent(calls, seen), "Refund A-1234",
                                                  run_id="run-1"))
        item = await approve_in_inbox(human, approve=True, comment="ok, once")
        assert item.kind == "approval"
        assert item.op_id == approval_op_id("run-1", "call_refund_1")
        assert item.context["openai_agents"]["tool"] == "refund"
        assert item.context["openai_agents"]["arguments"] == {"order_id": "A-1234",
                                                              "amount": 42.5}
        assert "`refund`" in item.question and "A-1234" in item.question
        result = await asyncio.wait_for(run, 30 * UNIT)
        assert calls == [{"order_id": "A-1234", "amount": 42.5}]
        assert result.final_output == "tool said: refunded 42.5 on A-1234"
        assert result.interruptions == []


async def test_rejected_tool_call_is_not_run_and_the_comment_reaches_the_model(
        tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    seen: list[Any] = []
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        approvals = HubApprovals(agent, to="me", timeout=30 * UNIT)
        run = asyncio.ensure_future(approvals.run(scripted_agent(calls, seen), "Refund A-1234"))
        await approve_in_inbox(human, approve=False, comment="Refunds over 40 need a manager.")
        result = await asyncio.wait_for(run, 30 * UNIT)
        assert calls == []
        assert seen == ["Refunds over 40 need a manager."]
        assert result.final_output == "tool said: Refunds over 40 need a manager."


async def test_decide_reattaches_to_the_same_approval(tmp_path: Path) -> None:
    """A process that saved the run state and restarted asks again with the same run id:
    the same inbox item, and its answer, not a second approval."""
    from agents import Runner, RunState

    calls: list[dict[str, Any]] = []
    seen: list[Any] = []
    async with serve(tmp_path) as srv, Hub(srv.url, token=srv.agent) as agent, \
            Hub(srv.url, token=srv.human) as human:
        bot = scripted_agent(calls, seen)
        first = await Runner.run(bot, "Refund A-1234")
        saved = first.to_state().to_string()
        with pytest.raises(TimeoutError):  # the first process gives up waiting (or dies)
            await HubApprovals(agent, to="me", timeout=0.2).decide(first, run_id="r-9")
        await approve_in_inbox(human, approve=True, comment="")
        state = await RunState.from_string(bot, saved)
        state = await HubApprovals(agent, to="me", timeout=30 * UNIT).decide(state,
                                                                            run_id="r-9")
        result = await Runner.run(bot, state)
        assert calls == [{"order_id": "A-1234", "amount": 42.5}]
        assert [a.op_id for a in await human.history()] == [approval_op_id("r-9",
                                                                           "call_refund_1")]
        assert result.final_output == "tool said: refunded 42.5 on A-1234"
