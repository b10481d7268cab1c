"""The sans-I/O journal of durable runs: runs and their journaled calls as state machines.

Theory of operation
-------------------
A *run* is one durable agent execution, named by the agent (``run_id``) and scoped to the
tenant of the agent's token. Every external call the run makes through the SDK, and every
interrupt (an approval or question put to a human), gets a *journal entry* at the next
*position*; its ``call_id`` is ``f"{run_id}:{position}"``, the same on every replay, so the
called function can hand it to the outside world as an idempotency key.

Each start of the run's code is an *execution* with a fresh ``exec_id``; starting the run
again makes the new execution the run's current one (fencing: an older process that is
still alive is refused from then on). The code replays from the top; at each position the
hub compares what the code does now with what the journal says and answers one
:class:`Outcome`:

==========================  ==================================================================
journal at this position    outcome
==========================  ==================================================================
nothing                     ``run``: journaled ``running`` (committed) before the SDK calls
other name or args hash     ``diverged``: never skipped, never re-run; the run needs attention
``done``                    ``done``: the journaled result, the function is not called
``running`` (this exec)     ``run``: the same execution re-sent its frame (a reconnect)
``running`` (older exec)    the process died mid-call: ``run`` again with the same call_id,
                            or, for ``unsafe_to_repeat``, ``unknown`` (fail closed, inv. 10)
``failed``, later entries   ``failed``: the code went on after the error, so replay raises it
``failed``, last entry      the run stopped on that error: treated like ``running`` above
(the code ends early)       ``diverged`` at the end: fewer calls than the journal holds
``unknown``                 follows the human's settlement, read from its inbox request:
                            "it happened" → ``done`` (with the result given, if any),
                            "retry it" → ``run``, "fail the run" → the run fails;
                            not settled yet → ``unknown`` again
==========================  ==================================================================

An interrupt's entry stays ``running`` while its request is open; the shell re-attaches
to the request (its op_id is derived from the call_id, so a restarted agent or hub finds
the same request) and journals the resolution as ``done``. An unknown outcome is settled
through a request too (a question with the three decisions as choices). Both op_ids are
HMACs of the call_id under a random per-run secret: stable across replays, unguessable.

All transitions of both machines are in :data:`TRANSITIONS`; anything else raises
:class:`IllegalTransition` (a bug). ``handle(event, snapshot, now)`` never awaits, reads no
clock and touches no store: the shell reads a :class:`Snapshot` and applies the returned
:class:`Step` (what to write) in one store transaction, then carries out ``step.ask`` (a
request to open or re-attach to) only after that transaction committed.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from hub.errors import ErrorCode, Invalid, LimitExceeded, NotFound
from hub.protocol import Outcome, RunStatus, Settlement
from hub.records import record


class EntryStatus(enum.StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"


class EntryKind(enum.StrEnum):
    CALL = "call"
    INTERRUPT = "interrupt"


TERMINAL_RUN = frozenset({RunStatus.COMPLETED, RunStatus.FAILED})

#: Every legal transition of both machines, keyed by the state's enum:
#:
#:  run:    active ──► active (resumed) | completed | failed | needs_attention
#:          needs_attention ──► active (resumed) | needs_attention | failed
#:          completed, failed: terminal
#:  entry:  running ──► running (re-run) | done | failed | unknown
#:          failed ──► running (retried) | unknown
#:          unknown ──► unknown (asked again) | done | running (retry) | failed
#:          done: terminal
TRANSITIONS: dict[type[enum.Enum], dict[Any, frozenset[Any]]] = {
    RunStatus: {
        RunStatus.ACTIVE: frozenset({RunStatus.ACTIVE, RunStatus.COMPLETED, RunStatus.FAILED,
                                     RunStatus.NEEDS_ATTENTION}),
        RunStatus.NEEDS_ATTENTION: frozenset({RunStatus.ACTIVE, RunStatus.NEEDS_ATTENTION,
                                              RunStatus.FAILED}),
        RunStatus.COMPLETED: frozenset(),
        RunStatus.FAILED: frozenset(),
    },
    EntryStatus: {
        EntryStatus.RUNNING: frozenset({EntryStatus.RUNNING, EntryStatus.DONE,
                                        EntryStatus.FAILED, EntryStatus.UNKNOWN}),
        EntryStatus.FAILED: frozenset({EntryStatus.RUNNING, EntryStatus.UNKNOWN}),
        EntryStatus.UNKNOWN: frozenset({EntryStatus.UNKNOWN, EntryStatus.DONE,
                                        EntryStatus.RUNNING, EntryStatus.FAILED}),
        EntryStatus.DONE: frozenset(),
    },
}

#: How long an interrupt stays answerable unless the agent says otherwise: long enough to
#: outlive restarts of the agent and of the hub (an open-ended request would expire ~70 s
#: after the agent's last wait, i.e. while it is down).
DEFAULT_INTERRUPT_EXPIRY = 24 * 3600.0
#: How long a settlement request for an unknown outcome stays answerable.
SETTLEMENT_EXPIRY = 7 * 24 * 3600.0


class IllegalTransition(Exception):
    """A bug: the journal core tried a transition the table forbids."""


def _move(obj: Run | Entry, status: Any) -> None:
    if status not in TRANSITIONS[type(obj.status)][obj.status]:
        raise IllegalTransition(f"{type(obj).__name__.lower()} {obj.status} -> {status}")
    obj.status = status


def derive_op_id(secret: str, label: str) -> str:
    """The op_id of a run's request: an HMAC of ``label`` (a call_id) under the run's
    secret, 128 bits in hex. Stable across replays and restarts; unguessable without the
    secret, which never leaves the store."""
    return hmac.new(bytes.fromhex(secret), label.encode(), hashlib.sha256).hexdigest()[:32]


def call_id(run_id: str, position: int) -> str:
    return f"{run_id}:{position}"


def version_changed_message(old: str, new: str) -> str:
    return (f"the run was interrupted and can't resume, because its code version changed "
            f"from {old} to {new} since it started")


# ---------------------------------------------------------------------------- records


@dataclass(slots=True)
class Run:
    tenant: str
    run_id: str
    conversation: str
    version: str
    agent: str
    status: RunStatus
    reason: str | None
    secret: str
    exec_id: str
    escalate_to: str | None
    created_at: float
    updated_at: float
    finished_at: float | None = None

    def view(self, calls: int | None = None) -> dict[str, Any]:
        """The wire shape of a run (``run.list``, ``run.begin``); never the secret."""
        out: dict[str, Any] = {
            "run_id": self.run_id, "conversation": self.conversation,
            "version": self.version, "agent": self.agent, "status": self.status.value,
            "reason": self.reason, "escalate_to": self.escalate_to,
            "created_at": self.created_at, "updated_at": self.updated_at,
            "finished_at": self.finished_at,
        }
        if calls is not None:
            out["calls"] = calls
        return out


@dataclass(slots=True)
class Entry:
    tenant: str
    run_id: str
    position: int
    kind: EntryKind
    name: str
    args_hash: str
    args: Any
    unsafe: bool
    status: EntryStatus
    exec_id: str
    started_at: float
    attempts: int = 1
    result: Any = None
    error: Any = None
    op_id: str | None = None
    to: str | None = None
    settle_round: int = 0
    decided_by: str | None = None
    finished_at: float | None = None

    @property
    def call_id(self) -> str:
        return call_id(self.run_id, self.position)


@record
class SettlementRequest:
    """The stored state of the request that settles an unknown outcome."""

    status: str
    value: Any
    actor: str | None


# ---------------------------------------------------------------------------- events


@record
class RunStarted:
    tenant: str
    run_id: str
    conversation: str
    version: str
    agent: str
    exec_id: str
    secret: str  # used only if the run is new
    escalate_to: str | None = None


@record
class CallReached:
    """The code reached a call (or an interrupt) at ``position``."""

    run_id: str
    exec_id: str
    position: int
    kind: EntryKind
    name: str
    args_hash: str
    unsafe: bool = False
    args: Any = None
    to: str | None = None


@record
class CallFinished:
    run_id: str
    exec_id: str
    position: int
    ok: bool
    result: Any = None
    error: Any = None


@record
class InterruptResolved:
    run_id: str
    position: int
    request: dict[str, Any]


@record
class RunEnded:
    run_id: str
    exec_id: str
    ok: bool
    error: str | None = None
    #: positions the code used; None: not checked
    calls: int | None = None


Event = Union[RunStarted, CallReached, CallFinished, InterruptResolved, RunEnded]


@record
class Snapshot:
    """What the shell read from the store, in the transaction that will apply the step."""

    run: Run | None
    entry: Entry | None = None
    #: journal entries exist after ``entry`` (only read for a failed entry)
    later: bool = False
    #: the request settling an unknown ``entry``; None if it does not exist (yet)
    settlement: SettlementRequest | None = None
    #: who settles unknown outcomes when the run names nobody: the last interrupt's human,
    #: else the tenant's only human (only read for a new unsafe call)
    fallback_human: str | None = None
    #: the most journal entries one run may have
    max_entries: int = 10_000
    #: how many entries the journal has (only read when a run ends)
    journal_length: int = 0


# ---------------------------------------------------------------------------- effects


@record
class AskSettlement:
    """Open (or re-attach to) the inbox request that settles an unknown outcome."""

    run: Run
    entry: Entry


@record
class AskInterrupt:
    """Open (or re-attach to) an interrupt's request and wait for its resolution."""

    run: Run
    entry: Entry


@dataclass(slots=True)
class Step:
    outcome: Outcome
    #: records to write (upsert) in the same transaction
    write_run: Run | None = None
    write_entry: Entry | None = None
    run: Run | None = None
    result: Any = None
    error: Any = None
    message: str = ""
    op_id: str | None = None
    ask: AskSettlement | AskInterrupt | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the rules


def handle(event: Event, snap: Snapshot, now: float) -> Step:
    """Decide what ``event`` does to the journal. Raises NotFound / Invalid /
    LimitExceeded for requests that cannot be served (nothing is written then)."""
    if isinstance(event, RunStarted):
        return _started(event, snap.run, now)
    run = snap.run
    if run is None:
        raise NotFound("no such run in this tenant")
    if isinstance(event, CallReached):
        return _reached(event, run, snap, now)
    if isinstance(event, CallFinished):
        return _finished(event, run, snap.entry, now)
    if isinstance(event, InterruptResolved):
        return _resolved(event, run, snap.entry, now)
    if isinstance(event, RunEnded):
        return _ended(event, run, snap.journal_length, now)
    raise TypeError(f"unknown event {event!r}")


def _not_active(run: Run, exec_id: str | None = None) -> Step:
    if exec_id is not None and run.exec_id != exec_id and run.status not in TERMINAL_RUN:
        msg = (f"run {run.run_id!r} was started again by another process; this one no "
               "longer owns it")
    elif run.status is RunStatus.NEEDS_ATTENTION:
        msg = f"run {run.run_id!r} needs attention: {run.reason or 'see the inbox'}"
    else:
        msg = f"run {run.run_id!r} already {run.status.value}"
        if run.reason:
            msg += f": {run.reason}"
    return Step(Outcome.NOT_ACTIVE, run=run, message=msg, extra={"status": run.status.value})


def _set_run(run: Run, status: RunStatus, now: float, reason: str | None) -> None:
    _move(run, status)
    run.reason = reason
    run.updated_at = now
    if status in TERMINAL_RUN:
        run.finished_at = now


def _started(ev: RunStarted, run: Run | None, now: float) -> Step:
    if run is None:
        new = Run(tenant=ev.tenant, run_id=ev.run_id, conversation=ev.conversation, version=ev.version,
                  agent=ev.agent, status=RunStatus.ACTIVE, reason=None, secret=ev.secret,
                  exec_id=ev.exec_id, escalate_to=ev.escalate_to, created_at=now,
                  updated_at=now)
        return Step(Outcome.STARTED, write_run=new, run=new)
    if run.status in TERMINAL_RUN:
        return _not_active(run)
    if run.version != ev.version:
        msg = version_changed_message(run.version, ev.version)
        _set_run(run, RunStatus.NEEDS_ATTENTION, now, msg)
        return Step(Outcome.VERSION_CHANGED, write_run=run, run=run, message=msg,
                    extra={"old": run.version, "new": ev.version})
    _set_run(run, RunStatus.ACTIVE, now, None)
    run.exec_id = ev.exec_id
    if ev.escalate_to is not None:
        run.escalate_to = ev.escalate_to
    return Step(Outcome.STARTED, write_run=run, run=run)


def _reached(ev: CallReached, run: Run, snap: Snapshot, now: float) -> Step:
    if run.exec_id != ev.exec_id or run.status is not RunStatus.ACTIVE:
        return _not_active(run, ev.exec_id)
    entry = snap.entry
    if entry is None:
        return _first_time(ev, run, snap, now)
    if entry.kind is not ev.kind or entry.name != ev.name or entry.args_hash != ev.args_hash:
        return _diverged(ev, run, entry, now)
    if entry.status is EntryStatus.DONE:
        return Step(Outcome.DONE, result=entry.result)
    if entry.kind is EntryKind.INTERRUPT:
        # running: the request is open (or was answered while nobody waited): re-attach.
        return Step(Outcome.ASK, op_id=entry.op_id, ask=AskInterrupt(run, entry))
    if entry.status is EntryStatus.UNKNOWN:
        return _settled(ev, run, entry, snap.settlement, now)
    if entry.status is EntryStatus.RUNNING and entry.exec_id == ev.exec_id:
        return Step(Outcome.RUN)  # this execution re-sent its frame: nothing ran yet
    if entry.status is EntryStatus.FAILED and snap.later:
        return Step(Outcome.FAILED, error=entry.error)
    # running under a dead execution, or failed as the last thing the run did.
    if entry.unsafe or ev.unsafe:
        return _unknown(run, entry, now)
    return _rerun(ev, entry, now)


def _first_time(ev: CallReached, run: Run, snap: Snapshot, now: float) -> Step:
    if ev.position >= snap.max_entries:
        msg = f"a run may journal at most {snap.max_entries} calls"
        raise LimitExceeded(msg, code=ErrorCode.JOURNAL_FULL)
    write_run = None
    if ev.kind is EntryKind.CALL and ev.unsafe and run.escalate_to is None:
        # Decided before the side effect: an unknown outcome must have someone to ask.
        if snap.fallback_human is None:
            raise Invalid("an unsafe_to_repeat call needs a human to settle an unknown "
                          "outcome: pass escalate_to=... to hub.run()")
        run.escalate_to = snap.fallback_human
        run.updated_at = now
        write_run = run
    entry = Entry(tenant=run.tenant, run_id=run.run_id, position=ev.position, kind=ev.kind,
                  name=ev.name, args_hash=ev.args_hash, args=ev.args, unsafe=ev.unsafe,
                  status=EntryStatus.RUNNING, exec_id=ev.exec_id, started_at=now, to=ev.to)
    if ev.kind is EntryKind.INTERRUPT:
        entry.op_id = derive_op_id(run.secret, entry.call_id)
        return Step(Outcome.ASK, write_run=write_run, write_entry=entry, op_id=entry.op_id,
                    ask=AskInterrupt(run, entry))
    return Step(Outcome.RUN, write_run=write_run, write_entry=entry)


def _describe(kind: EntryKind, name: str, args_hash: str) -> str:
    if kind is EntryKind.INTERRUPT:
        return f"an interrupt (payload hash {args_hash[:12]})"
    return f"{name}(args hash {args_hash[:12]})"


def _diverged(ev: CallReached, run: Run, entry: Entry, now: float) -> Step:
    msg = (f"replay diverged at call #{ev.position} ({entry.call_id}): the journal has "
           f"{_describe(entry.kind, entry.name, entry.args_hash)}, but the code now makes "
           f"{_describe(ev.kind, ev.name, ev.args_hash)}")
    _set_run(run, RunStatus.NEEDS_ATTENTION, now, msg)
    return Step(Outcome.DIVERGED, write_run=run, message=msg,
                extra={"journal": {"name": entry.name, "args_hash": entry.args_hash,
                                   "kind": entry.kind.value},
                       "code": {"name": ev.name, "args_hash": ev.args_hash,
                                "kind": ev.kind.value}})


def _rerun(ev: CallReached, entry: Entry, now: float) -> Step:
    _move(entry, EntryStatus.RUNNING)
    entry.exec_id = ev.exec_id
    entry.attempts += 1
    entry.started_at = now
    entry.finished_at = None
    entry.error = None
    return Step(Outcome.RUN, write_entry=entry)


def _unknown_message(run: Run, entry: Entry) -> str:
    return (f"call #{entry.position} {entry.name} ({entry.call_id}) was in flight when the run "
            f"stopped and is marked unsafe_to_repeat, so it was not sent again; "
            f"{run.escalate_to} decides in the inbox whether it happened")


def _unknown(run: Run, entry: Entry, now: float) -> Step:
    _move(entry, EntryStatus.UNKNOWN)
    entry.settle_round += 1
    entry.op_id = derive_op_id(run.secret, f"{entry.call_id}/settle/{entry.settle_round}")
    entry.finished_at = now
    msg = _unknown_message(run, entry)
    _set_run(run, RunStatus.NEEDS_ATTENTION, now, msg)
    return Step(Outcome.UNKNOWN, write_run=run, write_entry=entry, op_id=entry.op_id,
                message=msg, ask=AskSettlement(run, entry))


def parse_settlement(value: Any) -> tuple[Settlement, Any] | None:
    """A human's answer to a settlement request: a choice string, or
    ``{"decision": <choice>, "result": <JSON text or any JSON>}`` (the inbox form)."""
    result: Any = None
    decision = value
    if isinstance(value, dict):
        decision = value.get("decision")
        raw = value.get("result")
        if isinstance(raw, str):
            text = raw.strip()
            if text:
                try:
                    result = orjson.loads(text)
                except orjson.JSONDecodeError:
                    result = text
        else:
            result = raw
    if not isinstance(decision, str):
        return None
    try:
        return Settlement(decision.strip().lower()), result
    except ValueError:
        return None


def _settled(ev: CallReached, run: Run, entry: Entry, req: SettlementRequest | None,
             now: float) -> Step:
    parsed = parse_settlement(req.value) if req is not None and req.status == "answered" \
        else None
    if req is None or req.status == "pending":
        # Not settled yet (or the request was never opened: the hub died first): ask again,
        # idempotently, by the same op_id.
        msg = _unknown_message(run, entry)
        _set_run(run, RunStatus.NEEDS_ATTENTION, now, msg)
        return Step(Outcome.UNKNOWN, write_run=run, op_id=entry.op_id, message=msg,
                    ask=AskSettlement(run, entry))
    if parsed is None:
        # Expired, cancelled, declined or unreadable: still unknown. Ask again, new op_id.
        return _unknown(run, entry, now)
    decision, result = parsed
    entry.decided_by = req.actor
    entry.finished_at = now
    if decision is Settlement.HAPPENED:
        _move(entry, EntryStatus.DONE)
        entry.result = result
        return Step(Outcome.DONE, write_entry=entry, result=result)
    if decision is Settlement.RETRY:
        step = _rerun(ev, entry, now)
        entry.decided_by = req.actor
        return step
    _move(entry, EntryStatus.FAILED)
    reason = (f"{req.actor or 'a human'} chose to fail the run at call #{entry.position} "
              f"{entry.name} ({entry.call_id})")
    entry.error = {"type": "Settled", "message": reason}
    _set_run(run, RunStatus.FAILED, now, reason)
    step = _not_active(run)
    step.write_run = run
    step.write_entry = entry
    return step


def _finished(ev: CallFinished, run: Run, entry: Entry | None, now: float) -> Step:
    if entry is None or entry.kind is not EntryKind.CALL:
        raise Invalid(f"no journaled call at position {ev.position}")
    if entry.exec_id != ev.exec_id:
        return _not_active(run, ev.exec_id)
    if entry.status is EntryStatus.RUNNING:
        # A fact from the process that ran the function: recorded even if another
        # execution has taken the run over meanwhile (it has not reached this call yet).
        _move(entry, EntryStatus.DONE if ev.ok else EntryStatus.FAILED)
        entry.result = ev.result if ev.ok else None
        entry.error = None if ev.ok else ev.error
        entry.finished_at = now
        return Step(Outcome.RECORDED, write_entry=entry)
    if entry.status in (EntryStatus.DONE, EntryStatus.FAILED):
        return Step(Outcome.RECORDED)  # the same frame, re-sent after a reconnect
    return _not_active(run, ev.exec_id)


def _resolved(ev: InterruptResolved, run: Run, entry: Entry | None, now: float) -> Step:
    if entry is None or entry.kind is not EntryKind.INTERRUPT:
        raise Invalid(f"no journaled interrupt at position {ev.position}")
    if entry.status is EntryStatus.RUNNING:
        _move(entry, EntryStatus.DONE)
        entry.result = ev.request
        entry.decided_by = ev.request.get("actor")
        entry.finished_at = now
        return Step(Outcome.RECORDED, write_entry=entry, result=ev.request)
    return Step(Outcome.RECORDED, result=entry.result)  # the first resolution stays


def _ended(ev: RunEnded, run: Run, journal_length: int, now: float) -> Step:
    if run.exec_id != ev.exec_id or run.status is not RunStatus.ACTIVE:
        return _not_active(run, ev.exec_id)
    if ev.ok and ev.calls is not None and ev.calls < journal_length:
        msg = (f"replay diverged: the code finished after {ev.calls} calls, but the journal "
               f"has {journal_length} (call #{ev.calls} onwards were never made again)")
        _set_run(run, RunStatus.NEEDS_ATTENTION, now, msg)
        return Step(Outcome.DIVERGED, write_run=run, run=run, message=msg)
    _set_run(run, RunStatus.COMPLETED if ev.ok else RunStatus.FAILED, now,
             None if ev.ok else (ev.error or "failed"))
    return Step(Outcome.RECORDED, write_run=run, run=run)


# ---------------------------------------------------------------------------- inbox text


def _json_block(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return "```json\n" + text + "\n```"


def interrupt_question(payload: Any, kind_approval: bool) -> str:
    """The Markdown an interrupt shows in the inbox (deterministic: re-asked on replay)."""
    if isinstance(payload, str):
        return payload
    head = "Approve?" if kind_approval else "Please answer:"
    return head + "\n\n" + _json_block(payload)


def interrupt_context(run: Run, entry: Entry, payload: Any) -> dict[str, Any]:
    return {"run_id": run.run_id, "call_id": entry.call_id, "payload": payload}


def settlement_question(run: Run, entry: Entry) -> str:
    lines = [
        f"**Did this call happen?** Run `{run.run_id}` stopped while `{entry.name}` was in "
        f"flight (call `{entry.call_id}`). It is marked unsafe to repeat, so the hub did not "
        "send it again.",
        "",
        "- **it happened**: the run goes on as if it returned (give its result as JSON if "
        "the run needs it);",
        "- **retry it**: the run calls it again;",
        "- **fail the run**: the run stops as failed.",
    ]
    if entry.args is not None:
        lines += ["", "Arguments:", "", _json_block(entry.args)]
    return "\n".join(lines)


def settlement_context(run: Run, entry: Entry) -> dict[str, Any]:
    return {"run_id": run.run_id, "call_id": entry.call_id, "call": entry.name,
            "args": entry.args, "started_at": entry.started_at, "version": run.version}


SETTLEMENT_CHOICES: tuple[str, ...] = tuple(s.value for s in Settlement)

#: The inbox renders this as a form: the decision, and the result when it happened.
SETTLEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"title": "What happened?", "enum": list(SETTLEMENT_CHOICES)},
        "result": {"type": "string", "format": "textarea",
                   "title": "Its result, as JSON (only if it happened; optional)"},
    },
    "required": ["decision"],
}
