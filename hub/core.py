"""The sans-I/O heart of a room: requests as state machines, events in, effects out.

Theory of operation
-------------------
A room is one conversation. Its state is the set of requests the room knows (a cache of
the store). ``RoomCore.handle(event, now)`` is the only way that state changes; it never
awaits, reads no clock and touches no socket. It returns a ``Decision``: the store
operations that must commit (``ops``) and the effects that may be carried out only after
they did (``after``) — persist, then publish (invariant 1).

Request lifecycle (the whole table; anything else raises ``IllegalTransition``)::

    pending ──► answered | declined | expired | cancelled      terminal, immutable

The first terminal transition wins (invariant 2); any later attempt gets
``AlreadyResolved`` carrying the winning resolution. When the store disagrees with the
cache (an op_id that already exists, a compare-and-set that lost), the shell feeds the
store's row back with ``reconcile`` and handles the event again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from hub.errors import AlreadyResolved, Conflict, Invalid, NotFound
from hub.protocol import TERMINAL, TEXT, WAIT_GRACE_SECONDS, Ask, Kind, OpId, Status
from hub.records import record
from hub.schema import SchemaError, is_tool_call, validate_tool_call
from hub.schema import validate as validate_schema

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset(TERMINAL),
    Status.ANSWERED: frozenset(),
    Status.DECLINED: frozenset(),
    Status.EXPIRED: frozenset(),
    Status.CANCELLED: frozenset(),
}

SYSTEM = "system"


class IllegalTransition(Exception):
    """A bug: the core tried a transition the table forbids."""


@dataclass(slots=True)
class Request:
    tenant: str
    op_id: OpId
    conversation: str
    to: str
    sender: str
    kind: Kind
    question: str
    choices: tuple[str, ...] | None
    context: Any
    default: Any
    schema: Any
    tools: Any
    payload_hash: str
    status: Status
    value: Any
    actor: str | None
    created_at: float
    deadline: float
    fixed_deadline: bool
    resolved_at: float | None = None
    human_seconds: float | None = None
    #: The encoded view and the (status, deadline) it was taken at: one view and one
    #: encoding per transition, shared by the reply and every push (not copied by
    #: ``dataclasses.replace``).
    _encoded: tuple[Status, float, str] | None = field(default=None, init=False, repr=False,
                                                       compare=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def view_text(self) -> str:
        """:meth:`view` encoded as JSON text, computed once per state.

        Only ``handle`` changes a request, and every change moves its status (a resolution
        also sets value, actor and times, once) or its deadline (an extension): those two
        tell whether the cached text still describes the request.

        Raises:
            TypeError: the view cannot be encoded (a value nested too deep).
        """
        cached = self._encoded
        if cached is not None and cached[0] is self.status and cached[1] == self.deadline:
            return cached[2]
        text = orjson.dumps(self.view()).decode()
        self._encoded = (self.status, self.deadline, text)
        return text

    def view(self) -> dict[str, Any]:
        """The wire shape of a request (docs/protocol.md)."""
        return {
            "op_id": self.op_id,
            "conversation": self.conversation,
            "to": self.to,
            "from": self.sender,
            "kind": TEXT[self.kind],
            "question": self.question,
            "choices": list(self.choices) if self.choices is not None else None,
            "context": self.context,
            "default": self.default,
            "schema": self.schema,
            "tools": self.tools,
            "status": TEXT[self.status],
            "value": self.value,
            "actor": self.actor,
            "created_at": self.created_at,
            "deadline": self.deadline,
            "fixed_deadline": self.fixed_deadline,
            "resolved_at": self.resolved_at,
            "human_seconds": self.human_seconds,
        }


def transition(req: Request, status: Status) -> None:
    if status not in TRANSITIONS[req.status]:
        raise IllegalTransition(f"{req.op_id}: {req.status} -> {status}")
    req.status = status


def payload_hash(ask: Ask, schema: Any = None, tools: Any = None) -> str:
    """What makes two asks with one op_id "the same request" (wait is not part of it).
    ``schema`` given beside the ask stands for the ask's own (one schema either way)."""
    if schema is None:
        schema = ask.schema
    blob = orjson.dumps(
        [ask.conversation, ask.to, TEXT[ask.kind], ask.question, ask.choices, ask.context,
         ask.default, ask.expires_in, schema, tools],
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(blob).hexdigest()[:32]


def open_deadline(now: float, wait: float) -> float:
    return now + wait + WAIT_GRACE_SECONDS


# ---------------------------------------------------------------------------- events


@record
class AskReceived:
    ask: Ask
    tenant: str
    sender: str
    schema: Any = None
    tools: Any = None

    @property
    def op_id(self) -> OpId:
        return self.ask.op_id


@record
class WaitRequested:
    op_id: OpId
    wait: float


@record
class CancelRequested:
    op_id: OpId


@record
class AnswerSubmitted:
    op_id: OpId
    handle: str
    status: Status
    value: Any


@record
class DeadlineReached:
    op_id: OpId


@record
class RowChanged:
    """Another node committed a change to this request: adopt the store's row (nothing to
    decide, nothing to say)."""

    request: Request

    @property
    def op_id(self) -> OpId:
        return self.request.op_id


Event = Union[AskReceived, WaitRequested, CancelRequested, AnswerSubmitted, DeadlineReached,
              RowChanged]


# ---------------------------------------------------------------------------- store ops


@record
class Insert:
    request: Request


@record
class Resolve:
    """Compare-and-set pending -> terminal."""

    request: Request


@record
class Extend:
    """Compare-and-set of the deadline of a pending request."""

    request: Request


Op = Union[Insert, Resolve, Extend]


# ---------------------------------------------------------------------------- effects


@record
class Replied:
    """Answer the caller: a request view (``attached`` for a re-attach) or an error."""

    request: Request | None = None
    error: Exception | None = None
    attached: bool = False


@record
class InboxAdded:
    request: Request


@record
class DeadlineMoved:
    """An open-ended request lives longer: inboxes should show the new deadline."""

    request: Request


@record
class Resolved:
    """A request reached its terminal state: tell its waiters and remove it from inboxes."""

    request: Request


@record
class AlarmSet:
    tenant: str
    conversation: str
    op_id: OpId
    deadline: float


Effect = Union[Replied, InboxAdded, DeadlineMoved, Resolved, AlarmSet]


@dataclass(slots=True)
class Decision:
    ops: list[Op] = field(default_factory=list)
    after: list[Effect] = field(default_factory=list)


def _reply_error(exc: Exception) -> Decision:
    return Decision(after=[Replied(error=exc)])


# ---------------------------------------------------------------------------- the room


class RoomCore:
    """The requests of one conversation, and every rule about them."""

    __slots__ = ("tenant", "conversation", "requests", "_foreign")

    def __init__(self, tenant: str, conversation: str, requests: list[Request] | None = None) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.requests: dict[str, Request] = {r.op_id: r for r in requests or ()}
        # Requests whose op_id lives in another room, found by a rejected insert: kept only
        # until the retried ask answers ``conflict`` with them.
        self._foreign: dict[str, Request] = {}

    def reconcile(self, op_id: str, stored: Request | None) -> None:
        """The store knows better: replace (or drop) the cached request."""
        if stored is None or stored.conversation != self.conversation:
            self.requests.pop(op_id, None)
            if stored is not None:
                self._foreign[op_id] = stored
        else:
            self.requests[op_id] = stored

    def handle(self, event: Event, now: float) -> Decision:
        if isinstance(event, AskReceived):
            return self._ask(event, now)
        if isinstance(event, AnswerSubmitted):
            return self._answer(event, now)
        if isinstance(event, WaitRequested):
            return self._wait(event.op_id, event.wait, now)
        if isinstance(event, CancelRequested):
            return self._resolve_by(event.op_id, Status.CANCELLED, None, SYSTEM, now, strict=True)
        if isinstance(event, DeadlineReached):
            return self._deadline(event.op_id, now)
        if isinstance(event, RowChanged):
            cached = self.requests.get(event.op_id)
            if cached is None or not cached.terminal:  # a resolution never goes back
                self.reconcile(event.op_id, event.request)
            return Decision()
        raise TypeError(f"unknown event {event!r}")

    # -- asks

    def _ask(self, ev: AskReceived, now: float) -> Decision:
        ask = ev.ask
        # The schema arrives on the ask frame (WebSocket, HTTP) or beside it (chat
        # completions' response_format): one schema either way, hashed as before.
        schema = ev.schema if ev.schema is not None else ask.schema
        phash = payload_hash(ask, schema, ev.tools)
        foreign = self._foreign.pop(ask.op_id, None)
        if foreign is not None:
            return _reply_error(Conflict("op_id already used with a different payload",
                                         request=foreign.view()))
        existing = self.requests.get(ask.op_id)
        if existing is not None:
            if existing.payload_hash != phash:
                return _reply_error(Conflict("op_id already used with a different payload",
                                             request=existing.view()))
            decision = self._extend(existing, ask.wait, now)
            decision.after.append(Replied(request=existing, attached=True))
            return decision
        if ask.kind is Kind.APPROVAL and ask.choices is not None:
            return _reply_error(Invalid("an approval has no choices"))
        fixed = ask.expires_in is not None
        deadline = now + ask.expires_in if ask.expires_in is not None else open_deadline(now, ask.wait)
        req = Request(
            tenant=ev.tenant, op_id=ask.op_id, conversation=self.conversation, to=ask.to,
            sender=ev.sender, kind=ask.kind, question=ask.question, choices=ask.choices,
            context=ask.context, default=ask.default, schema=schema, tools=ev.tools,
            payload_hash=phash, status=Status.PENDING, value=None, actor=None,
            created_at=now, deadline=deadline, fixed_deadline=fixed,
        )
        self.requests[req.op_id] = req
        return Decision(
            ops=[Insert(req)],
            after=[
                Replied(request=req),
                InboxAdded(req),
                AlarmSet(req.tenant, req.conversation, req.op_id, deadline),
            ],
        )

    # -- waits

    def _extend(self, req: Request, wait: float, now: float) -> Decision:
        if req.terminal or req.fixed_deadline:
            return Decision()
        wanted = open_deadline(now, wait)
        if wanted <= req.deadline:
            return Decision()
        req.deadline = wanted
        return Decision(
            ops=[Extend(req)],
            after=[AlarmSet(req.tenant, req.conversation, req.op_id, wanted), DeadlineMoved(req)],
        )

    def _wait(self, op_id: OpId, wait: float, now: float) -> Decision:
        req = self.requests.get(op_id)
        if req is None:
            return _reply_error(NotFound("no such request"))
        decision = self._extend(req, wait, now)
        decision.after.append(Replied(request=req))
        return decision

    # -- resolutions

    def _answer(self, ev: AnswerSubmitted, now: float) -> Decision:
        req = self.requests.get(ev.op_id)
        if req is None or req.to != ev.handle:
            # Another human's request looks exactly like a missing one: no oracle.
            return _reply_error(NotFound("no such request"))
        if req.terminal:
            if _same_answer(req, ev):
                # The same person sending the same answer again (a retry across a lost
                # connection): it committed, so they get it back, not an error.
                return Decision(after=[Replied(request=req)])
            return _reply_error(AlreadyResolved("request already resolved", request=req.view()))
        try:
            value = validate_answer(req, ev.status, ev.value)
        except Invalid as exc:
            return _reply_error(exc)
        return self._resolve_by(ev.op_id, ev.status, value, f"human:{ev.handle}", now, strict=True)

    def _deadline(self, op_id: OpId, now: float) -> Decision:
        req = self.requests.get(op_id)
        if req is None or req.terminal or req.deadline > now:
            return Decision()  # stale or early alarm: alarms are at-least-once
        if req.default is not None:
            return self._resolve_by(op_id, Status.ANSWERED, req.default, SYSTEM, now, strict=False)
        return self._resolve_by(op_id, Status.EXPIRED, None, SYSTEM, now, strict=False)

    def _resolve_by(self, op_id: OpId, status: Status, value: Any, actor: str, now: float,
                    *, strict: bool) -> Decision:
        req = self.requests.get(op_id)
        if req is None:
            return _reply_error(NotFound("no such request"))
        if req.terminal:
            if not strict:
                return Decision()
            return _reply_error(AlreadyResolved("request already resolved", request=req.view()))
        transition(req, status)
        req.value = value
        req.actor = actor
        req.resolved_at = now
        req.human_seconds = round(now - req.created_at, 3) if actor != SYSTEM else None
        return Decision(ops=[Resolve(req)], after=[Replied(request=req), Resolved(req)])

    def pending(self) -> list[Request]:
        return [r for r in self.requests.values() if not r.terminal]

    def forget_terminal(self) -> None:
        """Drop resolved requests from the cache (the store keeps them)."""
        for op_id in [k for k, r in self.requests.items() if r.terminal]:
            del self.requests[op_id]


def _same_answer(req: Request, ev: AnswerSubmitted) -> bool:
    """Whether a terminal ``req`` holds exactly what ``ev`` would have stored: same person,
    same status, the same value as JSON (so ``1`` and ``true`` differ)."""
    if req.actor != f"human:{ev.handle}" or req.status is not ev.status:
        return False
    try:
        value = validate_answer(req, ev.status, ev.value)
    except Invalid:
        return False
    opt = orjson.OPT_SORT_KEYS
    try:
        return orjson.dumps(value, option=opt) == orjson.dumps(req.value, option=opt)
    except TypeError:
        return False


def validate_answer(req: Request, status: Status, value: Any) -> Any:
    """Check a human's answer against the request; return the value to store."""
    if req.kind is Kind.APPROVAL:
        comment = ""
        if isinstance(value, dict):
            c = value.get("comment", "")
            comment = c if isinstance(c, str) else ""
        elif isinstance(value, str):
            comment = value
        elif value is not None:
            raise Invalid("an approval is answered with {approved, comment}")
        return {"approved": status is Status.ANSWERED, "comment": comment}
    if status is Status.DECLINED:
        return value
    if req.tools is not None or req.schema is not None:
        return _validate_structured(req, value)
    if req.choices is not None:
        if value not in req.choices:
            raise Invalid("the answer must be one of the choices")
    elif not isinstance(value, str):
        raise Invalid("a free-text answer must be a string")
    return value


def _validate_structured(req: Request, value: Any) -> Any:
    """Answers to chat-completions requests: a tool call, or content for ``req.schema``.

    A tool call is ``{"tool_call": {"name", "arguments"}}``; when the request demands
    one (context ``tool_choice: "required"``) content is refused. Content for a schema
    may arrive as the JSON object itself or as its JSON text.
    """
    try:
        if req.tools is not None and is_tool_call(value):
            return validate_tool_call(value, req.tools)
        if req.tools is not None and isinstance(req.context, dict) \
                and req.context.get("tool_choice") == "required":
            raise Invalid("this request must be answered with a tool call")
        if req.schema is None:
            if not isinstance(value, str):
                raise Invalid("a free-text answer must be a string")
            return value
        if isinstance(value, str):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError:
                pass  # validated as the string it is
        validate_schema(value, req.schema)
        return value
    except SchemaError as exc:
        raise Invalid(f"the answer does not match the form: {exc}") from None

