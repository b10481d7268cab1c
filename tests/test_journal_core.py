"""The journal core (hub/journal.py) with no event loop and no store. How a store applies
its steps (per tenant, compare-and-set, fencing, purge) is in tests/test_store_contract.py."""

from __future__ import annotations

import pytest

from hub import journal as j
from hub.errors import Invalid, LimitExceeded, NotFound
from hub.journal import (
    AskInterrupt,
    AskSettlement,
    CallFinished,
    CallReached,
    EntryKind,
    EntryStatus,
    IllegalTransition,
    InterruptResolved,
    RunEnded,
    RunStarted,
    SettlementRequest,
    Snapshot,
)
from hub.protocol import Outcome, RunStatus

NOW = 1_700_000_000.0
SECRET = "00" * 16


def start(run: j.Run | None = None, *, version: str = "1", exec_id: str = "e1",
          escalate_to: str | None = None) -> j.Step:
    return j.handle(RunStarted("t", "r", "conv", version, "agent:bot", exec_id, SECRET,
                               escalate_to), Snapshot(run), NOW)


def new_run(**kw: object) -> j.Run:
    step = start(**kw)  # type: ignore[arg-type]
    assert step.outcome is Outcome.STARTED and step.write_run is not None
    return step.write_run


def reach(run: j.Run, pos: int = 0, *, entry: j.Entry | None = None, exec_id: str = "e1",
          name: str = "read_issue", h: str = "h0", unsafe: bool = False, later: bool = False,
          settlement: SettlementRequest | None = None, fallback: str | None = None,
          kind: EntryKind = EntryKind.CALL, max_entries: int = 10_000) -> j.Step:
    ev = CallReached("r", exec_id, pos, kind, name, h, unsafe, args=[42], to="takeru")
    return j.handle(ev, Snapshot(run, entry, later, settlement, fallback, max_entries), NOW + 1)


def finish(run: j.Run, entry: j.Entry, *, ok: bool = True, result: object = None,
           exec_id: str = "e1") -> j.Step:
    return j.handle(CallFinished("r", exec_id, entry.position, ok, result,
                                 None if ok else {"type": "E", "message": "boom"}),
                    Snapshot(run, entry), NOW + 2)


def ran(run: j.Run, pos: int = 0, **kw: object) -> j.Entry:
    step = reach(run, pos, **kw)  # type: ignore[arg-type]
    assert step.outcome is Outcome.RUN and step.write_entry is not None
    return step.write_entry


# ---------------------------------------------------------------------------- the table


def test_every_state_has_a_row_and_terminal_states_have_none() -> None:
    assert set(j.TRANSITIONS[RunStatus]) == set(RunStatus)
    assert set(j.TRANSITIONS[EntryStatus]) == set(EntryStatus)
    assert not j.TRANSITIONS[RunStatus][RunStatus.COMPLETED]
    assert not j.TRANSITIONS[EntryStatus][EntryStatus.DONE]


def test_an_illegal_transition_raises() -> None:
    run = new_run()
    run.status = RunStatus.COMPLETED
    with pytest.raises(IllegalTransition):
        j._move(run, RunStatus.ACTIVE)


# ---------------------------------------------------------------------------- runs


def test_a_new_run_is_active_and_resuming_takes_it_over() -> None:
    run = new_run()
    assert run.status is RunStatus.ACTIVE and run.exec_id == "e1" and run.tenant == "t"
    step = start(run, exec_id="e2")
    assert step.outcome is Outcome.STARTED and run.exec_id == "e2"


def test_another_version_needs_attention_with_the_issue_message() -> None:
    run = new_run(version="A")
    step = start(run, version="B", exec_id="e2")
    assert step.outcome is Outcome.VERSION_CHANGED
    assert step.message == ("the run was interrupted and can't resume, because its code "
                            "version changed from A to B since it started")
    assert run.status is RunStatus.NEEDS_ATTENTION and run.reason == step.message
    assert run.exec_id == "e1"  # not taken over
    # The old code can still resume it.
    assert start(run, version="A", exec_id="e3").outcome is Outcome.STARTED
    assert run.status is RunStatus.ACTIVE and run.reason is None


@pytest.mark.parametrize("ok,status", [(True, RunStatus.COMPLETED), (False, RunStatus.FAILED)])
def test_ending_and_then_starting_again_is_refused(ok: bool, status: RunStatus) -> None:
    run = new_run()
    step = j.handle(RunEnded("r", "e1", ok, None if ok else "ValueError: x"), Snapshot(run),
                    NOW + 5)
    assert step.outcome is Outcome.RECORDED and run.status is status
    assert run.finished_at == NOW + 5
    again = start(run, exec_id="e2")
    assert again.outcome is Outcome.NOT_ACTIVE and status.value in again.message


def test_an_unknown_run_is_not_found() -> None:
    with pytest.raises(NotFound):
        j.handle(RunEnded("r", "e1", True), Snapshot(None), NOW)


# ---------------------------------------------------------------------------- calls


def test_first_call_is_journaled_running_then_done_then_replayed() -> None:
    run = new_run()
    entry = ran(run)
    assert entry.status is EntryStatus.RUNNING and entry.call_id == "r:0"
    step = finish(run, entry, result={"title": "x"})
    assert step.outcome is Outcome.RECORDED and entry.status is EntryStatus.DONE
    start(run, exec_id="e2")
    replay = reach(run, entry=entry, exec_id="e2")
    assert replay.outcome is Outcome.DONE and replay.result == {"title": "x"}
    assert replay.write_entry is None and replay.write_run is None


def test_the_same_execution_resending_its_frame_runs_without_a_write() -> None:
    run = new_run()
    entry = ran(run)
    step = reach(run, entry=entry)
    assert step.outcome is Outcome.RUN and step.write_entry is None


def test_a_call_in_flight_when_the_process_died_runs_again_with_the_same_call_id() -> None:
    run = new_run()
    entry = ran(run)
    start(run, exec_id="e2")
    step = reach(run, entry=entry, exec_id="e2")
    assert step.outcome is Outcome.RUN
    assert entry.attempts == 2 and entry.exec_id == "e2" and entry.call_id == "r:0"


def test_an_unsafe_call_in_flight_becomes_unknown_and_asks_a_human() -> None:
    run = new_run(escalate_to="takeru")
    entry = ran(run, unsafe=True)
    start(run, exec_id="e2")
    step = reach(run, entry=entry, exec_id="e2", unsafe=True)
    assert step.outcome is Outcome.UNKNOWN
    assert entry.status is EntryStatus.UNKNOWN and run.status is RunStatus.NEEDS_ATTENTION
    assert isinstance(step.ask, AskSettlement)
    assert step.op_id == j.derive_op_id(SECRET, "r:0/settle/1") == entry.op_id
    assert "takeru" in step.message and "read_issue" in step.message


def test_unsafe_without_anyone_to_ask_is_refused_before_the_side_effect() -> None:
    run = new_run()
    with pytest.raises(Invalid, match="escalate_to"):
        reach(run, unsafe=True)
    entry = ran(run, unsafe=True, fallback="takeru")
    assert run.escalate_to == "takeru" and entry.unsafe


def test_unknown_follows_the_settlement() -> None:
    def unknown() -> tuple[j.Run, j.Entry]:
        run = new_run(escalate_to="takeru")
        entry = ran(run, unsafe=True)
        start(run, exec_id="e2")
        reach(run, entry=entry, exec_id="e2")
        start(run, exec_id="e3")
        return run, entry

    run, entry = unknown()
    step = reach(run, entry=entry, exec_id="e3", settlement=SettlementRequest("pending", None,
                                                                               None))
    assert step.outcome is Outcome.UNKNOWN and step.op_id == entry.op_id
    assert isinstance(step.ask, AskSettlement)  # re-asked idempotently (same op_id)
    assert run.status is RunStatus.NEEDS_ATTENTION

    run, entry = unknown()
    answer = {"decision": "it happened", "result": '{"sent": true}'}
    step = reach(run, entry=entry, exec_id="e3",
                 settlement=SettlementRequest("answered", answer, "human:takeru"))
    assert step.outcome is Outcome.DONE and step.result == {"sent": True}
    assert entry.status is EntryStatus.DONE and entry.decided_by == "human:takeru"

    run, entry = unknown()
    step = reach(run, entry=entry, exec_id="e3",
                 settlement=SettlementRequest("answered", "retry it", "human:takeru"))
    assert step.outcome is Outcome.RUN and entry.status is EntryStatus.RUNNING

    run, entry = unknown()
    step = reach(run, entry=entry, exec_id="e3",
                 settlement=SettlementRequest("answered", "fail the run", "human:takeru"))
    assert step.outcome is Outcome.NOT_ACTIVE and run.status is RunStatus.FAILED
    assert entry.status is EntryStatus.FAILED and "human:takeru" in (run.reason or "")

    run, entry = unknown()
    first = entry.op_id
    step = reach(run, entry=entry, exec_id="e3",
                 settlement=SettlementRequest("expired", None, "system"))
    assert step.outcome is Outcome.UNKNOWN and entry.op_id != first
    assert entry.settle_round == 2 and isinstance(step.ask, AskSettlement)


@pytest.mark.parametrize("value,expected", [
    ("it happened", (j.Settlement.HAPPENED, None)),
    (" Retry it ", (j.Settlement.RETRY, None)),
    ({"decision": "fail the run"}, (j.Settlement.FAIL, None)),
    ({"decision": "it happened", "result": "plain text"}, (j.Settlement.HAPPENED, "plain text")),
    ({"decision": "it happened", "result": {"id": 1}}, (j.Settlement.HAPPENED, {"id": 1})),
    ({"decision": "it happened", "result": ""}, (j.Settlement.HAPPENED, None)),
    ("banana", None),
    (None, None),
])
def test_settlement_answers(value: object, expected: object) -> None:
    assert j.parse_settlement(value) == expected


def test_divergence_names_both_calls_and_needs_attention() -> None:
    run = new_run()
    entry = ran(run)
    finish(run, entry, result=1)
    start(run, exec_id="e2")
    step = reach(run, entry=entry, exec_id="e2", name="fetch_issue")
    assert step.outcome is Outcome.DIVERGED
    assert "read_issue" in step.message and "fetch_issue" in step.message
    assert run.status is RunStatus.NEEDS_ATTENTION
    step = reach(run, entry=entry, exec_id="e2", h="other")
    assert step.outcome is Outcome.NOT_ACTIVE  # the run stopped at the first divergence
    run.status = RunStatus.ACTIVE
    step = reach(run, entry=entry, exec_id="e2", h="h1")
    assert step.outcome is Outcome.DIVERGED and "args hash h0" in step.message


def test_failures_replay_as_failures_when_the_code_went_past_them() -> None:
    run = new_run(escalate_to="takeru")
    entry = ran(run)
    finish(run, entry, ok=False)
    assert entry.status is EntryStatus.FAILED
    start(run, exec_id="e2")
    step = reach(run, entry=entry, exec_id="e2", later=True)
    assert step.outcome is Outcome.FAILED and step.error == {"type": "E", "message": "boom"}
    # The last thing the run did: retried (safe) ...
    step = reach(run, entry=entry, exec_id="e2", later=False)
    assert step.outcome is Outcome.RUN and entry.status is EntryStatus.RUNNING
    # ... or settled by a human (unsafe).
    entry2 = ran(run, 1, exec_id="e2", unsafe=True)
    finish(run, entry2, ok=False, exec_id="e2")
    start(run, exec_id="e3")
    assert reach(run, 1, entry=entry2, exec_id="e3", unsafe=True).outcome is Outcome.UNKNOWN


def test_an_older_execution_is_fenced_but_its_facts_are_recorded() -> None:
    run = new_run()
    entry = ran(run)
    start(run, exec_id="e2")
    stale = reach(run, 1, exec_id="e1")
    assert stale.outcome is Outcome.NOT_ACTIVE and "another process" in stale.message
    # e1 did run entry 0: its result is a fact, kept for e2's replay.
    assert finish(run, entry, result=7, exec_id="e1").outcome is Outcome.RECORDED
    assert entry.status is EntryStatus.DONE and entry.result == 7
    assert finish(run, entry, result=7, exec_id="e1").outcome is Outcome.RECORDED  # resent


def test_the_journal_has_a_size_limit() -> None:
    run = new_run()
    with pytest.raises(LimitExceeded):
        reach(run, 5, max_entries=5)


# ---------------------------------------------------------------------------- interrupts


def test_an_interrupt_asks_by_a_derived_op_id_and_replays_its_answer() -> None:
    run = new_run()
    step = reach(run, kind=EntryKind.INTERRUPT, name="interrupt")
    entry = step.write_entry
    assert step.outcome is Outcome.ASK and isinstance(step.ask, AskInterrupt) and entry
    assert entry.op_id == j.derive_op_id(SECRET, "r:0") and entry.to == "takeru"
    # Another execution re-attaches to the same request.
    start(run, exec_id="e2")
    again = reach(run, entry=entry, exec_id="e2", kind=EntryKind.INTERRUPT, name="interrupt")
    assert again.outcome is Outcome.ASK and again.op_id == entry.op_id
    view = {"op_id": entry.op_id, "status": "answered", "value": {"approved": True},
            "actor": "human:takeru"}
    done = j.handle(InterruptResolved("r", 0, view), Snapshot(run, entry), NOW + 3)
    assert done.outcome is Outcome.RECORDED and entry.status is EntryStatus.DONE
    # The first resolution stays.
    later = j.handle(InterruptResolved("r", 0, {**view, "status": "expired"}),
                     Snapshot(run, entry), NOW + 4)
    assert later.result == view
    replay = reach(run, entry=entry, exec_id="e2", kind=EntryKind.INTERRUPT, name="interrupt")
    assert replay.outcome is Outcome.DONE and replay.result == view


def test_op_ids_are_stable_128_bit_and_secret_dependent() -> None:
    a = j.derive_op_id(SECRET, "r:1")
    assert a == j.derive_op_id(SECRET, "r:1") and len(a) == 32
    assert a != j.derive_op_id("11" * 16, "r:1") and a != j.derive_op_id(SECRET, "r:2")


def test_inbox_texts_show_the_call_and_its_arguments() -> None:
    run = new_run(escalate_to="takeru")
    entry = ran(run, unsafe=True)
    q = j.settlement_question(run, entry)
    assert "read_issue" in q and "r:0" in q and "42" in q
    assert j.settlement_context(run, entry)["call"] == "read_issue"
    assert set(j.SETTLEMENT_SCHEMA["properties"]["decision"]["enum"]) == \
        set(j.SETTLEMENT_CHOICES)
    assert "post_comment" in j.interrupt_question({"action": "post_comment"}, True)


def test_a_replay_that_ends_before_the_journal_does_diverges() -> None:
    run = new_run()
    snap = Snapshot(run, journal_length=3)
    step = j.handle(RunEnded("r", "e1", True, calls=2), snap, NOW)
    assert step.outcome is Outcome.DIVERGED and "finished after 2 calls" in step.message
    assert run.status is RunStatus.NEEDS_ATTENTION
    run = new_run()
    assert j.handle(RunEnded("r", "e1", True, calls=3), Snapshot(run, journal_length=3),
                    NOW).outcome is Outcome.RECORDED
