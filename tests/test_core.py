"""The sans-I/O core: no event loop, no store, no clock — events in, decisions out."""

from __future__ import annotations

import pytest

from hub import core
from hub.core import (
    AlarmSet,
    AnswerSubmitted,
    AskReceived,
    CancelRequested,
    DeadlineReached,
    Extend,
    IllegalTransition,
    InboxAdded,
    Insert,
    Replied,
    Resolve,
    Resolved,
    RoomCore,
    WaitRequested,
)
from hub.errors import AlreadyResolved, Conflict, Invalid, NotFound
from hub.protocol import Ask, Kind, OpId, Status

T0 = 1000.0


def ask(op: str = "op1", question: str = "Deploy?", **kw: object) -> AskReceived:
    fields: dict[str, object] = dict(id=1, op_id=OpId(op), to="me", question=question,
                                     conversation="c1", wait=60.0)
    fields.update(kw)
    return AskReceived(Ask(**fields), "t", "agent:bot")  # type: ignore[arg-type]


def replies(d: core.Decision) -> list[Replied]:
    return [e for e in d.after if isinstance(e, Replied)]


def test_ask_persists_then_publishes() -> None:
    room = RoomCore("t", "c1")
    d = room.handle(ask(), T0)
    assert [type(o) for o in d.ops] == [Insert]
    kinds = [type(e) for e in d.after]
    assert kinds == [Replied, InboxAdded, AlarmSet]
    req = d.ops[0].request
    assert req.status is Status.PENDING
    assert req.deadline == T0 + 60 + 10  # open-ended: wait + 10 s grace
    assert not req.fixed_deadline


def test_expires_in_fixes_the_deadline_and_waits_do_not_move_it() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(expires_in=5.0), T0)
    assert room.requests["op1"].deadline == T0 + 5
    d = room.handle(WaitRequested(OpId("op1"), 60), T0 + 1)
    assert d.ops == []
    assert room.requests["op1"].deadline == T0 + 5


def test_wait_extends_open_deadline_to_now_plus_wait_plus_grace() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(wait=5.0), T0)
    assert room.requests["op1"].deadline == T0 + 15
    d = room.handle(WaitRequested(OpId("op1"), 30), T0 + 10)
    assert [type(o) for o in d.ops] == [Extend]
    assert room.requests["op1"].deadline == T0 + 50
    assert any(isinstance(e, AlarmSet) and e.deadline == T0 + 50 for e in d.after)
    # A shorter wait never pulls the deadline in.
    d = room.handle(WaitRequested(OpId("op1"), 1), T0 + 11)
    assert d.ops == [] and room.requests["op1"].deadline == T0 + 50


def test_same_op_id_same_payload_attaches() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)
    d = room.handle(ask(wait=30.0), T0 + 1)  # wait is not part of the payload
    assert not any(isinstance(o, Insert) for o in d.ops)
    assert not any(isinstance(e, InboxAdded) for e in d.after)
    (r,) = replies(d)
    assert r.attached and r.request is room.requests["op1"]


def test_same_op_id_other_payload_conflicts() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)
    d = room.handle(ask(question="Delete prod?"), T0 + 1)
    (r,) = replies(d)
    assert isinstance(r.error, Conflict)
    assert r.error.request and r.error.request["question"] == "Deploy?"
    assert d.ops == []


def test_first_answer_wins_and_later_ones_get_the_resolution() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(choices=("yes", "no")), T0)
    d1 = room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "yes"), T0 + 2)
    assert [type(o) for o in d1.ops] == [Resolve]
    assert any(isinstance(e, Resolved) for e in d1.after)
    d2 = room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "no"), T0 + 3)
    (r,) = replies(d2)
    assert isinstance(r.error, AlreadyResolved)
    assert r.error.request and r.error.request["value"] == "yes"
    req = room.requests["op1"]
    assert (req.status, req.value, req.actor, req.human_seconds) == \
        (Status.ANSWERED, "yes", "human:me", 2.0)
    # Cancel and expiry after the fact change nothing.
    room.handle(CancelRequested(OpId("op1")), T0 + 4)
    room.handle(DeadlineReached(OpId("op1")), T0 + 999)
    assert req.status is Status.ANSWERED and req.value == "yes"


def test_another_humans_request_looks_missing() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)
    d = room.handle(AnswerSubmitted(OpId("op1"), "you", Status.ANSWERED, "x"), T0 + 1)
    (r,) = replies(d)
    assert isinstance(r.error, NotFound)
    d = room.handle(AnswerSubmitted(OpId("nope"), "me", Status.ANSWERED, "x"), T0 + 1)
    assert isinstance(replies(d)[0].error, NotFound)


def test_answer_must_be_a_choice() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(choices=("yes", "no")), T0)
    d = room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "maybe"), T0 + 1)
    assert isinstance(replies(d)[0].error, Invalid)
    assert room.requests["op1"].status is Status.PENDING


def test_deadline_expires_or_applies_default_as_system() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask("a", expires_in=5.0), T0)
    room.handle(ask("b", question="Q2", expires_in=5.0, default="no"), T0)
    assert room.handle(DeadlineReached(OpId("a")), T0 + 4).ops == []  # early alarm: ignored
    room.handle(DeadlineReached(OpId("a")), T0 + 5)
    room.handle(DeadlineReached(OpId("b")), T0 + 5)
    a, b = room.requests["a"], room.requests["b"]
    assert (a.status, a.actor, a.value) == (Status.EXPIRED, "system", None)
    assert (b.status, b.actor, b.value) == (Status.ANSWERED, "system", "no")
    assert a.human_seconds is None


def test_deadline_twice_is_harmless() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(expires_in=1.0), T0)
    d1 = room.handle(DeadlineReached(OpId("op1")), T0 + 2)
    d2 = room.handle(DeadlineReached(OpId("op1")), T0 + 3)
    assert len(d1.ops) == 1 and d2.ops == [] and d2.after == []


def test_approval_answers() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask("a", kind=Kind.APPROVAL), T0)
    room.handle(ask("b", question="Other", kind=Kind.APPROVAL), T0)
    room.handle(AnswerSubmitted(OpId("a"), "me", Status.ANSWERED, {"comment": "ok"}), T0 + 1)
    room.handle(AnswerSubmitted(OpId("b"), "me", Status.DECLINED, {"comment": "no way"}), T0 + 1)
    assert room.requests["a"].value == {"approved": True, "comment": "ok"}
    assert room.requests["b"].status is Status.DECLINED
    assert room.requests["b"].value == {"approved": False, "comment": "no way"}


def test_cancel() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)
    d = room.handle(CancelRequested(OpId("op1")), T0 + 1)
    assert room.requests["op1"].status is Status.CANCELLED
    assert any(isinstance(e, Resolved) for e in d.after)


def test_reconcile_with_foreign_op_id_conflicts() -> None:
    other = RoomCore("t", "c2")
    other.handle(AskReceived(Ask(1, OpId("op1"), "me", "Q", "c2"), "t", "agent:x"), T0)
    stored = other.requests["op1"]
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)  # the cache thinks it created op1 ...
    room.reconcile("op1", stored)  # ... the store says it lives in c2
    assert "op1" not in room.requests
    d = room.handle(ask(), T0)
    assert isinstance(replies(d)[0].error, Conflict)


def test_transition_table_rejects_illegal_moves() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(), T0)
    req = room.requests["op1"]
    core.transition(req, Status.ANSWERED)
    with pytest.raises(IllegalTransition):
        core.transition(req, Status.EXPIRED)
    with pytest.raises(IllegalTransition):
        core.transition(req, Status.PENDING)


def test_payload_hash_ignores_wait_but_not_content() -> None:
    a = Ask(1, OpId("x"), "me", "Q", "c", wait=1)
    b = Ask(2, OpId("x"), "me", "Q", "c", wait=60)
    c = Ask(1, OpId("x"), "me", "Q", "c", choices=("y",))
    assert core.payload_hash(a) == core.payload_hash(b) != core.payload_hash(c)


def test_the_same_answer_by_the_same_person_again_returns_it() -> None:
    """A retry across a lost connection (issue 15, defect 10): the answer committed, so
    sending it again returns it — one resolution, no second push."""
    room = RoomCore("t", "c1")
    room.handle(ask(choices=("yes", "no")), T0)
    room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "yes"), T0 + 2)
    again = room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "yes"), T0 + 3)
    assert again.ops == [] and not any(isinstance(e, Resolved) for e in again.after)
    (r,) = replies(again)
    assert r.error is None and r.request is not None
    assert (r.request.value, r.request.actor, r.request.resolved_at) == ("yes", "human:me", T0 + 2)
    # Another value, another status, or another person still lose.
    for ev in (AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, "no"),
               AnswerSubmitted(OpId("op1"), "me", Status.DECLINED, "yes")):
        (r,) = replies(room.handle(ev, T0 + 4))
        assert isinstance(r.error, AlreadyResolved), ev


def test_a_repeated_approval_compares_the_stored_value() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(kind=Kind.APPROVAL), T0)
    first = {"approved": True, "comment": "ok"}
    room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED, first), T0 + 1)
    # The stored value is what validate_answer made of it: extra keys do not matter.
    (r,) = replies(room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED,
                                               {"comment": "ok", "x": 1}), T0 + 2))
    assert r.error is None and r.request is not None and r.request.value == first
    (r,) = replies(room.handle(AnswerSubmitted(OpId("op1"), "me", Status.ANSWERED,
                                               {"comment": "other"}), T0 + 2))
    assert isinstance(r.error, AlreadyResolved)


def test_a_repeated_answer_to_an_expired_request_is_already_resolved() -> None:
    room = RoomCore("t", "c1")
    room.handle(ask(expires_in=5.0), T0)
    room.handle(DeadlineReached(OpId("op1")), T0 + 6)
    (r,) = replies(room.handle(AnswerSubmitted(OpId("op1"), "me", Status.EXPIRED, None), T0 + 7))
    assert isinstance(r.error, AlreadyResolved)  # actor "system": never the same person


def test_a_row_changed_elsewhere_is_adopted_but_a_resolution_never_goes_back() -> None:
    from dataclasses import replace as copy

    from hub.core import Decision, Resolve, RowChanged

    room = RoomCore("t", "c")
    d = room.handle(AskReceived(Ask(1, OpId("x"), "me", "Q", "c"), "t", "agent:a"), 10.0)
    pending = copy(d.ops[0].request)
    # Another node answered it: the room adopts the stored row, says nothing, writes nothing.
    answered = copy(pending, status=Status.ANSWERED, value="yes", actor="human:me",
                    resolved_at=11.0)
    assert room.handle(RowChanged(answered), 12.0) == Decision()
    late = room.handle(AnswerSubmitted(OpId("x"), "me", Status.ANSWERED, "no"), 13.0)
    assert isinstance(late.after[0], Replied) and late.after[0].error is not None
    # A late read of the old pending row changes nothing: terminal is final.
    room.handle(RowChanged(pending), 14.0)
    assert room.requests["x"].status is Status.ANSWERED
    assert not [op for op in late.ops if isinstance(op, Resolve)]
