"""LangGraph: a graph's pending interrupts become inbox items; the answers resume the thread.

    from client_sdk import Hub
    from client_sdk.integrations.langgraph import HubInterrupts

    async with Hub(A2H_URL, token=AGENT_TOKEN) as hub:
        reviews = HubInterrupts(hub, to="takeru")
        result = await reviews.run(graph, {"messages": [...]}, config)

Three interrupt values are understood, and each is answered in the framework's own shape:

============================  ==========================================  =====================
interrupt value               one inbox item per                          resume value
============================  ==========================================  =====================
Agent Inbox ``HumanInterrupt``  ``HumanInterrupt`` (a list gives several)  ``HumanResponse`` (a
  (or a list of them)                                                      list for a list)
LangChain ``HITLRequest``     entry of ``action_requests``                ``{"decisions": [...]}``
  (``HumanInTheLoopMiddleware``, batched)
LangChain ``ToolApprovalRequest`` the request                             one ``Decision``
  (the middleware's ``per_call`` mode)
anything else                 the interrupt (a free-text question)        the answer's text
============================  ==========================================  =====================

Theory of operation: each item's op_id is derived from the thread id, the interrupt id and
the item's position (:func:`interrupt_op_id`); LangGraph's interrupt ids are stable for a
given checkpoint, so a restarted process that finds the same interrupt pending re-attaches
to the same inbox item (never a second one) and, once it is answered, resumes the thread
with that answer exactly once: after the resume is checkpointed the interrupt is no longer
pending and nothing asks again. Each item's ``schema`` accepts exactly the decisions its
config allows (the hub's core refuses anything else, from any client), and its
``context["hitl"]`` tells the inbox what to draw (``web/js/hitl.js``)::

    {"format": "agent-inbox" | "langchain-hitl", "action": name, "args": {...},
     "description": text | None, "decisions": [allowed decision types],
     "index": i, "count": n, "thread_id": ..., "interrupt_id": ...}

The answer stored in the hub *is* the framework's decision (``{"type": "accept", "args":
null}``, ``{"type": "edit", "edited_action": {...}}``...), so what the person chose reads the
same in the hub's history as in the graph.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt

from client_sdk.client import Hub
from client_sdk.integrations._hub import (
    DEFAULT_EXPIRES_IN,
    HumanDecisionError,
    create_with_schema,
    derived_op_id,
    wait_resolved,
)
from client_sdk.models import Answer
from hub.protocol import Status

__all__ = [
    "AGENT_INBOX",
    "LANGCHAIN_HITL",
    "TEXT",
    "HubInterrupts",
    "HumanDecisionError",
    "Plan",
    "Review",
    "default_conversation",
    "interrupt_op_id",
    "plan_interrupt",
]

#: ``context["hitl"]["format"]`` of an Agent Inbox ``HumanInterrupt``.
AGENT_INBOX = "agent-inbox"
#: ``context["hitl"]["format"]`` of a LangChain ``HumanInTheLoopMiddleware`` action.
LANGCHAIN_HITL = "langchain-hitl"
#: A plain ``interrupt("question?")``: a free-text question.
TEXT = "text"

_AGENT_INBOX_DECISIONS = ("accept", "edit", "response", "ignore")
_HITL_DECISIONS = ("approve", "edit", "reject", "respond")
_ALLOW_KEY = {"accept": "allow_accept", "edit": "allow_edit", "response": "allow_respond",
              "ignore": "allow_ignore"}

# Shapes of the interrupt value, and so of the resume value.
_SHAPE_INBOX_LIST = "agent-inbox-list"
_SHAPE_INBOX_ONE = "agent-inbox-one"
_SHAPE_HITL_BATCH = "hitl-batched"
_SHAPE_HITL_CALL = "hitl-per-call"
_SHAPE_TEXT = "text"

_NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:~+=@-")


def interrupt_op_id(thread_id: str, interrupt_id: str, index: int = 0) -> str:
    """The op_id of the inbox item for entry ``index`` of interrupt ``interrupt_id``."""
    return derived_op_id("lg", thread_id, interrupt_id, str(index))


@dataclass(frozen=True)
class Review:
    """One inbox item to create for an interrupt."""

    op_id: str
    question: str
    context: dict[str, Any]
    schema: dict[str, Any] | None  # None: a free-text question
    decisions: tuple[str, ...] = ()
    action: str = ""


@dataclass(frozen=True)
class Plan:
    """An interrupt turned into inbox items, and how their answers make its resume value."""

    interrupt_id: str
    shape: str
    reviews: list[Review] = field(default_factory=list)

    def resume_value(self, answers: Sequence[Answer]) -> Any:
        """The value ``Command(resume=...)`` needs, from the items' resolutions (in order).

        Raises:
            HumanDecisionError: an item expired or was cancelled, or was declined where
                its config allows no "no" (Agent Inbox ``ignore``, LangChain ``reject``).
        """
        values = [_decision(r, a) for r, a in zip(self.reviews, answers, strict=True)]
        if self.shape == _SHAPE_INBOX_LIST:
            return values
        if self.shape == _SHAPE_HITL_BATCH:
            return {"decisions": values}
        return values[0]


def _decision(review: Review, answer: Answer) -> Any:
    if answer.status == Status.ANSWERED:
        return answer.value
    if answer.status == Status.DECLINED:
        note = answer.value if isinstance(answer.value, str) else ""
        if "ignore" in review.decisions:
            return {"type": "ignore", "args": None}
        if "reject" in review.decisions:
            return {"type": "reject", "message": note} if note else {"type": "reject"}
        if review.schema is None:
            raise HumanDecisionError("the person declined to answer", answer=answer)
    raise HumanDecisionError(
        f"no decision for {review.action or 'the interrupt'}: the request is {answer.status}",
        answer=answer)


# ---------------------------------------------------------------------------- shapes


def _object(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def _agent_inbox_schema(action: str, allowed: Sequence[str]) -> dict[str, Any]:
    null = {"type": "null"}
    branches = {
        "accept": _object({"type": {"const": "accept"}, "args": null}, ["type"]),
        "edit": _object({"type": {"const": "edit"},
                         "args": _object({"action": {"const": action},
                                          "args": {"type": "object"}}, ["action", "args"])},
                        ["type", "args"]),
        "response": _object({"type": {"const": "response"},
                             "args": {"type": "string", "minLength": 1}}, ["type", "args"]),
        "ignore": _object({"type": {"const": "ignore"}, "args": null}, ["type"]),
    }
    return {"anyOf": [branches[d] for d in allowed]}


def _hitl_schema(action: str, allowed: Sequence[str]) -> dict[str, Any]:
    branches = {
        "approve": _object({"type": {"const": "approve"}}, ["type"]),
        "edit": _object({"type": {"const": "edit"},
                         "edited_action": _object({"name": {"const": action},
                                                   "args": {"type": "object"}},
                                                  ["name", "args"])},
                        ["type", "edited_action"]),
        "reject": _object({"type": {"const": "reject"}, "message": {"type": "string"}},
                          ["type"]),
        "respond": _object({"type": {"const": "respond"},
                            "message": {"type": "string", "minLength": 1}},
                           ["type", "message"]),
    }
    return {"anyOf": [branches[d] for d in allowed]}


def _is_agent_inbox(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("action_request"), Mapping)


def _agent_inbox_allowed(config: Any) -> list[str]:
    if not isinstance(config, Mapping):
        return list(_AGENT_INBOX_DECISIONS)  # no config: every response is allowed
    allowed = [d for d in _AGENT_INBOX_DECISIONS if config.get(_ALLOW_KEY[d])]
    if not allowed:
        raise ValueError("the HumanInterrupt's config allows no response at all")
    return allowed


def _hitl_allowed(config: Any) -> list[str]:
    raw = config.get("allowed_decisions") if isinstance(config, Mapping) else None
    if raw is None:
        return ["approve", "edit", "reject"]
    allowed = [d for d in _HITL_DECISIONS if d in raw]
    if not allowed:
        raise ValueError(f"no known decision in allowed_decisions={raw!r}")
    return allowed


def _question(action: str, description: Any, index: int, count: int) -> str:
    text = description if isinstance(description, str) and description.strip() else \
        f"Review the call to `{action}`."
    return f"{text}\n\n({index + 1} of {count})" if count > 1 else text


def plan_interrupt(thread_id: str, interrupt_id: str, value: Any) -> Plan:
    """The inbox items that an interrupt's value asks for (pure: no I/O).

    Raises:
        ValueError: a HumanInterrupt/HITL config that allows no decision at all.
    """
    def base(i: int, n: int, fmt: str, action: str, args: Any, description: Any,
             decisions: Sequence[str]) -> dict[str, Any]:
        return {"hitl": {"format": fmt, "action": action, "args": args,
                         "description": description if isinstance(description, str) else None,
                         "decisions": list(decisions), "index": i, "count": n,
                         "thread_id": thread_id, "interrupt_id": interrupt_id}}

    if _is_agent_inbox(value) or (isinstance(value, list) and value
                                  and all(_is_agent_inbox(v) for v in value)):
        items = value if isinstance(value, list) else [value]
        plan = Plan(interrupt_id, _SHAPE_INBOX_LIST if isinstance(value, list)
                    else _SHAPE_INBOX_ONE)
        for i, hi in enumerate(items):
            req = hi["action_request"]
            action, args = str(req.get("action", "")), dict(req.get("args") or {})
            allowed = _agent_inbox_allowed(hi.get("config"))
            plan.reviews.append(Review(
                op_id=interrupt_op_id(thread_id, interrupt_id, i),
                question=_question(action, hi.get("description"), i, len(items)),
                context=base(i, len(items), AGENT_INBOX, action, args, hi.get("description"),
                             allowed),
                schema=_agent_inbox_schema(action, allowed), decisions=tuple(allowed),
                action=action))
        return plan

    if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
        requests = value["action_requests"]
        configs = [c for c in value.get("review_configs") or [] if isinstance(c, Mapping)]
        by_name = {c.get("action_name"): c for c in configs}
        plan = Plan(interrupt_id, _SHAPE_HITL_BATCH)
        for i, ar in enumerate(requests):
            action, args = str(ar.get("name", "")), dict(ar.get("args") or {})
            config = by_name.get(action) or (configs[i] if i < len(configs) else None)
            allowed = _hitl_allowed(config)
            plan.reviews.append(Review(
                op_id=interrupt_op_id(thread_id, interrupt_id, i),
                question=_question(action, ar.get("description"), i, len(requests)),
                context=base(i, len(requests), LANGCHAIN_HITL, action, args,
                             ar.get("description"), allowed),
                schema=_hitl_schema(action, allowed), decisions=tuple(allowed),
                action=action))
        return plan

    if isinstance(value, Mapping) and value.get("type") == "tool_approval":
        action, args = str(value.get("name", "")), dict(value.get("args") or {})
        allowed = _hitl_allowed(value.get("review_config") or
                                {"allowed_decisions": value.get("allowed_decisions",
                                                                list(_HITL_DECISIONS))})
        return Plan(interrupt_id, _SHAPE_HITL_CALL, [Review(
            op_id=interrupt_op_id(thread_id, interrupt_id, 0),
            question=_question(action, value.get("description"), 0, 1),
            context=base(0, 1, LANGCHAIN_HITL, action, args, value.get("description"),
                         allowed),
            schema=_hitl_schema(action, allowed), decisions=tuple(allowed), action=action)])

    if isinstance(value, str) and value.strip():
        question = value
    elif isinstance(value, Mapping) and isinstance(value.get("question"), str):
        question = value["question"]
    else:
        question = "```json\n" + json.dumps(value, indent=2, default=str) + "\n```"
    return Plan(interrupt_id, _SHAPE_TEXT, [Review(
        op_id=interrupt_op_id(thread_id, interrupt_id, 0), question=question,
        context={"langgraph": {"thread_id": thread_id, "interrupt_id": interrupt_id}},
        schema=None)])


def _allowed_from_schema(response_schema: Any) -> list[str] | None:
    """The decision types a per-call interrupt's ``response_schema`` (JSON schema) allows."""
    if not isinstance(response_schema, Mapping):
        return None
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            t = node.get("properties", {}).get("type") if isinstance(
                node.get("properties"), Mapping) else None
            if isinstance(t, Mapping):
                for key in ("const", "enum", "default"):
                    v = t.get(key)
                    for d in v if isinstance(v, list) else [v]:
                        if d in _HITL_DECISIONS and d not in found:
                            found.append(d)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(response_schema)
    return [d for d in _HITL_DECISIONS if d in found] or None


# ---------------------------------------------------------------------------- the adapter


def _thread_id(config: RunnableConfig) -> str:
    tid = (config.get("configurable") or {}).get("thread_id")
    if tid is None:
        raise ValueError("config['configurable']['thread_id'] is required (a checkpointed "
                         "thread is what the person's answer resumes)")
    return str(tid)


def default_conversation(thread_id: str) -> str:
    """``langgraph:<thread_id>`` (hashed when the thread id does not fit a hub name)."""
    if len(thread_id) <= 180 and set(thread_id) <= _NAME_OK:
        return f"langgraph:{thread_id}"
    return "langgraph:" + hashlib.sha256(thread_id.encode()).hexdigest()[:32]


class HubInterrupts:
    """Answers a LangGraph thread's interrupts with a person's decisions, through the hub.

    Args:
        hub: a connected :class:`client_sdk.Hub` with an agent token.
        to: the handle of the person who decides.
        conversation: the hub conversation for the items; default one per thread
            (``langgraph:<thread_id>``).
        expires_in: how long each item stays answerable, seconds (default a week).
        timeout: how long one call waits for the person, seconds; ``None`` waits as long
            as the items live.
    """

    def __init__(self, hub: Hub, *, to: str, conversation: str | None = None,
                 expires_in: float | None = DEFAULT_EXPIRES_IN,
                 timeout: float | None = None) -> None:
        self.hub = hub
        self.to = to
        self.conversation = conversation
        self.expires_in = expires_in
        self.timeout = timeout

    async def decide(self, thread_id: str, interrupts: Sequence[Interrupt]) -> dict[str, Any]:
        """Put every interrupt in the inbox (or re-attach), wait for the person, and return
        ``{interrupt_id: resume value}`` for ``Command(resume=...)``.

        Raises:
            TimeoutError: ``timeout`` ran out with an item still pending (ask again later:
                the same items are re-attached).
            HumanDecisionError: an item expired, was cancelled, or was declined with no
                "no" allowed.
        """
        conversation = self.conversation or default_conversation(thread_id)
        plans = [self._plan(thread_id, itr) for itr in interrupts]
        pending: list[Answer] = []
        for plan in plans:  # create them all first: the person sees every item at once
            for review in plan.reviews:
                pending.append(await self._create(review, conversation))
        answers = [await wait_resolved(self.hub, a, self.timeout) for a in pending]
        still = [a.op_id for a in answers if a.pending]
        if still:
            raise TimeoutError(f"no decision yet for {', '.join(still)}")
        resume: dict[str, Any] = {}
        it = iter(answers)
        for plan in plans:
            resume[plan.interrupt_id] = plan.resume_value([next(it) for _ in plan.reviews])
        return resume

    def _plan(self, thread_id: str, itr: Interrupt) -> Plan:
        value = itr.value
        if isinstance(value, Mapping) and value.get("type") == "tool_approval" \
                and "allowed_decisions" not in value:
            allowed = _allowed_from_schema(itr.response_schema)
            if allowed:
                value = {**value, "allowed_decisions": allowed}
        return plan_interrupt(thread_id, itr.id, value)

    async def _create(self, review: Review, conversation: str) -> Answer:
        if review.schema is None:
            return await self.hub.ask(self.to, review.question, conversation=conversation,
                                      op_id=review.op_id, context=review.context,
                                      expires_in=self.expires_in, wait=0)
        return await create_with_schema(
            self.hub, op_id=review.op_id, to=self.to, question=review.question,
            conversation=conversation, schema=review.schema, context=review.context,
            expires_in=self.expires_in)

    async def resume_command(self, graph: Pregel[Any, Any, Any, Any],
                             config: RunnableConfig) -> Command[Any] | None:
        """The ``Command(resume=...)`` for the thread's pending interrupts, once the person
        decided; ``None`` when nothing is pending."""
        state = await graph.aget_state(config)
        if not state.interrupts:
            return None
        return Command(resume=await self.decide(_thread_id(config), state.interrupts))

    async def run(self, graph: Pregel[Any, Any, Any, Any], input: Any,
                  config: RunnableConfig, **kwargs: Any) -> Any:
        """Invoke the graph and answer its interrupts until it finishes; its last output.

        A thread that is already waiting on interrupts (the agent process restarted while
        a person decided) is not given ``input`` again: its pending interrupts are
        re-attached in the inbox and the thread resumed with their answers.
        """
        state = await graph.aget_state(config)
        result: Any = None
        if not state.interrupts:
            result = await graph.ainvoke(input, config, **kwargs)
        while (command := await self.resume_command(graph, config)) is not None:
            result = await graph.ainvoke(command, config, **kwargs)
        return result
