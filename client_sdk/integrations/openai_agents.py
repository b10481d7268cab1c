"""OpenAI Agents SDK: tool approvals (``needs_approval`` tools) decided by a person in the inbox.

    from agents import Agent, function_tool
    from client_sdk import Hub
    from client_sdk.integrations.openai_agents import HubApprovals

    async with Hub(A2H_URL, token=AGENT_TOKEN) as hub:
        approvals = HubApprovals(hub, to="takeru")
        result = await approvals.run(agent, "Refund order 1234")
        print(result.final_output)

Theory of operation: a run that reaches a tool whose ``needs_approval`` says so stops with
``result.interruptions`` (``ToolApprovalItem``). Each becomes a hub *approval* (Approve /
Reject with a comment, the hub's own kind, validated by its core) whose op_id is derived
from a run id and the tool call's ``call_id``; then ``state.approve(item)`` or
``state.reject(item, rejection_message=<the person's comment>)`` is applied to
``result.to_state()`` and the run resumes with ``Runner.run(agent, state)``. A process that
saved the state (``state.to_string()``) and restarts can call :meth:`HubApprovals.decide`
with the same ``run_id`` and re-attaches to the same inbox items.
"""

from __future__ import annotations

import inspect
import json
import secrets
from collections.abc import Sequence
from typing import Any

from agents import Agent, Runner, RunResult, RunResultStreaming, RunState, ToolApprovalItem

from client_sdk.client import Hub
from client_sdk.integrations._hub import (
    DEFAULT_EXPIRES_IN,
    HumanDecisionError,
    derived_op_id,
    wait_resolved,
)
from client_sdk.models import Answer
from hub.protocol import Status

__all__ = ["HubApprovals", "HumanDecisionError", "approval_op_id"]


def approval_op_id(run_id: str, call_id: str) -> str:
    """The op_id of the inbox approval for tool call ``call_id`` of run ``run_id``."""
    return derived_op_id("oa", run_id, call_id)


def _arguments(item: ToolApprovalItem) -> Any:
    raw = item.arguments
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _question(agent_name: str, tool: str, args: Any) -> str:
    shown = json.dumps(args, indent=2, ensure_ascii=False) if not isinstance(args, str) \
        else args
    return f"**{agent_name}** wants to call `{tool}`. Allow it?\n\n```json\n{shown}\n```"


class HubApprovals:
    """Decides an OpenAI Agents run's tool approvals with a person, through the hub.

    Args:
        hub: a connected :class:`client_sdk.Hub` with an agent token.
        to: the handle of the person who approves.
        conversation: the hub conversation for the approvals.
        expires_in: how long each approval stays answerable, seconds (default a week).
        timeout: how long one call waits for the person, seconds; ``None`` waits as long
            as the approvals live.
    """

    def __init__(self, hub: Hub, *, to: str, conversation: str = "openai-agents",
                 expires_in: float | None = DEFAULT_EXPIRES_IN,
                 timeout: float | None = None) -> None:
        self.hub = hub
        self.to = to
        self.conversation = conversation
        self.expires_in = expires_in
        self.timeout = timeout

    async def ask(self, interruptions: Sequence[ToolApprovalItem], *,
                  run_id: str) -> list[Answer]:
        """Put each approval in the inbox (or re-attach), wait, and return the answers.

        Raises:
            TimeoutError: ``timeout`` ran out with an approval still pending.
        """
        pending = []
        for item in interruptions:
            call_id = item.call_id
            if not call_id:
                raise ValueError(f"the tool call to {item.name!r} has no call_id")
            tool = item.qualified_name or item.name or "tool"
            args = _arguments(item)
            pending.append(await self.hub.approve_request(
                self.to, _question(item.agent.name, tool, args),
                conversation=self.conversation, op_id=approval_op_id(run_id, call_id),
                wait=0, expires_in=self.expires_in,
                context={"openai_agents": {"agent": item.agent.name, "tool": tool,
                                           "arguments": args, "call_id": call_id,
                                           "run_id": run_id}}))
        answers = [await wait_resolved(self.hub, a, self.timeout) for a in pending]
        still = [a.op_id for a in answers if a.pending]
        if still:
            raise TimeoutError(f"no decision yet for {', '.join(still)}")
        return answers

    async def decide(self, result: RunResult | RunResultStreaming | RunState[Any, Any], *,
                     run_id: str) -> RunState[Any, Any]:
        """Ask the person about every pending approval and apply the decisions.

        Returns:
            The run state to resume with ``Runner.run(agent, state)``.

        Raises:
            HumanDecisionError: an approval expired or was cancelled.
            TimeoutError: ``timeout`` ran out first.
        """
        state = result if isinstance(result, RunState) else result.to_state()
        items = state.get_interruptions() if isinstance(result, RunState) \
            else result.interruptions
        answers = await self.ask(items, run_id=run_id)
        for item, answer in zip(items, answers, strict=True):
            if answer.status == Status.ANSWERED:
                state.approve(item)
            elif answer.status == Status.DECLINED:
                _reject(state, item, answer.comment)
            else:
                raise HumanDecisionError(
                    f"no decision for {item.name}: the approval is {answer.status}",
                    answer=answer)
        return state

    async def run(self, agent: Agent[Any], input: Any, *, run_id: str | None = None,
                  **kwargs: Any) -> RunResult:
        """``Runner.run`` that answers every tool approval through the hub until the run ends.

        Args:
            run_id: names this run's approvals (their op_ids); default a fresh random id.
            kwargs: passed to ``Runner.run`` (``context``, ``max_turns``, ``session``...).
        """
        rid = run_id or secrets.token_hex(16)
        result = await Runner.run(agent, input, **kwargs)
        while result.interruptions:
            state = await self.decide(result, run_id=rid)
            result = await Runner.run(agent, state, **kwargs)
        return result


def _reject(state: RunState[Any, Any], item: ToolApprovalItem, comment: str) -> None:
    if comment and "rejection_message" in inspect.signature(state.reject).parameters:
        state.reject(item, rejection_message=comment)
    else:
        state.reject(item)
