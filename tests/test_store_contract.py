"""The store contract: every backend passes this suite, requests, tokens and the journal.

Adding a backend is adding one entry to BACKENDS (a context that yields the target
``open_store`` takes, and cleans up after the test): the one fixture below runs every test
over every backend. Backend-specific behaviour (files, pragmas, crash points, several
nodes) is tested beside the backend, e.g. tests/test_store_sqlite.py and
tests/test_store_postgres.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from pg_util import pg_schema

from hub.core import AskReceived, Extend, Insert, Request, Resolve, RoomCore
from hub.errors import Invalid, NotFound
from hub.journal import (
    AskInterrupt,
    AskSettlement,
    CallFinished,
    CallReached,
    EntryKind,
    InterruptResolved,
    RunEnded,
    RunStarted,
)
from hub.notify.events import Channel, DeliveryOutcome, EventType
from hub.protocol import Ask, Conversation, OpId, Outcome, RunStatus, Status
from hub.store import Role, Store, open_store
from hub.store.base import Endpoint


@contextlib.contextmanager
def sqlite_file(tmp: Path) -> Iterator[str]:
    yield str(tmp / "contract.db")


@contextlib.contextmanager
def postgresql_schema(tmp: Path) -> Iterator[str]:
    with pg_schema() as url:  # a fresh schema per test, dropped after it
        yield url


#: backend name -> a context yielding the target open_store takes (given the test's
#: temporary directory), for the duration of one test.
BACKENDS: dict[str, Callable[[Path], contextlib.AbstractContextManager[str]]] = {
    "sqlite": sqlite_file,
    "postgresql": postgresql_schema,
}

SECRET = "00" * 16
MAX = 10_000


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    with BACKENDS[request.param](tmp_path) as target:
        yield lambda: open_store(target)


@contextlib.asynccontextmanager
async def opened(make_store: Callable[[], Store]) -> AsyncIterator[Store]:
    store = make_store()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def new_request(op: str, conv: str = "c1", to: str = "me", now: float = 100.0,
                expires_in: float | None = 50.0, *, tenant: str = "t",
                sender: str = "agent:a", question: str | None = None) -> Request:
    room = RoomCore(tenant, conv)
    ask = Ask(1, OpId(op), to, question or f"Q {op}", Conversation(conv), expires_in=expires_in)
    d = room.handle(AskReceived(ask, tenant, sender), now)
    req = d.ops[0].request
    assert isinstance(req, Request)
    return req


def resolved(req: Request, status: Status = Status.ANSWERED, at: float = 105.0) -> Request:
    out = replace(req)
    out.status, out.actor, out.resolved_at, out.value = status, "human:me", at, "ok"
    return out


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


async def test_tokens_are_listed_per_tenant_by_hash(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        tok = await store.create_token("t", Role.AGENT, "bot", expires_at=500.0)
        await store.create_token("u", Role.HUMAN, "ann")
        who = await store.principal(tok, 0)
        assert who is not None and await store.principal_by_hash(who.token_hash, 0) == who
        [info] = await store.list_tokens("t")
        assert info["hash"] == who.token_hash and tok not in info.values()
        assert (info["role"], info["name"], info["expires_at"], info["revoked_at"]) == \
            ("agent", "bot", 500.0, None)
        assert not await store.revoke_token(tok, 10.0, tenant="u")  # another tenant's token
        assert await store.revoke_token(who.token_hash, 10.0, tenant="t")  # by its hash
        assert (await store.list_tokens("t"))[0]["revoked_at"] == 10.0
        session = await store.create_session((await store.list_tokens("u"))[0]["hash"], 0, 60)
        assert await store.session_principal(session, 1.0) is not None
        await store.end_session(session)
        assert await store.session_principal(session, 1.0) is None


async def test_bootstrap_creates_two_tokens_only_on_an_empty_store(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        first = await store.bootstrap("acme", "takeru")
        assert first is not None
        human, agent = first
        h, a = await store.principal(human, 0), await store.principal(agent, 0)
        assert h is not None and (h.tenant, h.role, h.name) == ("acme", Role.HUMAN, "takeru")
        assert a is not None and (a.tenant, a.role, a.name) == ("acme", Role.AGENT, "default")
        assert await store.list_humans("acme") == ["takeru"]
        assert await store.bootstrap("acme", "takeru") is None
        assert await store.bootstrap("other", "ann") is None  # not empty: nothing created
        assert await store.list_humans("other") == []
    async with opened(make_store) as store:  # a store with any token is not empty
        assert await store.bootstrap("acme", "takeru") is None


async def test_bootstrap_races_create_exactly_one_pair(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        results = await asyncio.gather(*(store.bootstrap("t", f"h{i}") for i in range(5)))
        assert sum(r is not None for r in results) == 1
        assert len(await store.list_tokens("t")) == 2


async def test_pending_usage_counts_pending_requests_and_their_bytes(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        assert await store.pending_usage("t") == (0, 0)
        small, big = new_request("small"), new_request("big", question="x" * 5000)
        done = new_request("done", question="y" * 5000)
        theirs = new_request("theirs", tenant="u", question="z" * 9000)
        await store.apply([Insert(small), Insert(done), Insert(theirs)])
        n, size = await store.pending_usage("t")
        assert n == 2 and size >= 5000
        await store.apply([Resolve(resolved(done))])
        n, small_size = await store.pending_usage("t")
        assert n == 1 and 0 < small_size < 5000  # resolved requests do not count
        await store.apply([Insert(big)])
        n, size = await store.pending_usage("t")
        assert n == 2 and size >= small_size + 5000
        assert (await store.pending_usage("u"))[0] == 1


# ---------------------------------------------------------------------------- runs


def begin(exec_id: str, *, tenant: str = "t", run_id: str = "r", version: str = "1",
          escalate_to: str | None = None) -> RunStarted:
    return RunStarted(tenant, run_id, "c", version, "agent:a", exec_id, SECRET, escalate_to)


def call(exec_id: str, pos: int, *, unsafe: bool = False, run_id: str = "r",
         name: str = "f") -> CallReached:
    return CallReached(run_id, exec_id, pos, EntryKind.CALL, name, "h", unsafe, [pos])


async def test_run_steps_round_trip_per_tenant(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.create_token("t", Role.HUMAN, "takeru")
        await store.create_token("u", Role.HUMAN, "ann")
        step = await store.run_step("t", begin("e1"), 100.0, MAX)
        assert step.outcome is Outcome.STARTED and step.run is not None
        assert (await store.run_step("u", begin("x1", tenant="u"), 100.0, MAX)).outcome \
            is Outcome.STARTED  # the same run id in another tenant is another run
        assert (await store.run_step("t", call("e1", 0), 101.0, MAX)).outcome is Outcome.RUN
        done = await store.run_step("t", CallFinished("r", "e1", 0, True, {"n": 1}), 102.0, MAX)
        assert done.outcome is Outcome.RECORDED
        # Unsafe with no escalate_to: the tenant's only human will settle an unknown outcome.
        assert (await store.run_step("t", call("e1", 1, unsafe=True), 103.0, MAX)).outcome \
            is Outcome.RUN
        # A new execution replays: the journaled result comes back, the call is not re-run.
        assert (await store.run_step("t", begin("e2"), 110.0, MAX)).outcome is Outcome.STARTED
        replay = await store.run_step("t", call("e2", 0), 111.0, MAX)
        assert (replay.outcome, replay.result) == (Outcome.DONE, {"n": 1})
        unknown = await store.run_step("t", call("e2", 1, unsafe=True), 112.0, MAX)
        assert unknown.outcome is Outcome.UNKNOWN and unknown.op_id is not None
        assert isinstance(unknown.ask, AskSettlement) and unknown.ask.run.escalate_to == "takeru"
        [mine] = await store.list_runs("t")
        assert mine.run.status is RunStatus.NEEDS_ATTENTION and mine.calls == 2
        assert mine.view()["calls"] == 2 and "secret" not in mine.view()
        # The other tenant's run is untouched: no entries, still active.
        [theirs] = await store.list_runs("u")
        assert (theirs.run.status, theirs.calls) == (RunStatus.ACTIVE, 0)
        with pytest.raises(NotFound):
            await store.run_step("v", RunEnded("r", "e1", True), 120.0, MAX)


async def test_a_refused_step_writes_nothing(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:  # no human in the tenant to settle with
        await store.run_step("t", begin("e1"), 100.0, MAX)
        with pytest.raises(Invalid):
            await store.run_step("t", call("e1", 0, unsafe=True), 101.0, MAX)
        assert (await store.list_runs("t"))[0].calls == 0
        assert (await store.run_step("t", call("e1", 0), 102.0, MAX)).outcome is Outcome.RUN


async def test_journal_steps_are_compare_and_set(make_store: Callable[[], Store]) -> None:
    """Concurrent steps on one entry (one group commit, or several): the first decision
    wins and a later one sees it, never a second outcome."""
    async with opened(make_store) as store:
        await store.run_step("t", begin("e1"), 100.0, MAX)
        # The same call reached twice at once by one execution: journaled once.
        a, b = await asyncio.gather(store.run_step("t", call("e1", 0), 101.0, MAX),
                                    store.run_step("t", call("e1", 0), 101.0, MAX))
        assert (a.outcome, b.outcome) == (Outcome.RUN, Outcome.RUN)
        assert (a.write_entry is None) != (b.write_entry is None)
        # Two results for it at once: the first is recorded, the second changes nothing.
        results = await asyncio.gather(*(
            store.run_step("t", CallFinished("r", "e1", 0, True, {"v": i}), 102.0, MAX)
            for i in range(5)))
        writers = [i for i, s in enumerate(results) if s.write_entry is not None]
        assert len(writers) == 1 and all(s.outcome is Outcome.RECORDED for s in results)
        await store.run_step("t", begin("e2"), 110.0, MAX)
        replay = await store.run_step("t", call("e2", 0), 111.0, MAX)
        assert replay.result == {"v": writers[0]}
        # An interrupt resolved twice: the first resolution stays.
        ask = await store.run_step("t", CallReached("r", "e2", 1, EntryKind.INTERRUPT,
                                                    "interrupt", "p"), 112.0, MAX)
        assert isinstance(ask.ask, AskInterrupt) and ask.op_id is not None
        first, second = await asyncio.gather(
            store.run_step("t", InterruptResolved("r", 1, {"value": "yes"}), 113.0, MAX),
            store.run_step("t", InterruptResolved("r", 1, {"value": "no"}), 113.0, MAX))
        assert first.result == second.result == {"value": "yes"}


async def test_a_stale_execution_is_fenced_off(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.run_step("t", begin("old"), 100.0, MAX)
        assert (await store.run_step("t", call("old", 0), 101.0, MAX)).outcome is Outcome.RUN
        await store.run_step("t", begin("new"), 102.0, MAX)  # another process took it over
        for event in (call("old", 1), RunEnded("r", "old", True)):
            step = await store.run_step("t", event, 103.0, MAX)
            assert step.outcome is Outcome.NOT_ACTIVE
            assert "started again by another process" in step.message
        # What the old process did before it was fenced still counts (a fact)...
        recorded = await store.run_step("t", CallFinished("r", "old", 0, True, 7), 104.0, MAX)
        assert recorded.outcome is Outcome.RECORDED
        # ...and the new execution goes on with it.
        assert (await store.run_step("t", call("new", 0), 105.0, MAX)).result == 7
        ended = await store.run_step("t", RunEnded("r", "new", True), 106.0, MAX)
        assert ended.run is not None and ended.run.status is RunStatus.COMPLETED
        [summary] = await store.list_runs("t")
        assert summary.run.status is RunStatus.COMPLETED and summary.run.exec_id == "new"


async def test_list_runs_by_status_newest_first(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        for i, run_id in enumerate(("a", "b", "c")):
            await store.run_step("t", begin("e", run_id=run_id), 100.0 + i, MAX)
        await store.run_step("t", RunEnded("b", "e", True), 110.0, MAX)
        await store.run_step("t", begin("e", tenant="u", run_id="z"), 100.0, MAX)
        assert [s.run.run_id for s in await store.list_runs("t")] == ["b", "c", "a"]
        assert [s.run.run_id for s in await store.list_runs("t", RunStatus.ACTIVE)] == \
            ["c", "a"]
        assert [s.run.run_id for s in await store.list_runs("t", RunStatus.COMPLETED)] == ["b"]
        assert [s.run.run_id for s in await store.list_runs("t", limit=1)] == ["b"]
        assert [s.run.run_id for s in await store.list_runs("u")] == ["z"]


async def test_run_pending_lists_what_an_agent_waits_on(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.run_step("t", begin("e1"), 100.0, MAX)
        step = await store.run_step("t", CallReached("r", "e1", 0, EntryKind.INTERRUPT,
                                                     "interrupt", "p", to="me"), 101.0, MAX)
        assert step.op_id is not None
        # The interrupt's request was opened by another agent of the tenant (a restart).
        interrupt = new_request(step.op_id, sender="agent:other", expires_in=90)
        mine = new_request("mine", expires_in=10)
        others = new_request("others", sender="agent:other")
        answered = new_request("answered")
        elsewhere = new_request("mine", tenant="u")
        await store.apply([Insert(r) for r in (interrupt, mine, others, answered, elsewhere)])
        await store.apply([Resolve(resolved(answered))])
        pending = await store.run_pending("t", "agent:a")
        assert [r.op_id for r in pending] == ["mine", step.op_id]  # by deadline
        assert all(r.tenant == "t" for r in pending)
        assert [r.op_id for r in await store.run_pending("t", "agent:a", limit=1)] == ["mine"]
        # Once journaled as done, the interrupt is nobody's to wait on.
        await store.run_step("t", InterruptResolved("r", 0, {"value": "ok"}), 102.0, MAX)
        assert [r.op_id for r in await store.run_pending("t", "agent:a")] == ["mine"]


async def test_purge_removes_finished_runs_and_keeps_active_ones(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        for tenant in ("t", "u"):
            await store.run_step(tenant, begin("e", tenant=tenant), 100.0, MAX)
            await store.run_step(tenant, call("e", 0), 101.0, MAX)
        await store.run_step("t", RunEnded("r", "e", True), 110.0, MAX)
        await store.run_step("t", begin("e", run_id="failed"), 100.0, MAX)
        await store.run_step("t", RunEnded("failed", "e", False, "boom"), 120.0, MAX)
        assert await store.purge(105.0) == 0  # finished after the cutoff
        assert await store.purge(111.0) == 1
        assert [s.run.run_id for s in await store.list_runs("t")] == ["failed"]
        assert await store.purge(121.0) == 1
        assert await store.list_runs("t") == []
        # Its journal went with it: the same run id starts afresh.
        step = await store.run_step("t", begin("e2"), 130.0, MAX)
        assert step.outcome is Outcome.STARTED
        assert (await store.run_step("t", call("e2", 0), 131.0, MAX)).outcome is Outcome.RUN
        [active] = await store.list_runs("u")  # active: kept, with its journal
        assert (active.run.status, active.calls) == (RunStatus.ACTIVE, 1)


# ---------------------------------------------------------------------------- notifications


def endpoint(eid: str, tenant: str = "t", human: str | None = None,
             channel: Channel = Channel.WEBHOOK, url: str = "http://127.0.0.1:9/hook",
             secret: str | None = "whsec_AAAA") -> Endpoint:
    return Endpoint(id=eid, tenant=tenant, human=human, channel=channel, url=url,
                    secret=secret, created_at=50.0)


async def due(store: Store, now: float = 1000.0) -> dict[str, list[str]]:
    """endpoint id -> the event types claimed for it (leased for 100 s)."""
    out: dict[str, list[str]] = {}
    for d in await store.claim_deliveries(now, 100.0, 100):
        out.setdefault(d.endpoint.id, []).append(d.event.value)
    return out


async def test_endpoints_are_added_listed_scoped_and_removed(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.add_endpoint(endpoint("ep1"))
        await store.add_endpoint(endpoint("ep2", human="me", channel=Channel.NTFY))
        await store.add_endpoint(endpoint("ep3", tenant="u"))
        sub = endpoint("ep4", human="me", channel=Channel.PUSH, url="https://push/x",
                       secret='{"p256dh": "a", "auth": "b"}')
        assert await store.add_endpoint(sub) == sub
        # The same browser subscribing again updates its keys: still one subscription.
        again = await store.add_endpoint(replace(sub, id="ep5", secret='{"p256dh": "c"}'))
        assert again.id == "ep4" and again.secret == '{"p256dh": "c"}'
        assert [e.id for e in await store.list_endpoints("t")] == ["ep1", "ep2", "ep4"]
        assert [e.id for e in await store.list_endpoints()] == ["ep1", "ep2", "ep3", "ep4"]
        assert [e.id for e in await store.list_endpoints("t", human="me",
                                                         channel=Channel.PUSH)] == ["ep4"]
        assert "secret" not in (await store.list_endpoints("t"))[0].view()
        assert not await store.remove_endpoint("ep3", tenant="t")  # another tenant's
        assert not await store.remove_endpoint("ep4", tenant="t", human="ann")
        assert await store.remove_endpoint("ep4", tenant="t", human="me")
        assert await store.remove_endpoint("ep3")
        assert [e.id for e in await store.list_endpoints()] == ["ep1", "ep2"]


async def test_deliveries_are_written_with_their_event_for_the_endpoints_that_hear_it(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        for ep in (endpoint("all"), endpoint("mine", human="me", channel=Channel.NTFY),
                   endpoint("ann", human="ann"), endpoint("other", tenant="u"),
                   endpoint("push", human="me", channel=Channel.PUSH, url="https://p/1")):
            await store.add_endpoint(ep)
        await store.add_endpoint(endpoint("off"))
        await store.disable_endpoint("off", 60.0, "test")
        req = new_request("op1")
        assert await store.apply([Insert(req)]) == [True]
        assert await due(store) == {"all": ["request.created"], "mine": ["request.created"],
                                    "push": ["request.created"]}
        # A lost compare-and-set writes nothing; a resolution reaches webhooks only.
        assert await store.apply([Insert(req)]) != [True]
        assert await store.apply([Resolve(resolved(req))]) == [True]
        assert await due(store, 1001.0) == {"all": ["request.resolved"]}
        assert await store.apply([Resolve(resolved(req, Status.CANCELLED))]) != [True]
        assert await due(store, 1002.0) == {}
        [listed] = [e for e in await store.list_endpoints("t") if e.id == "all"]
        assert listed.pending == 2


async def test_batched_asks_write_their_deliveries_too(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.add_endpoint(endpoint("all"))
        reqs = [new_request(f"op{i}", conv=f"c{i}") for i in range(20)]
        # Concurrent callers share group commits (the bulk path of a batch).
        await asyncio.gather(*(store.apply([Insert(r)]) for r in reqs))
        await asyncio.gather(*(store.apply([Resolve(resolved(r))]) for r in reqs))
        claimed = await store.claim_deliveries(1000.0, 1.0, 100)
        assert sorted((d.op_id, d.event.value) for d in claimed) == sorted(
            [(r.op_id, "request.created") for r in reqs]
            + [(r.op_id, "request.resolved") for r in reqs])
        body = orjson.loads(claimed[0].body)
        assert set(body) == {"type", "timestamp", "data"} and body["data"]["op_id"]


async def test_a_delivery_is_claimed_once_retried_and_settled(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.add_endpoint(endpoint("ep"))
        await store.apply([Insert(new_request("op1"))])
        [d] = await store.claim_deliveries(200.0, 30.0, 10)
        assert d.msg_id.startswith("msg_") and d.attempts == 0
        assert orjson.loads(d.body)["data"]["question"] == "Q op1"
        assert await store.claim_deliveries(210.0, 30.0, 10) == []  # leased
        await store.release_deliveries()
        [again] = await store.claim_deliveries(210.0, 30.0, 10)
        assert (again.msg_id, again.body) == (d.msg_id, d.body)
        await store.settle_delivery(again, 211.0, DeliveryOutcome.RETRY, "HTTP 500", 300.0)
        [ep] = await store.list_endpoints("t")
        assert (ep.failing_since, ep.last_error, ep.pending) == (211.0, "HTTP 500", 1)
        assert await store.claim_deliveries(299.0, 30.0, 10) == []  # backing off
        [third] = await store.claim_deliveries(300.0, 30.0, 10)
        assert third.attempts == 1 and third.endpoint.failing_since == 211.0
        await store.settle_delivery(third, 301.0, DeliveryOutcome.POSTPONED, next_at=305.0)
        [fourth] = await store.claim_deliveries(305.0, 30.0, 10)
        assert fourth.attempts == 1
        await store.settle_delivery(fourth, 306.0, DeliveryOutcome.DONE)
        [ep] = await store.list_endpoints("t")
        assert (ep.failing_since, ep.last_error, ep.last_success_at, ep.pending) == \
            (None, None, 306.0, 0)
        assert await store.claim_deliveries(10_000.0, 30.0, 10) == []


async def test_a_disabled_endpoint_fails_its_deliveries_and_says_why(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.add_endpoint(endpoint("ep"))
        await store.apply([Insert(new_request("op1")), Insert(new_request("op2"))])
        await store.disable_endpoint("ep", 500.0, "failing for a day")
        assert await store.claim_deliveries(1000.0, 30.0, 10) == []
        [ep] = await store.list_endpoints("t")
        assert (ep.disabled_at, ep.disabled_reason, ep.pending) == (500.0, "failing for a day", 0)
        await store.apply([Insert(new_request("op3"))])  # nothing written for it any more
        [ep] = await store.list_endpoints("t")
        assert ep.pending == 0
        # Settled deliveries go with the purge of what ended before the cut-off.
        assert await store.purge(400.0) == 0


async def test_a_run_that_needs_attention_writes_its_delivery(
        make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        await store.create_token("t", Role.HUMAN, "takeru")
        await store.add_endpoint(endpoint("all"))
        await store.add_endpoint(endpoint("ann", human="ann"))
        await store.run_step("t", begin("e1"), 100.0, MAX)
        await store.run_step("t", call("e1", 0, unsafe=True), 101.0, MAX)
        await store.run_step("t", begin("e2"), 110.0, MAX)
        unknown = await store.run_step("t", call("e2", 0, unsafe=True), 112.0, MAX)
        assert unknown.outcome is Outcome.UNKNOWN
        claimed = [d for d in await store.claim_deliveries(1000.0, 1.0, 100)
                   if d.event is EventType.RUN_NEEDS_ATTENTION]
        assert [d.endpoint.id for d in claimed] == ["all"]  # escalated to takeru, not ann
        data = orjson.loads(claimed[0].body)["data"]
        assert (data["run_id"], data["status"]) == ("r", "needs_attention")


async def test_a_setting_is_made_once(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as store:
        assert await store.setting("vapid", "first") == "first"
        assert await store.setting("vapid", "second") == "first"
