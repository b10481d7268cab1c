"""PostgreSQL only: migrations, several nodes on one database, lost connections.

The contract suite (tests/test_store_contract.py) already runs every Store test on
PostgreSQL. Here: what only a shared database has. Each "node" is a ``PostgresStore`` of its
own (its own pool) on the test's fresh schema; what one node decides, the other must see,
and every race is settled by the database, never by a node's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import asyncpg  # type: ignore[import-untyped]
import pytest
from e2e_util import until
from pg_util import PG_URL, admin, pg_schema
from test_store_contract import MAX, begin, call, new_request, resolved

from hub.core import Insert, Request, Resolve
from hub.journal import CallFinished
from hub.protocol import Outcome, Status
from hub.store import NewerDatabase, Role, StoreError, open_store
from hub.store.postgres import SCHEMA_VERSION, PostgresStore


@pytest.fixture
def url() -> Iterator[str]:
    with pg_schema() as target:
        yield target


def schema_of(url: str) -> str:
    return url.rsplit("search_path=", 1)[1]


@contextlib.asynccontextmanager
async def nodes(url: str, n: int = 2) -> AsyncIterator[list[PostgresStore]]:
    """``n`` stores on one database, opened at once (like nodes starting together)."""
    stores = [PostgresStore(url) for _ in range(n)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        yield stores
    finally:
        await asyncio.gather(*(s.close() for s in stores))


def test_open_store_takes_postgresql_urls() -> None:
    for scheme in ("postgresql", "postgres", "POSTGRESQL"):
        assert isinstance(open_store(f"{scheme}://postgres@127.0.0.1/test"), PostgresStore)


# ---------------------------------------------------------------------------- migrations


async def test_nodes_starting_at_once_migrate_once(url: str) -> None:
    async with nodes(url, 4) as stores:
        assert sorted(s.schema_version_found for s in stores) == [0, SCHEMA_VERSION,
                                                                  SCHEMA_VERSION,
                                                                  SCHEMA_VERSION]
        rows = await admin(f"SELECT version FROM {schema_of(url)}.a2h_schema")
        assert [r[0] for r in rows] == [SCHEMA_VERSION]
        assert await stores[0].is_empty()


async def test_a_newer_database_is_refused_and_the_password_never_shown(url: str) -> None:
    async with nodes(url, 1):
        pass
    await admin(f"UPDATE {schema_of(url)}.a2h_schema SET version = $1", SCHEMA_VERSION + 1)
    # Trust auth: the password is never asked for, only carried in the URL.
    with_password = url.replace("postgres@", "postgres:hunter2-secret@")
    store = open_store(with_password)
    with pytest.raises(NewerDatabase) as refused:
        await store.open()
    text = str(refused.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in text
    assert f"knows only up to {SCHEMA_VERSION}" in text
    assert "postgres:***@" in text and "hunter2" not in text


async def test_a_read_only_database_serves_reads_and_refuses_writes_retryably(
        url: str) -> None:
    async with nodes(url, 1) as (writer,):
        await writer.create_token("t", Role.HUMAN, "me")
        await writer.apply([Insert(new_request("op1"))])
    async with nodes(url + "&default_transaction_read_only=on", 1) as (reader,):
        assert [r.op_id for r in await reader.inbox("t", "me")] == ["op1"]
        with pytest.raises(StoreError, match="read-only"):
            await reader.apply([Insert(new_request("op2"))])
        with pytest.raises(StoreError, match="read-only"):
            await reader.create_token("t", Role.AGENT, "bot")
        assert reader.statistics()["failed_batches"] == 1


# ---------------------------------------------------------------------------- several nodes


async def test_the_first_answer_wins_across_nodes(url: str) -> None:
    """Two people on two nodes answer one request at the same instant, many times over:
    exactly one wins each time, the other is told the winner's answer."""
    async with nodes(url) as (a, b):
        for i in range(100):
            req = new_request(f"op{i}")
            assert await a.apply([Insert(req)]) == [True]
            by_a, by_b = replace(req), replace(req)
            by_a.status, by_a.value, by_a.actor, by_a.resolved_at = \
                Status.ANSWERED, "yes", "human:ann", 101.0
            by_b.status, by_b.value, by_b.actor, by_b.resolved_at = \
                Status.DECLINED, "no", "human:bob", 101.0
            (ra,), (rb,) = await asyncio.gather(a.apply([Resolve(by_a)]),
                                                b.apply([Resolve(by_b)]))
            assert (ra is True) != (rb is True), (i, ra, rb)
            winner, loser = (by_a, rb) if ra is True else (by_b, ra)
            assert isinstance(loser, Request)
            assert (loser.status, loser.value, loser.actor) == \
                (winner.status, winner.value, winner.actor)
            for node in (a, b):
                stored = await node.get_request("t", req.op_id)
                assert stored is not None and stored.actor == winner.actor
        assert await a.counts() == {s: n for s, n in (await b.counts()).items()}
        assert sum((await a.counts()).values()) == 100


async def test_one_op_id_sent_to_two_nodes_at_once_is_one_request(url: str) -> None:
    async with nodes(url) as (a, b):
        for i in range(100):
            via_a = new_request(f"op{i}", conv="ca", question="from a")
            via_b = new_request(f"op{i}", conv="cb", question="from b")
            (ra,), (rb,) = await asyncio.gather(a.apply([Insert(via_a)]),
                                                b.apply([Insert(via_b)]))
            assert (ra is True) != (rb is True), (i, ra, rb)
            first, other = (via_a, rb) if ra is True else (via_b, ra)
            assert isinstance(other, Request) and other.view() == first.view()
        assert await a.counts() == {"pending": 100}


async def test_deadlines_expire_once_across_three_nodes(url: str) -> None:
    async with nodes(url, 3) as stores:
        reqs = [new_request(f"op{i}", conv=f"c{i % 7}", expires_in=10) for i in range(300)]
        await stores[0].apply([Insert(r) for r in reqs])

        async def sweep(store: PostgresStore) -> list[str]:
            """What one node's alarm sweep expires: every due request, CAS by CAS."""
            won: list[str] = []
            for due in await store.due(200.0, 1000):
                req = await store.get_request(due.tenant, due.op_id)
                assert req is not None
                if req.status is not Status.PENDING:
                    continue
                out = resolved(req, Status.EXPIRED, at=200.0)
                out.actor, out.value = "system", None
                (ok,) = await store.apply([Resolve(out)])
                if ok is True:
                    won.append(due.op_id)
            return won

        wins = await asyncio.gather(*(sweep(s) for s in stores))
        everything = [op for won in wins for op in won]
        assert sorted(everything) == sorted(r.op_id for r in reqs)  # each expired once
        assert await stores[1].counts() == {"expired": 300}


async def test_bootstrap_races_across_nodes_create_one_pair(url: str) -> None:
    async with nodes(url, 3) as stores:
        results = await asyncio.gather(*(s.bootstrap("t", f"h{i}")
                                         for i, s in enumerate(stores * 2)))
        assert sum(r is not None for r in results) == 1
        assert len(await stores[2].list_tokens("t")) == 2


async def test_first_begins_of_one_run_on_two_nodes_agree_on_the_run(url: str) -> None:
    """The same new run begun through two nodes at once: one creates it, the other resumes
    that very run (its secret, hence its derived op_ids), never a second copy."""
    async with nodes(url) as (a, b):
        for i in range(40):
            run_id = f"r{i}"
            ev_a = replace(begin("ea", run_id=run_id), secret=secrets.token_hex(16))
            ev_b = replace(begin("eb", run_id=run_id), secret=secrets.token_hex(16))
            sa, sb = await asyncio.gather(a.run_step("t", ev_a, 100.0, MAX),
                                          b.run_step("t", ev_b, 100.0, MAX))
            assert sa.outcome is sb.outcome is Outcome.STARTED
            assert sa.run is not None and sb.run is not None
            assert sa.run.secret == sb.run.secret, i  # one run, created once
            current = (await a.list_runs("t", limit=1))[0].run
            assert current.run_id == run_id and current.secret == sa.run.secret
            # The later begin owns the run; the earlier execution is fenced off.
            losers = {"ea", "eb"} - {current.exec_id}
            for node, exec_id in ((a, "ea"), (b, "eb")):
                step = await node.run_step("t", call(exec_id, 0, run_id=run_id), 101.0, MAX)
                expected = Outcome.NOT_ACTIVE if exec_id in losers else Outcome.RUN
                assert step.outcome is expected


async def test_fencing_holds_across_nodes(url: str) -> None:
    """Ten executions of one run started through two nodes at once, then each reaches the
    first call at once: only the run's current execution runs it."""
    async with nodes(url) as (a, b):
        await a.run_step("t", begin("e0"), 100.0, MAX)
        execs = [f"e{i}" for i in range(1, 11)]
        await asyncio.gather(*((a if i % 2 else b).run_step("t", begin(e), 101.0, MAX)
                               for i, e in enumerate(execs)))
        steps = await asyncio.gather(*((b if i % 2 else a).run_step("t", call(e, 0), 102.0,
                                                                    MAX)
                                       for i, e in enumerate(["e0", *execs])))
        runners = [e for e, s in zip(["e0", *execs], steps) if s.outcome is Outcome.RUN]
        assert len(runners) == 1
        assert all(s.outcome is Outcome.NOT_ACTIVE for s in steps
                   if s.outcome is not Outcome.RUN)
        [summary] = await b.list_runs("t")
        assert summary.run.exec_id == runners[0] and summary.calls == 1
        # Its result reported through both nodes at once: recorded exactly once.
        done = await asyncio.gather(*(
            (a, b)[i % 2].run_step("t", CallFinished("r", runners[0], 0, True, {"v": i}),
                                   103.0, MAX) for i in range(6)))
        writers = [i for i, s in enumerate(done) if s.write_entry is not None]
        assert len(writers) == 1 and all(s.outcome is Outcome.RECORDED for s in done)
        replay = await a.run_step("t", call(runners[0], 0), 104.0, MAX)
        assert replay.result == {"v": writers[0]}


# ---------------------------------------------------------------------------- lost connections


async def backends(app: str) -> list[int]:
    rows = await admin("SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
    return [r[0] for r in rows]


async def terminate(app: str) -> int:
    rows = await admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE application_name = $1", app)
    return len(rows)


async def test_a_store_rides_through_its_connections_being_killed(url: str) -> None:
    """Every backend of the store's pool terminated, idle and then in the middle of a
    write: the pool reconnects, and the interrupted write runs again on a fresh connection
    (the server rolled it back), with no error for its caller."""
    app = "a2h_test_" + secrets.token_hex(4)
    async with nodes(f"{url}&application_name={app}", 1) as (store,):
        req = new_request("op1")
        assert await store.apply([Insert(req)]) == [True]
        old = set(await backends(app))
        assert old and await terminate(app) == len(old)
        await until(lambda: _gone(app, old), what="the killed backends gone")
        assert (await store.counts()) == {"pending": 1}  # reads reconnect
        assert await store.apply([Insert(new_request("op2"))]) == [True]  # writes too

        # In flight: the write waits on a row lock that another session holds.
        holder = await asyncpg.connect(PG_URL)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute(f"SELECT 1 FROM {schema_of(url)}.requests "
                                 "WHERE op_id = 'op1' FOR UPDATE")
            task = asyncio.create_task(store.apply([Resolve(resolved(req))]))
            await until(lambda: _waiting(app), what="the write waiting on the lock")
            retries = store.statistics()["retries"]
            await terminate(app)
            await until(lambda: store.statistics()["retries"] > retries,
                        what="the write retried")
            await until(lambda: _waiting(app), what="the retry waiting on the lock")
            assert not task.done()
            await tx.rollback()
        finally:
            await holder.close()
        assert await asyncio.wait_for(task, 10) == [True]
        got = await store.get_request("t", "op1")
        assert got is not None and got.status is Status.ANSWERED


async def _gone(app: str, pids: set[int]) -> bool:
    return not pids & set(await backends(app))


async def _waiting(app: str) -> bool:
    rows = await admin("SELECT 1 FROM pg_stat_activity WHERE application_name = $1 "
                       "AND wait_event_type = 'Lock'", app)
    return bool(rows)


class Outage:
    """A TCP relay in front of PostgreSQL that can go down (every connection cut, new ones
    refused) and come back on the same port: a database restart, as a client sees it."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def up(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", 5432)
        self._writers.update((cw, sw))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        tasks = [asyncio.create_task(pipe(cr, sw)), asyncio.create_task(pipe(sr, cw))]
        self._tasks.update(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.difference_update(tasks)
        self._writers.difference_update((cw, sw))


async def test_an_outage_gives_retryable_errors_and_the_store_recovers_by_itself(
        url: str) -> None:
    outage = Outage()
    await outage.up()
    try:
        via = url.replace("127.0.0.1:5432", f"127.0.0.1:{outage.port}")
        assert via != url
        async with nodes(via, 1) as (store,):
            await store.apply([Insert(new_request("before"))])
            await outage.down()
            with pytest.raises(StoreError, match="unreachable"):
                await store.apply([Insert(new_request("during"))])
            with pytest.raises(StoreError, match="unreachable"):
                await store.inbox("t", "me")
            with pytest.raises(StoreError):
                await store.run_step("t", begin("e1"), 100.0, MAX)
            with pytest.raises(StoreError):
                await store.ping()
            await outage.up()  # the database is back: no reopen, no restart of the node
            assert await store.ping()
            assert await store.apply([Insert(new_request("after"))]) == [True]
            assert sorted(r.op_id for r in await store.inbox("t", "me")) == ["after", "before"]
            assert (await store.run_step("t", begin("e1"), 100.0, MAX)).outcome \
                is Outcome.STARTED
    finally:
        await outage.down()
