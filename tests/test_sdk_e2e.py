"""The SDK against real ``a2h serve`` processes: an answer that committed as the hub died
(issue 15, defect 10), and failover between two hubs on one store (issue 11)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from test_sdk_reconnect import Relay

from client_sdk import Hub

pytestmark = pytest.mark.e2e


def status_of(db: Path, op_id: str) -> str | None:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT status FROM requests WHERE op_id = ?", (op_id,)).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


def count_requests(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        conn.close()


async def test_respond_across_a_hub_kill_returns_the_committed_answer(tmp_path: Path) -> None:
    """The hub commits the answer and dies before its reply reaches the person: their
    ``respond`` re-sends the same answer after the restart and gets it back."""
    db = tmp_path / "respond.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    hp = HubProcess(db).start()
    try:
        async with Relay(int(hp.url.rsplit(":", 1)[1])) as relay:
            async with Hub(hp.url, agent, reconnect=False) as a:
                asked = await a.ask("me", "Ship?", conversation="c", choices=["yes", "no"],
                                    wait=0)
            async with Hub(relay.url, human, max_backoff=0.2) as h:
                relay.hold = True  # the hub's reply to respond never arrives
                task = asyncio.create_task(h.respond(asked.op_id, "yes"))
                await until(lambda: status_of(db, asked.op_id) == "answered",
                            what="the answer committed")
                assert not task.done()
                hp.kill()  # SIGKILL right after the commit, before the reply got out
                relay.hold = False
                relay.drop()
                hp.start()  # same port, same database
                answer = await asyncio.wait_for(task, 20 * UNIT)
                assert (answer.status, answer.value, answer.actor) == \
                    ("answered", "yes", "human:me")
                assert h.reconnects >= 1
    finally:
        hp.stop()


async def test_failover_to_a_second_hub_on_the_same_store(tmp_path: Path) -> None:
    """Two hubs on one SQLite file: hub A dies while an agent waits on it; the person
    answers on hub B; the agent fails over to B, re-attaches and gets the answer."""
    db = tmp_path / "shared.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    a, b = HubProcess(db), HubProcess(db)
    a.start()
    b.start()
    try:
        async with Hub([a.url, b.url], agent, max_backoff=0.5) as bot:
            assert bot.ws_url == a.ws_url and bot.urls == [a.ws_url, b.ws_url]
            task = asyncio.create_task(bot.ask("me", "Failover?", conversation="c",
                                               choices=["yes", "no"], wait=30))
            await until(lambda: count_requests(db) == 1, what="the request stored")
            a.kill()
            async with Hub(b.url, human) as person:
                (item,) = await until(person.inbox, what="the request in B's inbox")
                await until(lambda: bot.reconnects >= 1, timeout=15, what="failover to B")
                await person.respond(item.op_id, "yes")
            answer = await asyncio.wait_for(task, 20 * UNIT)
            assert (answer.status, answer.value, answer.op_id) == ("answered", "yes", item.op_id)
            assert bot.ws_url == b.ws_url
        assert count_requests(db) == 1  # re-attached by op_id, never a second request
    finally:
        a.stop()
        b.stop()


async def test_the_first_reachable_url_is_used(tmp_path: Path) -> None:
    db = tmp_path / "first.db"
    agent = create_token(db, agent="bot")
    with HubProcess(db) as hp:
        dead = "http://127.0.0.1:9"  # discard port: nothing listens
        async with Hub([dead, hp.url], agent, open_timeout=2) as bot:
            assert bot.ws_url == hp.ws_url
            await bot.ping()
