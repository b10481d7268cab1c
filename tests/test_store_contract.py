"""The store contract: every backend passes this suite (add a backend to BACKENDS)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from hub.core import AskReceived, Extend, Insert, Request, Resolve, RoomCore
from hub.protocol import Ask, OpId, Status
from hub.store import NewerDatabase, Role, Store
from hub.store.sqlite import SQLiteStore

BACKENDS: dict[str, Callable[[Path], Store]] = {
    "sqlite": lambda tmp: SQLiteStore(tmp / "contract.db"),
}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    return lambda: BACKENDS[request.param](tmp_path)


def new_request(op: str, conv: str = "c1", to: str = "me", now: float = 100.0,
                expires_in: float | None = 50.0) -> Request:
    room = RoomCore("t", conv)
    d = room.handle(AskReceived(Ask(1, OpId(op), to, f"Q {op}", conv, expires_in=expires_in),
                                "t", "agent:a"), now)
    req = d.ops[0].request
    assert isinstance(req, Request)
    return req


async def test_tokens_sessions_and_revocation(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        assert await store.is_empty()
        tok = await store.create_token("t", Role.HUMAN, "me")
        assert len(tok) >= 32 and not await store.is_empty()
        who = await store.principal(tok, 0)
        assert who is not None and (who.tenant, who.role, who.name) == ("t", Role.HUMAN, "me")
        assert await store.principal("a2h_hu_nope", 0) is None
        assert await store.list_humans("t") == ["me"]
        session = await store.create_session(who.token_hash, 10.0, 100.0)
        assert (await store.session_principal(session, 20.0)) == who
        assert await store.session_principal(session, 200.0) is None  # session expired
        assert await store.revoke_token(tok, 30.0)
        assert await store.principal(tok, 31.0) is None
        assert await store.session_principal(session, 31.0) is None  # revocation ends sessions
        assert who.token_hash in await store.revoked_since(29.0)
        short = await store.create_token("t", Role.AGENT, "a", expires_at=50.0)
        assert await store.principal(short, 49.0) is not None
        assert await store.principal(short, 51.0) is None
    finally:
        await store.close()


async def test_insert_is_idempotent_and_reports_the_existing_row(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        req = new_request("op1")
        assert await store.apply([Insert(req)]) == [True]
        again = await store.apply([Insert(new_request("op1", conv="other"))])
        assert isinstance(again[0], Request) and again[0].conversation == "c1"
        got = await store.get_request("t", "op1")
        assert got is not None and got.view() == req.view()
        assert await store.get_request("other-tenant", "op1") is None
    finally:
        await store.close()


async def test_resolution_is_compare_and_set(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        req = new_request("op1")
        await store.apply([Insert(req)])
        a = replace(req)
        a.status, a.value, a.actor, a.resolved_at = Status.ANSWERED, "yes", "human:me", 101.0
        b = replace(req)
        b.status, b.actor, b.resolved_at = Status.EXPIRED, "system", 102.0
        first, second = await store.apply([Resolve(a), Resolve(b)])
        assert first is True
        assert isinstance(second, Request) and second.status is Status.ANSWERED
        assert second.value == "yes"
        c = replace(req)
        c.deadline = 999.0
        (r,) = await store.apply([Extend(c)])
        assert isinstance(r, Request) and r.deadline == req.deadline  # terminal: no extension
    finally:
        await store.close()


async def test_queries_inbox_history_room_due(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        late = new_request("late", expires_in=90)
        soon = new_request("soon", expires_in=10)
        other = new_request("other", to="you", conv="c2")
        done = new_request("done", expires_in=20)
        await store.apply([Insert(late), Insert(soon), Insert(other), Insert(done)])
        done.status, done.actor, done.resolved_at, done.value = (Status.ANSWERED, "human:me",
                                                                 105.0, "ok")
        await store.apply([Resolve(done)])
        assert [r.op_id for r in await store.inbox("t", "me")] == ["soon", "late"]
        assert [r.op_id for r in await store.history("t", "me", 10)] == ["done"]
        assert sorted(r.op_id for r in await store.load_room("t", "c1")) == ["late", "soon"]
        due = await store.due(115.0, 100)
        assert [d.op_id for d in due] == ["soon"]
        assert await store.counts() == {"pending": 3, "answered": 1}
    finally:
        await store.close()


async def test_purge_removes_only_old_resolved_requests(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        keep, gone = new_request("keep"), new_request("gone")
        await store.apply([Insert(keep), Insert(gone)])
        gone.status, gone.actor, gone.resolved_at = Status.CANCELLED, "system", 110.0
        await store.apply([Resolve(gone)])
        assert await store.purge(100.0) == 0
        assert await store.purge(111.0) == 1
        assert await store.get_request("t", "gone") is None
        assert await store.get_request("t", "keep") is not None
    finally:
        await store.close()


async def test_group_commit_batches_concurrent_writers(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    try:
        reqs = [new_request(f"op{i}", conv=f"c{i}") for i in range(300)]
        results = await asyncio.gather(*(store.apply([Insert(r)]) for r in reqs))
        assert all(r == [True] for r in results)
        stats = store.statistics()
        assert stats["items"] >= 300
        assert stats["commits"] < 300  # everything queued meanwhile shared a commit
        assert (await store.counts())["pending"] == 300
    finally:
        await store.close()


async def test_committed_data_survives_reopen(make_store: Callable[[], Store]) -> None:
    store = make_store()
    await store.open()
    await store.apply([Insert(new_request("op1"))])
    await store.close()
    store = make_store()
    await store.open()
    try:
        assert await store.get_request("t", "op1") is not None
    finally:
        await store.close()


async def test_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    store = SQLiteStore(path)
    with pytest.raises(NewerDatabase, match="upgrade a2h-hub"):
        await store.open()
