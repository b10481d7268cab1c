"""The SQLite writer's short paths (hub/store/sqlite.py ``_Writer._commit``): a lone job
without a savepoint, a batch of request ops in bulk without one, and the fall back to item
by item when a compare-and-set in the batch does not match."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from e2e_util import until
from test_store_contract import MAX, begin, call, new_request

from hub.core import Insert, Resolve
from hub.journal import CallFinished
from hub.protocol import Status
from hub.store import Role, StoreError
from hub.store.sqlite import SQLiteStore


async def test_batch_with_a_lost_compare_and_set_falls_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    try:
        reqs = [new_request(f"op{i}", conv=f"c{i}") for i in range(20)]
        assert all(r == [True] for r in await asyncio.gather(
            *(store.apply([Insert(r)]) for r in reqs)))
        first = dataclasses.replace(reqs[0], status=Status.CANCELLED, actor="system",
                                    resolved_at=110.0)
        assert await store.apply([Resolve(first)]) == [True]
        # The same request resolved again (a lost compare-and-set), among good ones, all
        # queued at once so that they share commits.
        again = dataclasses.replace(reqs[0], status=Status.ANSWERED, value="x",
                                    actor="human:h", resolved_at=111.0)
        others = [dataclasses.replace(r, status=Status.ANSWERED, value="y", actor="human:h",
                                      resolved_at=112.0) for r in reqs[1:]]
        results = await asyncio.gather(store.apply([Resolve(again)]),
                                       *(store.apply([Resolve(r)]) for r in others))
        stored = results[0][0]
        assert stored is not True and stored is not None
        assert stored.status is Status.CANCELLED  # the first resolution won
        assert all(r == [True] for r in results[1:])
        for r in others:
            got = await store.get_request("t", r.op_id)
            assert got is not None and got.status is Status.ANSWERED and got.value == "y"
    finally:
        await store.close()


async def test_lone_job_failure_rolls_back_and_the_next_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    try:
        def half_then_fail(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO tenants VALUES ('half', 1.0)")
            raise ValueError("boom")

        with pytest.raises(ValueError):
            await store._write(half_then_fail)
        assert await store._read("SELECT 1 FROM tenants WHERE name='half'") == []
        with pytest.raises(StoreError):
            await store._write(lambda c: c.execute("INSERT INTO nowhere VALUES (1)"))
        assert await store.apply([Insert(new_request("after"))]) == [True]
        assert await store.get_request("t", "after") is not None
    finally:
        await store.close()


@pytest.mark.parametrize("count", [1, 3, 5, 8, 9])
def test_bulk_rows_equal_item_by_item(tmp_path: Path, count: int) -> None:
    """The bulk statements (multi-row VALUES, padded to a power of two by repeating the last
    row) store exactly what the item-by-item path stores, and a padded repeat changes
    nothing twice."""
    from test_store_contract import resolved

    from hub.core import Extend
    from hub.store.sqlite import _bulk, _fetch, apply_op, connect_sync

    reqs = [new_request(f"op{i}", conv=f"c{i % 2}", question=f"Q {i} ü") for i in range(count)]
    later = [dataclasses.replace(r, deadline=r.deadline + 30) for r in reqs]
    done = [resolved(r, Status.ANSWERED if i % 2 else Status.DECLINED, at=106.0 + i)
            for i, r in enumerate(reqs)]
    done = [dataclasses.replace(d, value={"n": i, "text": "ok"}, human_seconds=1.5 * i)
            for i, d in enumerate(done)]
    bulk_db, item_db = (connect_sync(tmp_path / "bulk.db"), connect_sync(tmp_path / "item.db"))
    try:
        ops = ([Insert(r) for r in reqs] + [Extend(r) for r in later[: count // 2 + 1]]
               + [Resolve(d) for d in done[: count - 1 or 1]])
        bulk_db.execute("BEGIN IMMEDIATE")
        before = bulk_db.total_changes
        assert _bulk(bulk_db, ops, savepoint=False)
        assert bulk_db.total_changes - before == len(ops)
        bulk_db.execute("COMMIT")
        item_db.execute("BEGIN IMMEDIATE")
        assert all(apply_op(item_db, op) is True for op in ops)
        item_db.execute("COMMIT")
        for r in reqs:
            a, b = _fetch(bulk_db, "t", r.op_id), _fetch(item_db, "t", r.op_id)
            assert a is not None and a == b
        # A lost compare-and-set in the batch: nothing of it is applied, the caller is told.
        bulk_db.execute("BEGIN IMMEDIATE")
        assert not _bulk(bulk_db, [Resolve(done[0])])
        bulk_db.execute("ROLLBACK")
    finally:
        bulk_db.close()
        item_db.close()


async def _three(store: SQLiteStore, tag: str) -> None:
    """A commit of three room writes (one queue item, so one commit)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = [3]

    def told(ok: bool, value: object) -> None:
        assert ok, value
        left[0] -= 1
        if not left[0]:
            done.set_result(None)

    store.apply_soon([([Insert(new_request(f"{tag}{i}"))], told) for i in range(3)])
    await done


async def test_commit_delay_batches_under_load_and_never_delays_the_rest(
        tmp_path: Path) -> None:
    """After a commit of >= siblings room writes the next one waits for company (up to the
    delay, an hour here) and room writes that come meanwhile share it; any other job ends
    the wait at once. Below the siblings nothing waits."""
    store = SQLiteStore(tmp_path / "a.db", commit_delay=3600.0, commit_siblings=2)
    await store.open()
    try:
        await _three(store, "b")
        commits = store.statistics()["commits"]
        lone = asyncio.ensure_future(store.apply([Insert(new_request("lone"))]))
        await until(lambda: store.statistics()["delayed_commits"] == 1)  # it waits
        more = [asyncio.ensure_future(store.apply([Insert(new_request(f"m{i}"))]))
                for i in range(2)]
        await until(lambda: store.statistics()["queued"] == 3)
        assert not lone.done()
        # A token (not a room write) ends the wait: one commit for all four.
        await asyncio.wait_for(store.create_token("t", Role.AGENT, "a"), 10)
        assert await lone == [True] and [await m for m in more] == [[True], [True]]
        assert store.statistics()["commits"] - commits == 1
    finally:
        await store.close()
    store = SQLiteStore(tmp_path / "b.db", commit_delay=3600.0, commit_siblings=10)
    await store.open()
    try:
        await _three(store, "b")
        assert await asyncio.wait_for(store.apply([Insert(new_request("lone"))]), 10) == [True]
        assert store.statistics()["delayed_commits"] == 0
    finally:
        await store.close()


async def test_a_commit_whose_company_stopped_coming_does_not_wait_out_the_delay(
        tmp_path: Path) -> None:
    """Under load the next commit waits for company, but once none has come for
    ``commit_gap`` it commits: with an hour's delay and a short gap, a lone write after a
    busy commit is durable long before the hour, and it did wait (one delayed commit)."""
    store = SQLiteStore(tmp_path / "a.db", commit_delay=3600.0, commit_siblings=2,
                        commit_gap=0.05)
    await store.open()
    try:
        await _three(store, "b")
        assert await asyncio.wait_for(store.apply([Insert(new_request("lone"))]), 30) == [True]
        assert store.statistics()["delayed_commits"] == 1
    finally:
        await store.close()


async def test_a_journal_step_reads_only_its_run_and_entry(tmp_path: Path) -> None:
    """``running`` and ``done`` each take one read (the run joined with its entry) and their
    writes: every statement of the writer is a hand-over of the GIL. Whether the tenant
    has notification endpoints is asked only when a step makes a run need attention."""
    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    seen: list[str] = []
    try:
        await store.run_step("t", begin("e1"), 100.0, MAX)
        await store._write(lambda c: c.set_trace_callback(seen.append))
        await store.run_step("t", call("e1", 0), 101.0, MAX)
        await store.run_step("t", CallFinished("r", "e1", 0, True, {"ok": 1}, None), 102.0, MAX)
        await store._write(lambda c: c.set_trace_callback(None))
    finally:
        await store.close()
    statements = [s.split()[0].upper() for s in seen]
    assert statements.count("SELECT") == 2, seen
    assert not any("notify_endpoints" in s for s in seen), seen
    assert statements.count("BEGIN") == statements.count("COMMIT") == 3  # 2 steps + the trace


async def _batched(store: SQLiteStore, *work: Any) -> list[Any]:
    """Run ``work`` (awaitables of store writes) in one commit: the writer is held by a job
    until all of them are queued behind it."""
    started, gate = threading.Event(), threading.Event()

    def hold(c: sqlite3.Connection) -> None:
        started.set()
        gate.wait(10)

    held = asyncio.ensure_future(store._write(hold))
    await until(started.is_set)  # the writer is in the gate's commit
    queued = store.statistics()["queued"]
    tasks = [asyncio.ensure_future(w) for w in work]
    await until(lambda: store.statistics()["queued"] == queued + len(work))
    commits = store.statistics()["commits"]
    gate.set()
    await held
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert store.statistics()["commits"] - commits == 2  # the gate's, then theirs
    return results


async def test_a_batch_of_journal_steps_commits_without_a_savepoint_each(
        tmp_path: Path) -> None:
    """Issue 12: each job of a batch ran in a savepoint of its own, two statements more per
    job, each a hand-over of the GIL. Now the batch is applied straight, and only when a
    job fails is it applied again job by job (next test)."""
    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    seen: list[str] = []
    try:
        for r in ("r1", "r2", "r3"):
            await store.run_step("t", begin("e1", run_id=r), 100.0, MAX)
        await store._write(lambda c: c.set_trace_callback(seen.append))
        steps = await _batched(store, *(store.run_step("t", call("e1", 0, run_id=r), 101.0, MAX)
                                        for r in ("r1", "r2", "r3")))
        await store._write(lambda c: c.set_trace_callback(None))
    finally:
        await store.close()
    assert all(step.error is None for step in steps), steps
    assert not [s for s in seen if "SAVEPOINT" in s.upper()], seen


async def test_a_failing_job_in_a_batch_fails_alone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "hub.db")
    await store.open()
    try:
        for r in ("r1", "r2"):
            await store.run_step("t", begin("e1", run_id=r), 100.0, MAX)

        def half_then_fail(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO tenants VALUES ('half', 1.0)")
            raise ValueError("boom")

        first, failed, second, ops = await _batched(
            store, store.run_step("t", call("e1", 0, run_id="r1"), 101.0, MAX),
            store._write(half_then_fail),
            store.run_step("t", call("e1", 0, run_id="r2"), 101.0, MAX),
            store.apply([Insert(new_request("op-1"))]))
        assert isinstance(failed, ValueError)
        assert first.error is None and second.error is None and ops == [True]
        assert await store._read("SELECT 1 FROM tenants WHERE name='half'") == []
        rows = await store._read("SELECT run_id FROM journal ORDER BY run_id")
        assert [r[0] for r in rows] == ["r1", "r2"]
        assert await store.get_request("t", "op-1") is not None
    finally:
        await store.close()
