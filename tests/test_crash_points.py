"""The hub dying at each boundary where it matters (hub/faults.py), over a real ``a2h serve``.

For each crash point: the hub exits at that point like a SIGKILL, comes back on the same
database and port, and then nothing is lost, nothing is duplicated, nothing is answered
twice, and every client that was waiting gets its answer.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from pathlib import Path

import pytest
from e2e_util import UNIT, HubProcess, create_token, until

from client_sdk import Answer, Hub
from hub.faults import CRASH_EXIT

pytestmark = pytest.mark.e2e


def requests(db: Path) -> list[tuple[str, str, str | None]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return list(conn.execute("SELECT op_id, status, actor FROM requests ORDER BY op_id"))
    finally:
        conn.close()


def crashed(hub: HubProcess) -> bool:
    return hub.proc is not None and hub.proc.poll() == CRASH_EXIT


async def answer_all(human: Hub, expected: int, value: str = "yes") -> None:
    """Answer every inbox item until ``expected`` answers were given (across restarts)."""
    done: set[str] = set()

    async def step() -> bool:
        try:
            for item in await human.inbox():
                if item.op_id not in done:
                    await human.respond(item.op_id, value)
                    done.add(item.op_id)
        except Exception:  # the hub is restarting: try again
            return False
        return len(done) >= expected

    await until(step, 60, f"{expected} answers")


@pytest.mark.parametrize("point", ["room.after_commit", "room.after_push"])
async def test_crash_while_asking(tmp_path: Path, point: str) -> None:
    db = tmp_path / "hub.db"
    agent_token = create_token(db, agent="bot")
    human_token = create_token(db, human="me")
    hub = HubProcess(db, env={"A2H_CRASH_AT": point}).start()
    try:
        async with Hub(hub.url, agent_token, max_backoff=0.2) as agent:
            task = asyncio.create_task(agent.ask("me", "Ship it?", conversation="c",
                                                 op_id="op-ask", wait=60))
            await until(lambda: crashed(hub), 20, "the crash point")
            assert requests(db) == [("op-ask", "pending", None)]  # committed before the crash
            hub.env = {}
            hub.start()
            async with Hub(hub.url, human_token) as human:
                await answer_all(human, 1)
            answer = await asyncio.wait_for(task, 30 * UNIT)
            assert (answer.status, answer.value, answer.actor) == ("answered", "yes", "human:me")
        assert requests(db) == [("op-ask", "answered", "human:me")]
    finally:
        hub.stop()


async def test_crash_while_answering(tmp_path: Path) -> None:
    """The answer's commit is the second commit: the crash comes after it, before anyone
    heard of it. The waiting agent still gets it, and re-sending it changes nothing."""
    db = tmp_path / "hub.db"
    agent_token = create_token(db, agent="bot")
    human_token = create_token(db, human="me")
    hub = HubProcess(db, env={"A2H_CRASH_AT": "room.after_commit",
                              "A2H_CRASH_AFTER": "1"}).start()
    try:
        async with Hub(hub.url, agent_token, max_backoff=0.2) as agent:
            task = asyncio.create_task(agent.ask("me", "Ship it?", conversation="c",
                                                 op_id="op-ans", wait=60))
            await until(lambda: requests(db), 20, "the ask committed")
            async with Hub(hub.url, human_token, reconnect=False) as human:
                await until(human.inbox, 10)
                with pytest.raises(Exception):  # noqa: B017 - the hub dies mid-call
                    await human.respond("op-ans", "yes")
            await until(lambda: crashed(hub), 20, "the crash point")
            assert requests(db) == [("op-ans", "answered", "human:me")]
            hub.env = {}
            hub.start()
            answer = await asyncio.wait_for(task, 30 * UNIT)
            assert (answer.status, answer.value) == ("answered", "yes")
        assert requests(db) == [("op-ans", "answered", "human:me")]
    finally:
        hub.stop()


async def test_crash_in_the_middle_of_a_group_commit(tmp_path: Path) -> None:
    """Many asks at once share one group commit; the hub dies inside it. None of them
    committed, every agent re-sends its op_id after the restart, each becomes one request."""
    db = tmp_path / "hub.db"
    agent_token = create_token(db, agent="bot")
    human_token = create_token(db, human="me")
    hub = HubProcess(db, env={"A2H_CRASH_AT": "store.mid_commit"}).start()
    n = 30
    try:
        async with Hub(hub.url, agent_token, max_backoff=0.2) as agent:
            tasks = [asyncio.create_task(agent.ask("me", f"Q{i}", conversation=f"c{i % 5}",
                                                   op_id=f"op-{i:02d}", wait=60))
                     for i in range(n)]
            await until(lambda: crashed(hub), 20, "the crash point")
            before = requests(db)
            hub.env = {}
            hub.start()
            async with Hub(hub.url, human_token) as human:
                await answer_all(human, n - len([r for r in before if r[1] != "pending"]))
            answers: list[Answer] = await asyncio.wait_for(asyncio.gather(*tasks), 60 * UNIT)
        assert all(a.status == "answered" and a.value == "yes" for a in answers)
        rows = requests(db)
        assert [r[0] for r in rows] == [f"op-{i:02d}" for i in range(n)]
        assert {r[1] for r in rows} == {"answered"}
    finally:
        hub.stop()


async def test_crash_during_start_up_recovery(tmp_path: Path) -> None:
    """Overdue deadlines are fired at start-up; the hub dies while doing it. The next start
    fires each exactly once, and the agents waiting on them hear "expired"."""
    db = tmp_path / "hub.db"
    agent_token = create_token(db, agent="bot")
    create_token(db, human="me")
    n = 40
    hub = HubProcess(db).start()
    try:
        async with Hub(hub.url, agent_token) as agent:
            for i in range(n):
                await agent.ask("me", f"Q{i}", conversation=f"c{i % 4}", op_id=f"exp-{i:02d}",
                                wait=0, expires_in=1.0 * UNIT)
        hub.stop()
        time.sleep(1.5 * UNIT)  # the deadlines pass while no hub runs (that is the point)
        hub.env = {"A2H_CRASH_AT": "startup.recovery", "A2H_CRASH_AFTER": str(n // 2)}
        with pytest.raises(RuntimeError):
            hub.start(timeout=20)  # dies before it prints "serving"
        assert crashed(hub)
        hub.env = {"A2H_CRASH_AT": "room.after_commit", "A2H_CRASH_AFTER": "2"}
        try:
            hub.start(timeout=20)
            await until(lambda: crashed(hub), 20)
        except RuntimeError:
            assert crashed(hub)
        hub.env = {}
        hub.start()
        async with Hub(hub.url, agent_token) as agent:
            answers = [await agent.wait(f"exp-{i:02d}", wait=10) for i in range(n)]
        assert {a.status for a in answers} == {"expired"}
        rows = requests(db)
        assert len(rows) == n and {r[1] for r in rows} == {"expired"}
    finally:
        hub.stop()


async def test_random_kill_soak(tmp_path: Path) -> None:
    """Bounded, seeded: agents ask and a human answers while the hub is SIGKILLed a few
    times at random moments. 0 lost, 0 duplicated, 0 wrong values."""
    rng = random.Random(1515)
    db = tmp_path / "hub.db"
    agent_token = create_token(db, agent="bot")
    human_token = create_token(db, human="me")
    n_agents, per_agent, kills = 6, 8, 3
    hub = HubProcess(db).start()
    stop = asyncio.Event()

    async def one_agent(k: int) -> list[tuple[str, str | None]]:
        out = []
        async with Hub(hub.url, agent_token, max_backoff=0.3) as agent:
            for j in range(per_agent):
                op = f"a{k}-{j}"
                ans = await asyncio.wait_for(
                    agent.ask("me", f"value for {op}?", conversation=f"soak{k}", op_id=op,
                              wait=60), 120 * UNIT)
                out.append((op, ans.value))
        return out

    async def human_loop() -> None:
        async with Hub(hub.url, human_token, max_backoff=0.3) as human:
            while not stop.is_set():
                try:
                    for item in await asyncio.wait_for(human.inbox(), 5):
                        await human.respond(item.op_id, item.question.split()[-1][:-1])
                except Exception:
                    await asyncio.sleep(0.05)  # the hub is down: poll again shortly
                await asyncio.sleep(0.02)

    async def killer() -> None:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.5, 1.5) * UNIT)
            hub.kill()
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            hub.start()

    try:
        answerer = asyncio.create_task(human_loop())
        chaos = asyncio.create_task(killer())
        results = await asyncio.gather(*(one_agent(k) for k in range(n_agents)))
        await chaos
        stop.set()
        await answerer
    finally:
        hub.stop()
    flat = [r for rs in results for r in rs]
    assert len(flat) == n_agents * per_agent
    assert all(value == op for op, value in flat), [r for r in flat if r[0] != r[1]]
    rows = requests(db)
    assert len(rows) == n_agents * per_agent  # none duplicated
    assert {r[1] for r in rows} == {"answered"}
