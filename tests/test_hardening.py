"""Issue 15, hub side: each defect of the outside review, over real sockets in the test's loop
(tests/inproc.py). Every test here failed before its fix."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_util import until
from inproc import serve
from test_hub_sockets import Raw, ask_frame

from client_sdk import Hub
from hub.clock import FakeClock
from hub.core import AskReceived, Insert, RoomCore
from hub.errors import Unauthorized
from hub.protocol import MAX_JSON_DEPTH, Ask, OpId
from hub.service import HubService
from hub.store import Role
from hub.store.sqlite import SQLiteStore

# ---------------------------------------------------------------------------- 1. push keys


async def test_tenant_names_with_separators_never_share_a_push(tmp_path: Path) -> None:
    async with serve(tmp_path) as run:
        store = run.hub.store
        acme_xy = await store.create_token("acme", Role.HUMAN, "x:y")
        await store.create_token("acme:x", Role.HUMAN, "y")
        other_agent = await store.create_token("acme:x", Role.AGENT, "bot")
        acme_agent = await store.create_token("acme", Role.AGENT, "bot")
        victim = await Raw.open(run, acme_xy)
        spy = await Raw.open(run, acme_agent)
        asker = await Raw.open(run, other_agent)
        # The spy in tenant acme watches op_id "x:OPC"; the other tenant asks "OPC" of "y".
        w = await spy.call({"type": "wait", "op_id": "x:OPC", "wait": 5})
        assert w["type"] == "error" and w["code"] == "not_found"
        await spy.send(ask_frame("x:OPC", to="x:y", conv="c"))
        frame = await asker.call(ask_frame("OPC", to="y", conv="c", context={"secret": 1}))
        assert frame["type"] == "ok"
        # acme's x:y gets acme's own question only, never acme:x's.
        seen = []
        while True:
            f = await victim.recv()
            if f["type"] == "inbox.add":
                seen.append(f["request"]["op_id"])
                break
        assert seen == ["x:OPC"]
        with pytest.raises(asyncio.TimeoutError):
            while True:
                f = await victim.recv(0.3)
                assert f["type"] != "inbox.add" or f["request"]["op_id"] != "OPC", f
        for raw in (victim, spy, asker):
            await raw.ws.close()


@pytest.mark.parametrize("field,value", [
    ("op_id", "a b"), ("op_id", "a\nb"), ("op_id", "x" * 201), ("op_id", "a/b"),
    ("conversation", "c\x00"), ("to", "me\r\nforged"), ("op_id", ""),
])
async def test_names_are_validated(tmp_path: Path, field: str, value: str) -> None:
    async with serve(tmp_path) as run:
        agent = await Raw.open(run, run.agent)
        frame = ask_frame("ok-op")
        frame[field] = value
        reply = await agent.call(frame)
        assert reply["type"] == "error" and reply["code"] == "invalid", reply
        assert field in reply["message"] and reply.get("param") == field
        await agent.ws.close()


# ---------------------------------------------------------------------------- 2. nesting


def deep_json(depth: int) -> str:
    """JSON text nested ``depth`` arrays deep (orjson itself cannot write more than 254)."""
    return "[" * depth + '"x"' + "]" * depth


async def test_deep_context_is_refused_and_answered(tmp_path: Path) -> None:
    async with serve(tmp_path) as run:
        agent = await Raw.open(run, run.agent)
        for i, depth in enumerate((MAX_JSON_DEPTH + 1, 251, 252, 600, 1000)):
            fid = 100 + i
            text = orjson.dumps(ask_frame(f"deep-{depth}", context="@@", id=fid)).decode()
            await agent.ws.send(text.replace('"@@"', deep_json(depth)))
            reply = await agent.reply(fid)
            assert reply["type"] == "error" and reply["code"] == "invalid", (depth, reply)
            assert "nested deeper" in reply["message"]
        ok = await agent.call(ask_frame("shallow", context=orjson.loads(
            deep_json(MAX_JSON_DEPTH - 2))))
        assert ok["type"] == "ok"
        await agent.ws.close()


async def test_one_damaged_row_never_breaks_a_listing(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human) as human:
        await agent.ask("me", "A good question", conversation="c", wait=0)
        # A row written before the nesting bound existed: orjson decodes it, but cannot
        # encode it back into a reply.
        core = RoomCore("default", "c")
        d = core.handle(AskReceived(Ask(0, OpId("poison"), "me", "Poison", "c",
                                        context="@@"), "default", "agent:bot"),
                        run.hub.clock.now())
        assert isinstance(d.ops[0], Insert)
        await run.hub.store.apply(d.ops)
        db = sqlite3.connect(tmp_path / "hub.db", timeout=30)
        db.execute("UPDATE requests SET payload = replace(payload, '\"@@\"', ?) "
                   "WHERE op_id = 'poison'", (deep_json(300),))
        db.commit()
        db.close()
        items = await human.inbox()
        assert sorted(i.question for i in items) == [
            "(this request cannot be shown: its data is damaged)", "A good question"]


# ---------------------------------------------------------------------------- 5. numbers


@pytest.mark.parametrize("field,value", [("wait", 1e308), ("expires_in", 1e308),
                                         ("wait", 601), ("expires_in", 31 * 86400),
                                         ("wait", -1), ("expires_in", 0)])
async def test_wait_and_expiry_are_bounded(tmp_path: Path, field: str, value: float) -> None:
    async with serve(tmp_path) as run:
        agent = await Raw.open(run, run.agent)
        reply = await agent.call(ask_frame("op1", **{field: value}))
        assert reply["type"] == "error" and reply["code"] == "invalid", reply
        assert reply["param"] == field
        w = await agent.call({"type": "wait", "op_id": "op1", "wait": 1e308})
        assert w["type"] == "error" and w["code"] == "invalid"
        await agent.ws.close()


# ---------------------------------------------------------------------------- 7. rate limit


async def test_binary_frames_spend_the_rate_limit(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock, rate=10.0, burst=20.0) as run:
        agent = await Raw.open(run, run.agent)
        for _ in range(100):
            await agent.ws.send(b"\x00\x01")
        codes = [(await agent.recv())["code"] for _ in range(100)]
        assert codes.count("binary_frame") == 20 and codes.count("rate_limited") == 80
        # A text frame after the flood is limited too, with a hint of how long to pause.
        reply = await agent.call({"type": "ping"})
        assert reply["code"] == "rate_limited" and 0 < reply["retry_after"] <= 0.1
        clock.advance(1.0)
        assert (await agent.call({"type": "ping"}))["type"] == "ok"
        await agent.ws.close()


# ---------------------------------------------------------------------------- 9. caps


async def test_pending_cap_is_exact_with_asks_in_flight(tmp_path: Path) -> None:
    async with serve(tmp_path, max_pending_per_tenant=5) as run:
        agent = await Raw.open(run, run.agent)
        # 40 asks in one burst, over several rooms: all are admitted before any commits.
        ids = [await agent.send(ask_frame(f"op{i}", conv=f"c{i % 4}", wait=0))
               for i in range(40)]
        by_id: dict[int, dict[str, Any]] = {}
        while len(by_id) < len(ids):
            f = await agent.recv()
            if f.get("id") in ids:
                by_id[f["id"]] = f
        replies = list(by_id.values())
        ok = [r for r in replies if r["type"] == "ok"]
        assert len(ok) == 5, [r.get("code") for r in replies]
        assert {r["code"] for r in replies if r["type"] == "error"} == {"too_many_pending"}
        assert (await run.hub.store.pending_usage("default"))[0] == 5
        # Re-attaching to an admitted one is no new request: still allowed at the cap.
        again = await agent.call(ask_frame(ok[0]["request"]["op_id"],
                                           conv=ok[0]["request"]["conversation"], wait=0))
        assert again["type"] == "ok" and again.get("attached")
        await agent.ws.close()


async def test_pending_bytes_cap(tmp_path: Path) -> None:
    async with serve(tmp_path, max_pending_bytes_per_tenant=50_000) as run, \
            Hub(run.url, run.agent) as agent, Hub(run.url, run.human) as human:
        raw = await Raw.open(run, run.agent)
        big = {"blob": "x" * 20_000}
        assert (await raw.call(ask_frame("b1", context=big, wait=0)))["type"] == "ok"
        assert (await raw.call(ask_frame("b2", context=big, wait=0)))["type"] == "ok"
        third = await raw.call(ask_frame("b3", context=big, wait=0))
        assert third["type"] == "error" and third["code"] == "too_many_pending"
        assert "bytes" in third["message"]
        await human.respond("b1", "done")  # resolving frees its bytes
        assert (await raw.call(ask_frame("b3", context=big, wait=0)))["type"] == "ok"
        await raw.ws.close()
        del agent


# ---------------------------------------------------------------------------- 10. no oracle


class CountingStore:
    """A SQLite store that counts ``get_request`` calls: a wrapper, not a subclass, since the
    native build compiles SQLiteStore (hub/_native.py) and Python may not subclass it."""

    def __init__(self, path: Path) -> None:
        self._store = SQLiteStore(path)
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_request(self, tenant: str, op_id: str) -> Any:
        self.reads += 1
        return await self._store.get_request(tenant, op_id)


async def test_someone_elses_request_looks_like_a_missing_one(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "hub.db")
    async with serve(tmp_path, store=store) as run, Hub(run.url, run.agent) as agent, \
            Hub(run.url, run.human2) as other:
        await agent.ask("me", "For me only", conversation="c", op_id="mine", wait=0)
        raw = await Raw.open(run, run.human2)
        replies = []
        reads = []
        for op_id in ("mine", "missing"):
            before = store.reads
            replies.append(await raw.call({"type": "respond", "op_id": op_id, "value": "x"}))
            reads.append(store.reads - before)
        strip = [{k: v for k, v in r.items() if k != "id"} for r in replies]
        assert strip[0] == strip[1] and strip[0]["code"] == "not_found"
        assert reads == [1, 1]  # the same work on both paths: no timing oracle either
        await raw.ws.close()
        del other


# ---------------------------------------------------------------------------- 4. revocation


async def test_revocation_ends_blocked_in_process_waits(tmp_path: Path) -> None:
    async with serve(tmp_path) as run:
        hub = run.hub
        who = await hub.store.principal(run.agent, hub.clock.now())
        assert who is not None
        task = asyncio.create_task(hub.ask_and_wait(who, Ask(0, OpId("lp"), "me", "Q?", "c",
                                                             wait=30)))
        await until(lambda: who.token_hash in hub._blocked)
        assert await hub.store.revoke_token(run.agent, hub.clock.now())
        with pytest.raises(Unauthorized):
            await asyncio.wait_for(task, 5)


def test_frames_are_built_once_per_kind() -> None:
    """Pushes and replies come from the protocol's builders (issue 10: one edge)."""
    from hub.protocol import inbox_add_frame, ok_frame, resolved_frame

    view = {"op_id": "o"}
    assert resolved_frame(view) == {"type": "resolved", "request": view}
    assert inbox_add_frame(view)["type"] == "inbox.add"
    assert orjson.loads(orjson.dumps(ok_frame(3, now=1.0))) == {"type": "ok", "id": 3, "now": 1.0}




async def test_revocation_watcher_runs_on_the_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock) as run:
        agent = await Raw.open(run, run.agent)
        assert await run.hub.store.revoke_token(run.agent, clock.now())
        # Nothing happens until the hub's clock moves: no real time is involved.
        assert (await agent.call({"type": "ping"}))["type"] == "ok"
        clock.advance(HubService.REVOCATION_POLL)
        await asyncio.wait_for(agent.ws.wait_closed(), 5)
        assert agent.ws.close_code == 4001


async def test_expired_tokens_lose_their_sockets_and_waits(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock) as run:
        hub = run.hub
        short = await hub.store.create_token("default", Role.AGENT, "brief",
                                             expires_at=clock.now() + 60)
        agent = await Raw.open(run, short)
        who = await hub.store.principal(short, clock.now())
        assert who is not None and who.expires_at == clock.now() + 60
        poll = asyncio.create_task(hub.ask_and_wait(who, Ask(0, OpId("lp2"), "me", "Q?", "c",
                                                             wait=600)))
        await until(lambda: who.token_hash in hub._blocked)
        assert (await agent.call({"type": "ping"}))["type"] == "ok"
        clock.advance(59)
        assert (await agent.call({"type": "ping"}))["type"] == "ok"  # not yet
        clock.advance(1)
        await asyncio.wait_for(agent.ws.wait_closed(), 5)
        assert agent.ws.close_code == 4001
        with pytest.raises(Unauthorized):
            await asyncio.wait_for(poll, 5)


def test_memory_is_given_back_after_drops_at_most_once_per_interval() -> None:
    from hub.memory import Reclaimer

    clock = FakeClock()
    r = Reclaimer(clock, min_interval=10)
    calls: list[int] = []
    r._trim = calls.append  # the real one is glibc's malloc_trim
    r.freed(0)
    assert calls == []  # nothing dropped: nothing to give back
    r.freed(5)
    r.freed(5)
    assert calls == [0]
    clock.advance(10)
    r.freed(1)
    assert calls == [0, 0] and r.trims == 2


def test_the_write_ahead_log_is_cut_back_after_checkpoints(tmp_path: Path) -> None:
    from hub.store.sqlite import WAL_SIZE_LIMIT, connect_sync

    conn = connect_sync(tmp_path / "w.db")
    try:
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_SIZE_LIMIT
    finally:
        conn.close()


def test_the_writer_keeps_its_temporary_tables_in_memory(tmp_path: Path) -> None:
    """A bulk resolution (``UPDATE ... FROM`` a list of values) fills a temporary table;
    on a connection with the default ``temp_store`` SQLite creates, writes and unlinks a
    file for it in most commits (issue 12, tenth pass: ~10 % of the writer's CPU)."""
    from hub.store.sqlite import connect_sync

    conn = connect_sync(tmp_path / "t.db")
    try:
        assert conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    finally:
        conn.close()


async def test_a_flooded_room_is_refused_by_rate_and_the_others_are_not(tmp_path: Path) -> None:
    """Per-room admission (issue 12): a room admits ``room_ask_rate`` asks a second (bursts
    of ``room_ask_burst``); beyond it the flooder hears ``overloaded`` (never retried by
    itself), never a silent drop, and every other room goes on as before."""
    clock = FakeClock()
    async with serve(tmp_path, clock=clock, room_ask_rate=10.0, room_ask_burst=10) as run:
        agent = await Raw.open(run, run.agent)
        ids = [await agent.send(ask_frame(f"hot-{i}", conv="hot", wait=0)) for i in range(15)]
        by_id: dict[int, dict[str, Any]] = {}
        while len(by_id) < len(ids):
            f = await agent.recv()
            if f.get("id") in ids:
                by_id[f["id"]] = f
        kinds = [by_id[i]["type"] if by_id[i]["type"] == "ok" else by_id[i]["code"] for i in ids]
        assert kinds == ["ok"] * 10 + ["overloaded"] * 5
        assert all(by_id[i]["retryable"] is False for i in ids[10:])
        calm = await agent.call(ask_frame("calm-1", conv="calm", wait=0))
        assert calm["type"] == "ok"
        clock.advance(1.0)  # the hot room's bucket refills
        assert (await agent.call(ask_frame("hot-again", conv="hot", wait=0)))["type"] == "ok"
        await agent.ws.close()


async def test_a_socket_whose_frames_are_refused_is_read_later_and_loses_none(
        tmp_path: Path) -> None:
    """Backpressure (issue 12): after FAIR_FRAMES refusals in a row a socket is not read for
    REFUSED_PAUSE (hub clock), so a flood costs the others nothing; every frame it sent is
    still answered, once, when it is read."""
    from hub.server.ws import FAIR_FRAMES, REFUSED_PAUSE

    clock = FakeClock()
    async with serve(tmp_path, clock=clock, room_ask_rate=10.0, room_ask_burst=10) as run:
        flooder = await Raw.open(run, run.agent)
        other = await Raw.open(run, run.human)
        ids = [await flooder.send(ask_frame(f"hot-{i}", conv="hot", wait=0)) for i in range(30)]
        # 10 admitted, FAIR_FRAMES refused; the socket rests (on the hub clock) before it
        # reads more, so the rest wait unread. (Each reply is sent after the session went
        # to rest, so once these arrived, the rest is already in place.)
        got = [await flooder.recv(timeout=10) for _ in range(10 + FAIR_FRAMES)]
        with pytest.raises(TimeoutError):  # nothing more: a slow machine cannot fake this
            await flooder.recv(timeout=0.2)
        assert (await other.call({"type": "ping"}))["type"] == "ok"  # the others go on
        while len(got) < len(ids):
            clock.advance(REFUSED_PAUSE)  # one rest over: the next FAIR_FRAMES are read
            for _ in range(min(FAIR_FRAMES, len(ids) - len(got))):
                got.append(await flooder.recv(timeout=10))
        by_id = {f["id"]: f for f in got}
        assert sorted(by_id) == ids and len(got) == len(ids)  # every frame answered once
        assert [by_id[i]["type"] for i in ids[:10]] == ["ok"] * 10
        assert all(by_id[i]["code"] == "overloaded" and by_id[i]["retryable"] is False
                   for i in ids[10:])
        await flooder.ws.close()
        await other.ws.close()
