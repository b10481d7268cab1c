"""Several hub nodes on real PostgreSQL and a real NATS (issue 11), real ``a2h serve`` processes.

Correctness lives in the database: the first answer wins across nodes, one op_id is one
request whichever nodes it reaches, a deadline fires once however many nodes sweep, and the
bus only wakes (dropping every wake-up on purpose delays pushes, loses nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from cluster_util import Cluster, NatsServer, PrivatePostgres, pg_schema, psql
from e2e_util import UNIT, a2h, until
from websockets.asyncio.client import connect

from client_sdk import AlreadyResolved, Hub, RetryableError, RunNotActive

pytestmark = pytest.mark.e2e


@pytest.fixture
def store() -> Iterator[str]:
    with pg_schema() as url:
        yield url


@pytest.fixture
def nats() -> Iterator[NatsServer]:
    with NatsServer() as server:
        yield server


def rows(store: str, where: str = "true") -> list[tuple[str, ...]]:
    schema = store.rsplit("search_path=", 1)[1]
    out = psql(f"SELECT op_id, status, coalesce(actor, '') FROM {schema}.requests "
               f"WHERE {where} ORDER BY op_id")
    return [tuple(line.split("|")) for line in out.splitlines() if line]


async def test_first_answer_wins_across_nodes(tmp_path: Path, store: str,
                                              nats: NatsServer) -> None:
    with Cluster(tmp_path, store, nats.url, 2) as c:
        agent = c.token(agent="bot")
        phone, laptop = c.token(human="me"), c.token(human="me")
        a_url, b_url = c.urls
        async with Hub(a_url, agent) as ag, Hub(a_url, phone) as h1, Hub(b_url, laptop) as h2:
            for i in range(25):
                op = f"race-{i}"
                await ag.ask("me", f"Q{i}", conversation=f"c{i % 3}", op_id=op, wait=0,
                             choices=["a", "b"])
                # Both people see it first, so both answers really race.
                await asyncio.gather(until(lambda op=op: _has(h1, op)),
                                     until(lambda op=op: _has(h2, op)))
                r = await asyncio.gather(h1.respond(op, "a"), h2.respond(op, "b"),
                                         return_exceptions=True)
                wins = [x for x in r if not isinstance(x, BaseException)]
                losses = [x for x in r if isinstance(x, AlreadyResolved)]
                assert len(wins) == 1 and len(losses) == 1, r
                assert losses[0].answer is not None
                assert losses[0].answer.value == wins[0].value
                final = await ag.wait(op, wait=5)
                assert final.value == wins[0].value
    assert len(rows(store)) == 25


async def _has(hub: Hub, op_id: str) -> bool:
    return any(item.op_id == op_id for item in await hub.inbox())


async def test_one_op_id_to_two_nodes_is_one_request(tmp_path: Path, store: str,
                                                    nats: NatsServer) -> None:
    with Cluster(tmp_path, store, nats.url, 2) as c:
        agent = c.token(agent="bot")
        c.token(human="me")
        a_url, b_url = c.urls
        async with Hub(a_url, agent) as a, Hub(b_url, agent) as b:
            for i in range(20):
                op = f"twin-{i}"
                ra, rb = await asyncio.gather(
                    a.ask("me", "Same?", conversation="twins", op_id=op, wait=0),
                    b.ask("me", "Same?", conversation="twins", op_id=op, wait=0))
                assert ra.op_id == rb.op_id == op
    assert len(rows(store)) == 20


async def test_deadlines_fire_once_across_three_nodes(tmp_path: Path, store: str,
                                                      nats: NatsServer) -> None:
    n = 1000
    with Cluster(tmp_path, store, nats.url, 3, "--alarm-sweep", "0.2") as c:
        agent = c.token(agent="bot")
        c.token(human="me")
        urls = c.urls
        async with Hub(urls[0], agent) as a0, Hub(urls[1], agent) as a1, \
                Hub(urls[2], agent) as a2:
            hubs = [a0, a1, a2]
            sem = asyncio.Semaphore(100)

            async def one(i: int) -> None:
                async with sem:
                    await hubs[i % 3].ask("me", f"D{i}", conversation=f"d{i % 17}",
                                          op_id=f"dl-{i:04d}", wait=0, expires_in=2.0)

            await asyncio.gather(*(one(i) for i in range(n)))
            await until(lambda: len(rows(store, "status = 'expired'")) == n, 60,
                        "every deadline fired")
        await until(lambda: c.output().count(" expired by system") >= n, 20)
        text = c.output()
    assert {r[1] for r in rows(store)} == {"expired"}
    # One resolution event per deadline, across all nodes: only the node whose
    # compare-and-set won emits it.
    assert text.count(" expired by system") == n


async def test_bus_messages_lost_on_purpose_lose_nothing(tmp_path: Path, store: str,
                                                         nats: NatsServer) -> None:
    with Cluster(tmp_path, store, nats.url, 2, "--bus-drop", "1.0",
                 "--reconcile-interval", "0.5") as c:
        agent = c.token(agent="bot")
        human = c.token(human="me")
        a_url, b_url = c.urls
        async with Hub(a_url, agent) as ag, Hub(b_url, human) as h:
            events = h.inbox_events()
            task = asyncio.create_task(ag.ask("me", "Dropped?", conversation="drop",
                                              op_id="drop-1", wait=30))
            # The inbox.add reaches node B's socket through the reconcile loop.
            frame = await asyncio.wait_for(events.__anext__(), 10 * UNIT)
            assert frame["type"] == "inbox.add" and frame["request"]["op_id"] == "drop-1"
            await h.respond("drop-1", "yes")
            answer = await asyncio.wait_for(task, 10 * UNIT)
            assert answer.value == "yes"


async def test_cross_node_push_latency(tmp_path: Path, store: str, nats: NatsServer) -> None:
    """An ask on node A shows in an inbox on node B, and an answer given on B reaches the
    agent blocked on A, each within 100 ms (median of 20)."""
    with Cluster(tmp_path, store, nats.url, 2) as c:
        agent = c.token(agent="bot")
        human = c.token(human="me")
        a_url, b_url = c.urls
        to_inbox, to_agent = [], []
        async with Hub(a_url, agent) as ag, Hub(b_url, human) as h:
            events = h.inbox_events()
            for i in range(20):
                t0 = time.perf_counter()
                task = asyncio.create_task(ag.ask("me", f"L{i}", conversation="lat",
                                                  op_id=f"lat-{i}", wait=30))
                while True:
                    frame = await asyncio.wait_for(events.__anext__(), 10 * UNIT)
                    if frame["type"] == "inbox.add" and frame["request"]["op_id"] == f"lat-{i}":
                        break
                to_inbox.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                await h.respond(f"lat-{i}", "ok")
                await asyncio.wait_for(task, 10 * UNIT)
                to_agent.append(time.perf_counter() - t1)
        assert statistics.median(to_inbox) < 0.1 * UNIT, to_inbox
        assert statistics.median(to_agent) < 0.1 * UNIT, to_agent


async def test_revocation_closes_sockets_on_every_node(tmp_path: Path, store: str,
                                                       nats: NatsServer) -> None:
    with Cluster(tmp_path, store, nats.url, 3) as c:
        agent = c.token(agent="bot")
        sockets = []
        for url in c.urls:
            ws = await connect(url.replace("http", "ws") + "/ws",
                               additional_headers={"Authorization": f"Bearer {agent}"})
            await ws.recv()
            sockets.append(ws)
        a2h("token", "revoke", agent, "--store", c.store)  # committed when it returns
        t0 = time.monotonic()
        for ws in sockets:
            await asyncio.wait_for(ws.wait_closed(), 5 * UNIT)
            assert ws.close_code == 4001
        assert time.monotonic() - t0 < 1.0 * UNIT  # on every node, within a second


async def test_node_death_loses_nothing(tmp_path: Path, store: str, nats: NatsServer) -> None:
    """Agents and people over three nodes under steady load; one node is SIGKILLed; its
    clients fail over; 0 lost, 0 duplicated, 0 wrong values, inboxes empty."""
    rng = random.Random(11)
    with Cluster(tmp_path, store, nats.url, 3) as c:
        agent = c.token(agent="bot")
        human = c.token(human="me")
        urls = c.urls
        per_agent, n_agents = 10, 6
        done = asyncio.Event()

        async def one_agent(k: int) -> list[tuple[str, object]]:
            order = urls[k % 3:] + urls[:k % 3]
            out = []
            async with Hub(order, agent, max_backoff=0.3) as hub:
                for j in range(per_agent):
                    op = f"n{k}-{j}"
                    ans = await asyncio.wait_for(hub.ask(
                        "me", f"value {op}?", conversation=f"nd{k}", op_id=op, wait=60),
                        90 * UNIT)
                    out.append((op, ans.value))
            return out

        async def person(start: int) -> None:
            order = urls[start:] + urls[:start]
            async with Hub(order, human, max_backoff=0.3) as h:
                while not done.is_set():
                    try:
                        for item in await asyncio.wait_for(h.inbox(), 5):
                            try:
                                await h.respond(item.op_id, item.question.split()[-1][:-1])
                            except AlreadyResolved:
                                pass
                    except (TimeoutError, OSError):
                        pass
                    await asyncio.sleep(0.02)

        people = [asyncio.create_task(person(i)) for i in range(2)]
        work = asyncio.gather(*(one_agent(k) for k in range(n_agents)))
        await asyncio.sleep(rng.uniform(0.5, 1.0) * UNIT)
        c.nodes[0].kill()
        results = await asyncio.wait_for(work, 180 * UNIT)
        done.set()
        await asyncio.gather(*people)
        async with Hub(urls[1], human) as h:
            assert await h.inbox() == []
    flat = [r for rs in results for r in rs]
    assert len(flat) == per_agent * n_agents
    assert all(value == op for op, value in flat)
    got = rows(store)
    assert len(got) == per_agent * n_agents and {r[1] for r in got} == {"answered"}


async def test_bus_restart_under_load(tmp_path: Path, store: str, nats: NatsServer) -> None:
    with Cluster(tmp_path, store, nats.url, 2, "--reconcile-interval", "0.5") as c:
        agent = c.token(agent="bot")
        human = c.token(human="me")
        a_url, b_url = c.urls
        async with Hub(a_url, agent) as ag, Hub(b_url, human) as h:
            async def answer(op: str) -> None:
                await until(lambda: _has(h, op), 20)
                await h.respond(op, "ok")

            for i in range(10):
                if i == 3:
                    nats.stop()
                if i == 6:
                    nats.start()
                task = asyncio.create_task(ag.ask("me", f"B{i}", conversation="bus",
                                                  op_id=f"bus-{i}", wait=30))
                await answer(f"bus-{i}")
                assert (await asyncio.wait_for(task, 20 * UNIT)).value == "ok"
        async with httpx.AsyncClient() as http:
            health = orjson.loads((await http.get(a_url + "/healthz")).content)
            assert health["ok"] is True
    assert {r[1] for r in rows(store)} == {"answered"}



async def test_runs_resume_on_another_node_and_stay_fenced(tmp_path: Path, store: str,
                                                           nats: NatsServer) -> None:
    """A run started through node A is taken over through node B (fencing: A's execution is
    refused from then on); A dies; the run, resumed through B, completes without repeating
    a journaled call."""
    with Cluster(tmp_path, store, nats.url, 2) as c:
        agent = c.token(agent="bot")
        c.token(human="me")
        a_url, b_url = c.urls
        called: list[str] = []

        async def step(name: str) -> str:
            called.append(name)
            return name.upper()

        async with Hub([a_url, b_url], agent, max_backoff=0.2) as on_a, \
                Hub(b_url, agent) as on_b, contextlib.AsyncExitStack() as later:
            with contextlib.suppress(RunNotActive):  # leaving the fenced execution
                async with on_a.run("moving", conversation="runs", version="1") as first:
                    assert await first.call(step, "one") == "ONE"
                    # A second execution takes the run over through node B...
                    second = await later.enter_async_context(
                        on_b.run("moving", conversation="runs", version="1"))
                    assert await second.call(step, "one") == "ONE"  # replayed, not called
                    # ...and the first one, through node A, is fenced off.
                    with pytest.raises(RunNotActive):
                        await first.call(step, "two")
            c.nodes[0].kill()
            assert await second.call(step, "two") == "TWO"
        async with Hub(b_url, agent) as again:
            runs = await again.runs()
    assert called == ["one", "two"]  # every journaled call ran exactly once
    assert [r.status for r in runs if r.run_id == "moving"] == ["completed"]


async def test_browser_inbox_on_node_b_for_a_request_asked_on_node_a(
        tmp_path: Path, store: str, nats: NatsServer) -> None:
    from playwright.async_api import async_playwright

    with Cluster(tmp_path, store, nats.url, 2) as c:
        agent = c.token(agent="bot")
        human = c.token(human="me")
        a_url, b_url = c.urls
        async with async_playwright() as pw, Hub(a_url, agent) as ag:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            try:
                page = await browser.new_page()
                await page.goto(f"{b_url}/#token={human}")
                await page.wait_for_selector("#whoami", state="attached")
                task = asyncio.create_task(ag.ask("me", "Asked on node A?", conversation="br",
                                                  op_id="browser-1", choices=["yes", "no"],
                                                  wait=60))
                await page.get_by_text("Asked on node A?").first.wait_for(timeout=10_000)
                await page.get_by_role("button", name="yes", exact=True).first.click()
                answer = await asyncio.wait_for(task, 20 * UNIT)
                assert (answer.value, answer.actor) == ("yes", "human:me")
            finally:
                await browser.close()


async def test_postgres_restart_under_load(tmp_path: Path, nats: NatsServer) -> None:
    """The database restarts while agents ask and a person answers: the nodes answer
    retryable errors meanwhile, recover by themselves, and lose nothing."""
    pg = PrivatePostgres().init().start()
    try:
        with Cluster(tmp_path, pg.url, nats.url, 2) as c:
            agent = c.token(agent="bot")
            human = c.token(human="me")
            a_url, b_url = c.urls
            done = asyncio.Event()

            async def person() -> None:
                async with Hub([b_url, a_url], human, max_backoff=0.3) as h:
                    while not done.is_set():
                        try:
                            for item in await asyncio.wait_for(h.inbox(), 5):
                                await h.respond(item.op_id, item.question.split()[-1][:-1])
                        except Exception:  # the database is restarting: try again shortly
                            pass
                        await asyncio.sleep(0.02)

            async def asker(k: int) -> list[tuple[str, object]]:
                out = []
                async with Hub([a_url, b_url], agent, max_backoff=0.3) as hub:
                    for j in range(8):
                        op = f"pg{k}-{j}"
                        while True:
                            try:
                                ans = await hub.ask("me", f"value {op}?", conversation=f"p{k}",
                                                    op_id=op, wait=60)
                                break
                            except RetryableError:  # unavailable while it restarts
                                await asyncio.sleep(0.1)
                        out.append((op, ans.value))
                return out

            answering = asyncio.create_task(person())
            work = asyncio.gather(*(asker(k) for k in range(4)))
            await asyncio.sleep(0.5 * UNIT)
            pg.restart()
            results = await asyncio.wait_for(work, 120 * UNIT)
            done.set()
            await answering
        flat = [r for rs in results for r in rs]
        assert len(flat) == 32 and all(value == op for op, value in flat)
        out = psql("SELECT count(*), count(*) FILTER (WHERE status = 'answered') "
                   "FROM requests", pg.url)
        assert out.strip() == "32|32"
    finally:
        pg.destroy()
