"""The core path over real sockets, with the hub served in the test's own loop (tests/inproc.py)
so a test can reach into rooms and the clock. The subprocess suite is test_e2e_core.py."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from e2e_util import until
from inproc import Running, serve
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

import client_sdk.client as client_module
from client_sdk import AccessDenied, AlreadyResolved, Conflict, Hub, Overloaded, new_op_id
from hub.clock import FakeClock
from hub.protocol import fresh_op_id
from hub.rooms import Room
from hub.store.sqlite import SQLiteStore


class Raw:
    """A raw websockets client speaking the protocol by hand."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.n = 0

    @classmethod
    async def open(cls, run: Running, token: str) -> Raw:
        ws = await connect(run.ws_url, additional_headers={"Authorization": f"Bearer {token}"},
                           compression=None)
        hello = orjson.loads(await ws.recv())
        assert hello["type"] == "hello"
        return cls(ws)

    async def send(self, frame: dict[str, Any]) -> int:
        self.n += 1
        frame.setdefault("id", self.n)
        await self.ws.send(orjson.dumps(frame).decode())
        return int(frame["id"])

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        return dict(orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout)))

    async def reply(self, fid: int, timeout: float = 5.0) -> dict[str, Any]:
        while True:
            f = await self.recv(timeout)
            if f.get("id") == fid:
                return f

    async def call(self, frame: dict[str, Any]) -> dict[str, Any]:
        return await self.reply(await self.send(frame))


def ask_frame(op_id: str, question: str = "Deploy?", conv: str = "c1", **kw: Any) -> dict[str, Any]:
    return {"type": "ask", "op_id": op_id, "to": "me", "question": question,
            "conversation": conv, **kw}


# ---------------------------------------------------------------------------- the core path


async def test_ask_answer_round_trip(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        task = asyncio.create_task(agent.ask("me", "Deploy now?", conversation="deploys",
                                             choices=["yes", "no"], wait=10))
        await until(human.inbox)
        (item,) = await human.inbox()
        assert item.question == "Deploy now?" and item.sender == "agent:bot"
        await human.respond(item.op_id, "yes")
        answer = await task
        assert (answer.status, answer.value, answer.actor) == ("answered", "yes", "human:me")
        assert answer.human_seconds is not None and answer.answered_at is not None
        assert await human.inbox() == []


async def test_wait_elapses_into_pending_then_reattaches(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        first = await agent.ask("me", "Q?", conversation="c", wait=0.2)
        assert first.status == "pending" and first.op_id
        task = asyncio.create_task(agent.wait(first.op_id, wait=10))
        await until(lambda: run.hub.gateway.members(("op", "default", first.op_id)))
        await human.respond(first.op_id, "later")
        assert (await task).value == "later"
        cancelled = await agent.ask("me", "Other?", conversation="c", wait=0)
        assert (await agent.cancel(cancelled.op_id)).status == "cancelled"
        with pytest.raises(AlreadyResolved) as info:
            await agent.cancel(cancelled.op_id)
        assert info.value.answer.status == "cancelled"


async def test_answer_before_wait_is_not_missed(tmp_path: Path) -> None:
    """The answer lands between the ask's acknowledgement and the wait (write-up 000)."""
    async with serve(tmp_path) as run, Hub(run.url, run.human) as human:
        raw = await Raw.open(run, run.agent)
        op = new_op_id()
        ack = await raw.call(ask_frame(op, wait=0))
        assert ack["type"] == "ok" and ack["request"]["status"] == "pending"
        await human.respond(op, "yes")
        # The push for the resolution reaches the socket that asked ...
        push = await raw.recv()
        assert push["type"] == "resolved" and push["request"]["value"] == "yes"
        # ... and a later wait (a re-attach) reads the resolution from the store.
        got = await raw.call({"type": "wait", "op_id": op, "wait": 5})
        assert got["request"]["status"] == "answered"
        # The same through the SDK, on a fresh connection.
        async with Hub(run.url, run.agent) as agent:
            assert (await agent.wait(op, wait=5)).value == "yes"
        await raw.ws.close()


async def test_subscribe_then_read_under_a_race(tmp_path: Path) -> None:
    """Many waits racing many answers: every waiter gets its answer, none hangs."""
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        ops = [(await agent.ask("me", f"Q{i}", conversation=f"r{i % 5}", wait=0)).op_id
               for i in range(40)]
        waits = [asyncio.create_task(agent.wait(op, wait=10)) for op in ops]
        await asyncio.gather(*(human.respond(op, f"a{i}") for i, op in enumerate(ops)))
        answers = await asyncio.gather(*waits)
        assert [a.value for a in answers] == [f"a{i}" for i in range(40)]


async def test_same_op_id_same_payload_is_one_request(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        op = new_op_id()
        a = await agent.ask("me", "Q?", conversation="c", op_id=op, wait=0)
        raw = await Raw.open(run, run.agent)
        again = await raw.call(ask_frame(op, "Q?", "c", choices=None, wait=0))
        assert again["attached"] is True and again["request"]["op_id"] == a.op_id
        items = await human.inbox()
        assert [i.op_id for i in items] == [op]
        with pytest.raises(Conflict) as info:
            await agent.ask("me", "Something else?", conversation="c", op_id=op, wait=0)
        assert info.value.request and info.value.request["question"] == "Q?"
        # The same op_id in another conversation is a different payload too.
        with pytest.raises(Conflict):
            await agent.ask("me", "Q?", conversation="elsewhere", op_id=op, wait=0)
        assert len(await human.inbox()) == 1
        await raw.ws.close()


def test_sdk_op_ids_are_128_random_bits_after_a_time_prefix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK's clock, stepped by hand: no dependence on the machine's clock or speed.
    ticks = iter(1_764_500_000.0 + k * 0.000_25 for k in range(1000))
    monkeypatch.setattr(client_module, "time", SimpleNamespace(time=lambda: next(ticks)))
    ids = [new_op_id() for _ in range(1000)]
    assert all(len(i) == 45 and int(i, 16) >= 0 for i in ids)
    assert len({i[13:] for i in ids}) == 1000  # the random part alone is unique
    # Made one after another, they sort in that order (the time prefix), so the store's
    # primary-key index takes them at its end: no page of its own per new request.
    assert ids == sorted(ids)
    assert ids[0][:13] == f"{1_764_500_000_000_000:013x}"
    assert int(ids[-1][:13], 16) == 1_764_500_000_000_000 + 999 * 250


def test_fresh_op_ids_sort_by_time_across_digit_counts() -> None:
    # Fixed width: a microsecond count with more digits still sorts after a shorter one.
    a = fresh_op_id(9.999_999, "0" * 32)
    b = fresh_op_id(10.0, "f" * 32)
    c = fresh_op_id(1_764_500_000.0, "0" * 32)
    assert a < b < c and len({len(a), len(b), len(c)}) == 1


async def test_first_answer_wins(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as tab1, Hub(run.url, run.human) as tab2:
        for round_ in range(5):
            ans = await agent.ask("me", f"Pick {round_}", conversation="c",
                                  choices=["a", "b"], wait=0)
            results = await asyncio.gather(tab1.respond(ans.op_id, "a"),
                                           tab2.respond(ans.op_id, "b"),
                                           return_exceptions=True)
            wins = [r for r in results if not isinstance(r, Exception)]
            losses = [r for r in results if isinstance(r, AlreadyResolved)]
            assert len(wins) == 1 and len(losses) == 1, results
            assert losses[0].answer.value == wins[0].value
            final = await agent.wait(ans.op_id, wait=1)
            assert final.value == wins[0].value


async def test_roles_are_enforced_and_bad_tokens_refused_before_accept(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as me, Hub(run.url, run.human2) as you:
        ans = await agent.ask("me", "Q?", conversation="c", wait=0)
        from client_sdk import NotFound

        with pytest.raises(NotFound):  # another human's request looks missing
            await you.respond(ans.op_id, "x")
        with pytest.raises(AccessDenied):  # a human cannot ask
            await me.ask("me", "Q?", conversation="c", wait=0)
        with pytest.raises(AccessDenied):  # an agent cannot answer
            await agent.respond(ans.op_id, "x")
        with pytest.raises(NotFound):  # unknown human
            await agent.ask("nobody", "Q?", conversation="c", wait=0)
        with pytest.raises(AccessDenied):
            async with Hub(run.url, "a2h_ag_not-a-token"):
                pass
        with pytest.raises(InvalidStatus) as info:  # no token at all: HTTP 403
            await connect(run.ws_url)
        assert info.value.response.status_code == 403


# ---------------------------------------------------------------------------- hibernation


async def test_room_evicted_between_ask_and_answer(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        task = asyncio.create_task(agent.ask("me", "Still there?", conversation="sleepy",
                                             wait=10))
        await until(human.inbox)
        rooms = run.hub.rooms
        assert rooms.statistics()["live_rooms"] == 1
        assert rooms.evict_idle(force=True) == 1
        assert rooms.statistics()["live_rooms"] == 0
        rebuilds = rooms.rebuilds
        # Sockets stayed connected through the eviction.
        assert len(run.hub.gateway.connections) == 2
        (item,) = await human.inbox()
        await human.respond(item.op_id, "yes")
        assert (await task).value == "yes"
        assert rooms.rebuilds == rebuilds + 1


async def test_idle_rooms_hibernate_on_their_own(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock, room_idle=30.0) as run, \
            Hub(run.url, run.agent) as agent, Hub(run.url, run.human) as human:
        task = asyncio.create_task(agent.ask("me", "Q?", conversation="idle", wait=10,
                                             expires_in=3600))
        await until(human.inbox)
        clock.advance(10)
        assert run.hub.rooms.statistics()["live_rooms"] == 1
        clock.advance(40)  # past --room-idle: the sweep drops the room
        assert run.hub.rooms.statistics()["live_rooms"] == 0
        (item,) = await human.inbox()
        await human.respond(item.op_id, "ok")
        assert (await task).value == "ok"


async def test_ten_thousand_evicted_rooms_leave_nothing_behind(tmp_path: Path) -> None:
    from hub.protocol import Ask, OpId
    from hub.store import Principal, Role

    async with serve(tmp_path) as run:
        hub = run.hub
        who = Principal("default", Role.AGENT, "bot", "x")
        gc.collect()
        before = sum(isinstance(o, Room) for o in gc.get_objects())
        futs = []
        for i in range(10_000):
            fut, reply = hub.future_reply()
            await hub.ask(who, Ask(i, OpId(f"op{i}"), "me", f"Q{i}", f"room-{i}", wait=5),
                          reply)
            futs.append(fut)
        results = await asyncio.gather(*futs)
        assert all(r.error is None for r in results)
        assert hub.rooms.statistics()["live_rooms"] == 10_000
        await until(lambda: all(not r.busy for r in hub.rooms.rooms.values()))
        assert hub.rooms.evict_idle(force=True) == 10_000
        await until(lambda: not hub.rooms._tasks)  # every room task has ended
        gc.collect()
        after = sum(isinstance(o, Room) for o in gc.get_objects())
        assert after == before == 0
        assert hub.rooms.statistics()["live_rooms"] == 0


# ---------------------------------------------------------------------------- expiry, cleanup


async def test_expiry_reaches_waiters_and_inboxes(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        events = human.inbox_events()
        task = asyncio.create_task(agent.ask("me", "Quick?", conversation="c",
                                             expires_in=0.3, wait=10))
        added = await asyncio.wait_for(events.__anext__(), 5)
        assert added["type"] == "inbox.add"
        answer = await task  # pushed by the alarm, long before the 10 s wait ends
        assert (answer.status, answer.actor) == ("expired", "system")
        removed = await asyncio.wait_for(events.__anext__(), 5)
        assert removed["type"] == "inbox.remove" and removed["request"]["status"] == "expired"
        defaulted = await agent.ask("me", "Default?", conversation="c", expires_in=0.2,
                                    default="no", wait=10)
        assert (defaulted.status, defaulted.value, defaulted.actor) == ("answered", "no", "system")
        await events.aclose()


async def test_open_request_lives_while_someone_waits(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        first = await agent.ask("me", "Q?", conversation="c", wait=0)  # deadline: +10 s
        clock.advance(8)
        again = await agent.wait(first.op_id, wait=0)  # re-attach: deadline now+0+10
        assert again.pending
        clock.advance(8)  # 16 s after the ask: alive only thanks to the re-attach
        await asyncio.sleep(0)
        assert [i.op_id for i in await human.inbox()] == [first.op_id]
        clock.advance(5)  # past now+10 of the last wait
        final = await agent.wait(first.op_id, wait=5)
        assert final.status == "expired"


async def test_retention_cleanup_leaves_an_empty_store(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock, retention=60.0) as run, \
            Hub(run.url, run.agent) as agent, Hub(run.url, run.human) as human:
        a = await agent.ask("me", "A?", conversation="done-room", wait=0)
        await human.respond(a.op_id, "x")
        b = await agent.ask("me", "B?", conversation="done-room", expires_in=5, wait=0)
        await agent.cancel(b.op_id)
        clock.advance(30)
        assert sum((await run.hub.store.counts()).values()) == 2  # within retention: kept
        clock.advance(60)
        await until(lambda: _rows(tmp_path) == 0)


def _rows(tmp_path: Path) -> int:
    conn = sqlite3.connect(tmp_path / "hub.db")
    try:
        return int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        conn.close()


# ---------------------------------------------------------------------------- overload


class GatedStore:
    """A store whose room loads for one conversation wait until the test opens a gate."""

    def __init__(self, inner: SQLiteStore, conversation: str) -> None:
        self.inner = inner
        self.conversation = conversation
        self.gate = asyncio.Event()

    async def load_room(self, tenant: str, conversation: str) -> Any:
        if conversation == self.conversation:
            await self.gate.wait()
        return await self.inner.load_room(tenant, conversation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_full_mailbox_answers_overloaded_and_others_carry_on(tmp_path: Path) -> None:
    store = GatedStore(SQLiteStore(tmp_path / "hub.db"), "hot")
    async with serve(tmp_path, store=store, room_mailbox=2) as run, \
            Hub(run.url, run.agent) as agent, Hub(run.url, run.human) as human:
        held = [asyncio.create_task(agent.ask("me", f"hot {i}", conversation="hot", wait=10))
                for i in range(2)]
        await until(lambda: run.hub.rooms.statistics()["mailbox_total"] == 2)
        with pytest.raises(Overloaded):
            await agent.ask("me", "hot 3", conversation="hot", wait=10)
        assert run.hub.rooms.overloaded == 1  # the SDK did not retry by itself
        # Another room is unaffected.
        cold = asyncio.create_task(agent.ask("me", "cold", conversation="cold", wait=10))
        async def cold_item() -> Any:
            return next((i for i in await human.inbox() if i.question == "cold"), None)

        await until(cold_item)
        item = await cold_item()
        await human.respond(item.op_id, "fine")
        assert (await cold).value == "fine"
        store.gate.set()
        await until(lambda: len(_pending_questions(tmp_path)) == 3)
        for item in await human.inbox():
            await human.respond(item.op_id, "ok")
        assert {a.value for a in await asyncio.gather(*held)} == {"ok"}


def _pending_questions(tmp_path: Path) -> list[str]:
    conn = sqlite3.connect(tmp_path / "hub.db")
    try:
        return [r[0] for r in conn.execute("SELECT op_id FROM requests")]
    finally:
        conn.close()


# ---------------------------------------------------------------------------- bad input, logs


async def test_bad_input_gets_codes_and_hurts_nobody(tmp_path: Path) -> None:
    async with serve(tmp_path, max_frame=4096) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:

        async def cycle(i: int) -> None:
            t = asyncio.create_task(agent.ask("me", f"ok {i}", conversation="good", wait=10))

            async def mine() -> Any:
                return next((x for x in await human.inbox() if x.question == f"ok {i}"), None)

            await until(mine)
            item = await mine()
            await human.respond(item.op_id, "yes")
            assert (await t).value == "yes"

        raw = await Raw.open(run, run.agent)
        await cycle(0)
        cases: list[tuple[Any, str]] = [
            ("{oops", "bad_json"),
            (b"\x00\x01binary", "binary_frame"),
            ('{"type": "launch", "id": 1}', "unknown_type"),
            ('{"type": "ask", "id": 2}', "invalid"),
            ('{"type": "ask", "id": 3, "op_id": "o", "to": "me", "question": 7,'
             ' "conversation": "c"}', "invalid"),
            ('{"type": "wait", "id": 4, "op_id": "o", "wait": -1}', "invalid"),
            ('"just a string"', "invalid"),
            ('{"type": "respond", "id": 5, "op_id": "o", "value": "x"}', "forbidden"),
        ]
        for data, code in cases:
            await raw.ws.send(data)
            frame = await raw.recv()
            assert frame["type"] == "error" and frame["code"] == code, (data, frame)
            assert frame["retryable"] is False
        await cycle(1)
        big = orjson.dumps(ask_frame("big", "x" * 10_000)).decode()
        await raw.ws.send(big)
        with pytest.raises(ConnectionClosed) as info:
            await raw.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
        await cycle(2)


async def test_log_lines_carry_request_id_op_id_and_room(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="a2h")
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        ans = await agent.ask("me", "Log me", conversation="logs", wait=0)
        await human.respond(ans.op_id, "done")
        await until(lambda: sum(ans.op_id in r.getMessage() for r in caplog.records) >= 2)
    lines = [r.getMessage() for r in caplog.records if ans.op_id in r.getMessage()]
    assert any("asked" in line for line in lines) and any("answered" in line for line in lines)
    for line in lines:
        assert "rid=c" in line and f"op={ans.op_id}" in line and "room=default:logs" in line
