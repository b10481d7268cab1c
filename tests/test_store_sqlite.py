"""The SQLite backend beyond the contract: the file, its migrations, its writer.

Space comes back after purges (incremental vacuum); a read-only or full database fails
writes with a retryable StoreError, corrupts nothing and recovers by itself; a crash in
the middle of a group commit loses the whole batch and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest
from inproc import serve
from test_store_contract import new_request, resolved
from websockets.asyncio.client import connect

from client_sdk import new_op_id
from hub.core import Insert, Resolve
from hub.faults import CRASH_EXIT
from hub.journal import CallReached, EntryKind, RunStarted
from hub.store import NewerDatabase, Role, StoreError, UnsupportedStore, open_store
from hub.store import sqlite as sqlite_backend
from hub.store.sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore, connect_sync

ROOT = Path(__file__).resolve().parents[1]


@contextlib.asynccontextmanager
async def sqlite_store(path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def pragma(path: Path, name: str) -> object:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def test_open_store_picks_the_backend_by_target(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path / "a.db")), SQLiteStore)
    with pytest.raises(UnsupportedStore, match="unknown store") as info:
        open_store("mysql://root:pw@localhost/db")
    assert "pw" not in str(info.value)  # never echo credentials


async def test_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    store = SQLiteStore(path)
    with pytest.raises(NewerDatabase, match="upgrade a2h-hub"):
        await store.open()


# ---------------------------------------------------------------------------- space


async def test_an_existing_database_switches_to_incremental_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for migration in MIGRATIONS[:2]:  # a database written by the hub before migration 3
        assert isinstance(migration, str)
        conn.executescript(migration)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO tenants VALUES ('t', 0)")
    conn.close()
    assert pragma(path, "auto_vacuum") == 0
    async with sqlite_store(path):
        pass
    assert pragma(path, "auto_vacuum") == 2  # incremental
    assert pragma(path, "user_version") == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM tenants").fetchall() == [("t",)]
    conn.close()


async def test_a_purge_gives_the_freed_pages_back(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_backend, "VACUUM_PAGES", 100)  # several vacuum jobs
    path = tmp_path / "space.db"
    async with sqlite_store(path) as store:
        # (enough pages that an empty schema's ~40 pages are under a tenth of them)
        reqs = [new_request(f"op{i}", question="q" * 4000) for i in range(600)]
        await store.apply([Insert(r) for r in reqs])
        await store.apply([Resolve(resolved(r)) for r in reqs])
        full = pragma(path, "page_count")
        assert isinstance(full, int) and full > 600
        assert await store.purge(1000.0) == 600
        assert pragma(path, "freelist_count") == 0
        after = pragma(path, "page_count")
        assert isinstance(after, int) and after < full / 10
        assert await store.counts() == {}


# ---------------------------------------------------------------------------- failures


async def _seed(store: SQLiteStore, n: int = 20) -> list[str]:
    reqs = [new_request(f"seed{i}", question="s" * 500) for i in range(n)]
    assert await store.apply([Insert(r) for r in reqs]) == [True] * n
    await store.run_step("t", RunStarted("t", "r", "c", "1", "agent:a", "e", "00" * 16), 1.0,
                         100)
    return [r.op_id for r in reqs]


async def _intact(store: SQLiteStore, path: Path, op_ids: list[str]) -> None:
    assert pragma(path, "integrity_check") == "ok"
    for op_id in op_ids:
        req = await store.get_request("t", op_id)
        assert req is not None and req.question == "s" * 500


def _big_writes(store: SQLiteStore) -> list[Coroutine[Any, Any, object]]:
    """Writes that need new pages: a large request, a journaled call with large args."""
    return [
        store.apply([Insert(new_request("big", question="b" * 60_000))]),
        store.run_step("t", CallReached("r", "e", 0, EntryKind.CALL, "f", "h",
                                        args="a" * 60_000), 2.0, 100),
    ]


async def _every_write_fails(writes: list[Coroutine[Any, Any, object]], why: str) -> None:
    for write in writes:
        with pytest.raises(StoreError, match=why) as info:
            await write
        assert "nothing was written; try again later" in str(info.value)


async def test_a_read_only_database_fails_writes_clearly_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    async with sqlite_store(path) as store:
        seeded = await _seed(store)
        await store.set_limits(read_only=True)
        await _every_write_fails([
            *_big_writes(store), store.create_token("t", Role.AGENT, "x"),
            store.run_step("t", RunStarted("t", "r2", "c", "1", "agent:a", "e", "00" * 16),
                           1.0, 100)], "read-only")
        assert len(await store.inbox("t", "me")) == 20  # reads go on
        await _intact(store, path, seeded)
        await store.set_limits()
        assert await store.apply([Insert(new_request("after"))]) == [True]
        assert await store.get_request("t", "after") is not None
        await _intact(store, path, seeded)


async def test_a_full_database_fails_writes_clearly_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    async with sqlite_store(path) as store:
        seeded = await _seed(store)
        size = pragma(path, "page_count")
        assert isinstance(size, int)
        await store.set_limits(max_pages=size)  # the disk is full: not one page more
        await _every_write_fails(_big_writes(store), "full")
        await _intact(store, path, seeded)
        await store.set_limits()
        assert await store.apply([Insert(new_request("big", question="b" * 60_000))]) == [True]
        await _intact(store, path, seeded)
        assert (await store.pending_usage("t"))[0] == 21
        call = await store.run_step("t", CallReached("r", "e", 0, EntryKind.CALL, "f", "h",
                                                     args="a" * 60_000), 3.0, 100)
        assert call.write_entry is not None  # the failed step had written nothing


async def test_a_full_database_fails_the_whole_batch_cleanly(tmp_path: Path) -> None:
    """A batch where one write fits and the next does not: SQLite rolls the transaction
    back, so no caller may be told its write committed."""
    path = tmp_path / "batch.db"
    async with sqlite_store(path) as store:
        seeded = await _seed(store)
        size = pragma(path, "page_count")
        assert isinstance(size, int)
        await store.set_limits(max_pages=size)
        running, gate = threading.Event(), threading.Event()

        def hold(_: sqlite3.Connection) -> None:  # keeps the writer busy while we queue
            running.set()
            gate.wait()

        blocker = store._writer.submit(hold)
        await asyncio.get_running_loop().run_in_executor(None, running.wait)
        small = store.create_token("t", Role.AGENT, "small")  # fits in the free space
        big = store.apply([Insert(new_request("big", question="b" * 60_000))])
        tasks = [asyncio.ensure_future(small), asyncio.ensure_future(big)]
        gate.set()
        await blocker
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, StoreError) and "full" in str(o) for o in outcomes), outcomes
        assert await store.list_tokens("t") == []  # the small write was rolled back too
        await _intact(store, path, seeded)
        await store.set_limits()
        assert await store.create_token("t", Role.AGENT, "small")


# ---------------------------------------------------------------------------- crash point

_MID_COMMIT = """
import asyncio, sys, threading
sys.path.insert(0, {tests!r})
from test_store_contract import new_request
from hub.core import Insert
from hub.store.sqlite import SQLiteStore

async def main():
    store = SQLiteStore({db!r})
    await store.open()
    assert await store.apply([Insert(new_request("before"))]) == [True]  # a batch of one
    running, gate = threading.Event(), threading.Event()

    def hold(_):
        running.set()
        gate.wait()

    blocker = store._writer.submit(hold)
    await asyncio.get_running_loop().run_in_executor(None, running.wait)
    batch = [asyncio.ensure_future(store.apply([Insert(new_request(f"in{{i}}"))]))
             for i in range(3)]
    gate.set()
    await blocker
    await asyncio.gather(*batch)
    print("the batch committed")

asyncio.run(main())
"""


async def test_a_crash_in_the_middle_of_a_group_commit_loses_only_that_batch(
        tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    script = _MID_COMMIT.format(tests=str(ROOT / "tests"), db=str(db))
    env = {**os.environ, "A2H_CRASH_AT": "store.mid_commit",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == CRASH_EXIT, (out, err)
    assert b"crash point store.mid_commit" in err and b"committed" not in out
    async with sqlite_store(db) as store:
        assert await store.get_request("t", "before") is not None
        assert [await store.get_request("t", f"in{i}") for i in range(3)] == [None] * 3
    assert pragma(db, "integrity_check") == "ok"


async def test_asks_and_run_frames_get_a_retryable_error_while_the_store_is_read_only(
        tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "hub.db")
    async with serve(tmp_path, store=store) as run:
        ws = await connect(run.ws_url, compression=None,
                           additional_headers={"Authorization": f"Bearer {run.agent}"})
        assert orjson.loads(await ws.recv())["type"] == "hello"

        async def send(frame: dict[str, Any]) -> dict[str, Any]:
            await ws.send(orjson.dumps(frame).decode())
            reply: dict[str, Any] = orjson.loads(await ws.recv())
            assert reply["id"] == frame["id"]
            return reply

        op_id = new_op_id()
        ask = {"type": "ask", "op_id": op_id, "to": "me", "question": "q?",
               "conversation": "c", "wait": 0}
        await store.set_limits(read_only=True)
        for frame in ({**ask, "id": 1}, {"type": "run.begin", "id": 2, "run_id": "r",
                                         "conversation": "c", "version": "1"}):
            refused = await send(frame)
            assert (refused["type"], refused["code"], refused["retryable"]) == \
                ("error", "unavailable", True)
        await store.set_limits()
        asked = await send({**ask, "id": 3})
        assert asked["type"] == "ok" and asked["request"]["status"] == "pending"
        assert (await send({"type": "run.begin", "id": 4, "run_id": "r", "conversation": "c",
                            "version": "1"}))["type"] == "ok"
        await ws.close()


async def test_a_read_is_one_trip_to_the_reader_thread(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a read (a room's rebuild, a route the cache lacks, an inbox) used to take
    three trips to its aiosqlite thread and back (the cursor's execute, fetchall, close),
    each a wake-up of that thread and then of the loop."""
    import aiosqlite

    trips = 0
    execute = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return await execute(self, fn, *args, **kwargs)

    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    try:
        req = new_request("op-1", conv="room")
        await store.apply([Insert(req)])
        monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
        assert await store.get_request("t", "op-1") == req
        assert await store.load_room("t", "room") == [req]
        assert await store.inbox("t", "me") == [req]
        assert await store.get_request("t", "nothing") is None
        assert trips == 4
    finally:
        monkeypatch.undo()
        await store.close()


def test_none_and_bytes_bind_through_the_adapter_registry(tmp_path: Path) -> None:
    """Without an adapter the sqlite3 module tries two protocols (failed attribute lookups,
    an exception message formatted and dropped) for every None and bytes it binds; the
    store registers one that passes them as they are, and they are still NULL and BLOB."""
    conn = connect_sync(tmp_path / "bind.db")
    try:
        for kind in (type(None), bytes):
            assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters
        got = conn.execute("SELECT typeof(?), typeof(?), ?", (None, b"\x00\xff", b"ab")).fetchone()
        assert got == ("null", "blob", b"ab")
    finally:
        conn.close()
