"""WebSocket frames for durable runs (issue 6): the shell around ``hub.journal``.

``create_app`` registers :func:`frame_handlers` with the WebSocket endpoint. Every run
frame needs an agent token; the tenant comes from the token (invariant 9). The journal's
rules are ``hub.journal``'s; ``Store.run_step`` applies its decisions in one transaction.

Each handler checks the role, then hands the frame to a task of the socket's session
(``Session.spawn``) so that one socket can have many run frames in flight (a journal step
waits for a group commit; an interrupt waits for a human up to its ``wait``). Each task
lives for one commit or one bounded wait, a connection may have at most ``MAX_IN_FLIGHT``
of them (more is ``overloaded``, invariant 8), every failure is answered with an ``error``
frame, and the session cancels and awaits the ones left when its socket closes.

Order of effects (invariant 1): a step's journal writes commit first; only then does the
hub open an interrupt's or a settlement's request (by an op_id derived from the call_id,
so doing it again after a crash re-attaches) and reply.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Coroutine
from typing import Any

import orjson

from hub.errors import Denied, HubError, NotFound, Overloaded, RetryLater
from hub.faults import crash_point
from hub.journal import (
    DEFAULT_INTERRUPT_EXPIRY,
    SETTLEMENT_CHOICES,
    SETTLEMENT_EXPIRY,
    SETTLEMENT_SCHEMA,
    AskInterrupt,
    AskSettlement,
    CallFinished,
    CallReached,
    EntryKind,
    Event,
    InterruptResolved,
    RunEnded,
    RunStarted,
    Step,
    interrupt_context,
    interrupt_question,
    settlement_context,
    settlement_question,
)
from hub.protocol import (
    Ask,
    Conversation,
    Kind,
    OpId,
    Outcome,
    RunBegin,
    RunCall,
    RunEnd,
    RunInterrupt,
    RunList,
    RunPending,
    RunResult,
    RunStatus,
    ok_frame,
)
from hub.server.ws import FrameHandler, Session
from hub.service import listing
from hub.store import Role, StoreError

log = logging.getLogger("a2h.runs")

#: Run frames one connection may have in flight before the hub answers ``overloaded``.
MAX_IN_FLIGHT = 1024


def frame_handlers() -> dict[type, FrameHandler]:
    """Run frame type -> handler, for the WebSocket endpoint (``create_app``)."""
    return {
        RunBegin: on_begin,
        RunCall: on_call,
        RunResult: on_result,
        RunInterrupt: on_interrupt,
        RunEnd: on_end,
        RunList: on_list,
        RunPending: on_pending,
    }


# ---------------------------------------------------------------------------- plumbing


def _spawn(session: Session, fid: int, work: Coroutine[Any, Any, None]) -> None:
    if session.in_flight >= MAX_IN_FLIGHT:
        work.close()
        raise Overloaded(f"more than {MAX_IN_FLIGHT} run frames in flight on this connection")
    session.spawn(_guarded(session, fid, work))


async def _guarded(session: Session, fid: int, work: Coroutine[Any, Any, None]) -> None:
    try:
        await work
    except HubError as exc:
        session.send_error(exc, fid)
    except StoreError as exc:
        log.warning("rid=%s journal write failed: %s", session.rid(fid), exc)
        session.send_error(RetryLater("the journal could not be written; try again"), fid)
    except Exception:
        log.exception("rid=%s run frame failed", session.rid(fid))
        session.send_error(RetryLater("internal error"), fid)


def _require_agent(session: Session, what: str) -> None:
    if session.who.role is not Role.AGENT:
        raise Denied(f"a {session.who.role.value} token cannot send {what}")


async def _step(session: Session, event: Event) -> Step:
    hub = session.hub
    step = await hub.store.run_step(session.who.tenant, event, hub.clock.now(),
                                    hub.settings.max_journal_entries)
    crash_point("journal.after_commit")
    return step


def _reply(session: Session, fid: int, step: Step, **more: Any) -> None:
    out: dict[str, Any] = ok_frame(fid, outcome=step.outcome.value)
    if step.outcome in (Outcome.DONE, Outcome.RECORDED) and step.result is not None:
        out["result"] = step.result
    if step.error is not None:
        out["error"] = step.error
    if step.message:
        out["message"] = step.message
    if step.op_id is not None and step.outcome is Outcome.UNKNOWN:
        out["op_id"] = step.op_id
    if step.run is not None:
        out["run"] = step.run.view()
    out.update(step.extra)
    out.update(more)
    session.send(out)


def payload_hash(payload: Any, to: str, choices: Any, expires_in: float | None) -> str:
    """What makes an interrupt "the same" on replay."""
    blob = orjson.dumps([payload, to, choices, expires_in], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()[:32]


# ---------------------------------------------------------------------------- handlers


async def on_begin(session: Session, f: RunBegin) -> None:
    _require_agent(session, "run.begin")
    _spawn(session, f.id, _begin(session, f))


async def _begin(session: Session, f: RunBegin) -> None:
    hub = session.hub
    who = session.who
    if f.escalate_to is not None and not await hub.known_human(who.tenant, f.escalate_to):
        raise NotFound(f"no human {f.escalate_to!r} in this tenant")
    exec_id = secrets.token_hex(8)
    step = await _step(session, RunStarted(
        tenant=who.tenant, run_id=f.run_id, conversation=f.conversation, version=f.version,
        agent=who.label, exec_id=exec_id, secret=secrets.token_hex(16),
        escalate_to=f.escalate_to))
    _reply(session, f.id, step, exec=exec_id)


async def on_call(session: Session, f: RunCall) -> None:
    _require_agent(session, "run.call")
    _spawn(session, f.id, _call(session, f))


async def _call(session: Session, f: RunCall) -> None:
    step = await _step(session, CallReached(
        run_id=f.run_id, exec_id=f.exec, position=f.position, kind=EntryKind.CALL,
        name=f.name, args_hash=f.args_hash, unsafe=f.unsafe, args=f.args))
    if isinstance(step.ask, AskSettlement):
        try:
            await _ask_settlement(session, step.ask)
        except HubError as exc:
            # Still unknown (fail closed); the next replay asks again.
            log.warning("rid=%s settlement request not opened: %s", session.rid(f.id), exc)
            step.message += f" (the inbox item could not be opened: {exc.message})"
    _reply(session, f.id, step, call_id=f"{f.run_id}:{f.position}")


async def _ask_settlement(session: Session, ask: AskSettlement) -> None:
    run, entry = ask.run, ask.entry
    if run.escalate_to is None or entry.op_id is None:
        raise NotFound("no human to settle it: start the run with escalate_to=...")
    hub = session.hub
    req = Ask(id=0, op_id=OpId(entry.op_id), to=run.escalate_to,
              question=settlement_question(run, entry), conversation=Conversation(run.conversation),
              kind=Kind.QUESTION, choices=SETTLEMENT_CHOICES,
              context=settlement_context(run, entry), wait=0.0, expires_in=SETTLEMENT_EXPIRY)
    # Committed (or refused, raised) by the room; an existing request re-attaches.
    await hub.submit(session.who, req, f"settle:{entry.call_id}", schema=SETTLEMENT_SCHEMA)


async def on_result(session: Session, f: RunResult) -> None:
    _require_agent(session, "run.result")
    _spawn(session, f.id, _result(session, f))


async def _result(session: Session, f: RunResult) -> None:
    step = await _step(session, CallFinished(
        run_id=f.run_id, exec_id=f.exec, position=f.position, ok=f.ok, result=f.result,
        error=f.error))
    step.result = None  # the SDK has it
    _reply(session, f.id, step)


async def on_interrupt(session: Session, f: RunInterrupt) -> None:
    _require_agent(session, "run.interrupt")
    _spawn(session, f.id, _interrupt(session, f))


async def _interrupt(session: Session, f: RunInterrupt) -> None:
    step = await _step(session, CallReached(
        run_id=f.run_id, exec_id=f.exec, position=f.position, kind=EntryKind.INTERRUPT,
        name="interrupt", args_hash=payload_hash(f.payload, f.to, f.choices, f.expires_in),
        to=f.to))
    call_id = f"{f.run_id}:{f.position}"
    if not isinstance(step.ask, AskInterrupt):
        _reply(session, f.id, step, call_id=call_id)
        return
    run, entry = step.ask.run, step.ask.entry
    approval = f.choices is None
    ask = Ask(id=0, op_id=OpId(entry.op_id or ""), to=f.to,
              question=interrupt_question(f.payload, approval), conversation=Conversation(run.conversation),
              kind=Kind.APPROVAL if approval else Kind.QUESTION, choices=f.choices,
              context=interrupt_context(run, entry, f.payload), wait=f.wait,
              expires_in=f.expires_in or DEFAULT_INTERRUPT_EXPIRY)
    # Re-attaches when the request exists (a restarted agent or hub): same op_id, same payload.
    req, _ = await session.hub.ask_and_wait(session.who, ask, session.rid(f.id))
    if not req.terminal:
        session.send(ok_frame(f.id, outcome=Outcome.PENDING.value, call_id=call_id,
                              request=req.view()))
        return
    done = await _step(session, InterruptResolved(run_id=f.run_id, position=f.position,
                                                  request=req.view()))
    session.send(ok_frame(f.id, outcome=Outcome.DONE.value, call_id=call_id,
                          result=done.result))


async def on_end(session: Session, f: RunEnd) -> None:
    _require_agent(session, "run.end")
    _spawn(session, f.id, _end(session, f))


async def _end(session: Session, f: RunEnd) -> None:
    step = await _step(session, RunEnded(run_id=f.run_id, exec_id=f.exec, ok=f.ok,
                                         error=f.error, calls=f.calls))
    _reply(session, f.id, step)


async def on_list(session: Session, f: RunList) -> None:
    _require_agent(session, "run.list")
    _spawn(session, f.id, _list(session, f))


async def _list(session: Session, f: RunList) -> None:
    status = RunStatus(f.status) if f.status is not None else None
    runs = await session.hub.store.list_runs(session.who.tenant, status, f.limit)
    session.send(ok_frame(f.id, runs=[r.view() for r in runs]))


async def on_pending(session: Session, f: RunPending) -> None:
    _require_agent(session, "run.pending")
    _spawn(session, f.id, _pending(session, f))


async def _pending(session: Session, f: RunPending) -> None:
    who = session.who
    items = await session.hub.store.run_pending(who.tenant, who.label)
    session.send(ok_frame(f.id, items=listing(items)))
