"""End to end against a real ``a2h serve`` subprocess: CLI, restart after SIGKILL, reconnect."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from e2e_util import UNIT, HubProcess, a2h, create_token, until

from client_sdk import AccessDenied, Hub

pytestmark = pytest.mark.e2e


def rows(db: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute("SELECT op_id, status FROM requests ORDER BY created_at"))
    finally:
        conn.close()


async def test_first_start_prints_login_url_and_agent_token(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    with HubProcess(db) as hp:
        out = "".join(hp.output)
        m = re.search(r"(http://127\.0\.0\.1:\d+)/#token=(a2h_hu_\S+)", out)
        assert m, out
        assert m.group(1) == hp.url
        human = m.group(2)
        agent = re.search(r"Agent token.*\n\s+(a2h_ag_\S+)", out)
        assert agent, out
        async with Hub(hp.url, agent.group(1)) as a, Hub(hp.url, human) as h:
            task = asyncio.create_task(a.ask("me", "Works?", conversation="hello",
                                             choices=["yes", "no"], wait=20))
            await until(h.inbox)
            (item,) = await h.inbox()
            await h.respond(item.op_id, "yes")
            assert (await task).value == "yes"
    with HubProcess(db) as hp:  # not empty any more: no new tokens
        assert "#token=" not in "".join(hp.output)


def test_token_cli_prints_one_token_and_revokes(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    out = a2h("token", "create", "--tenant", "acme", "--agent", "ci", db=db).stdout
    assert re.fullmatch(r"a2h_ag_[A-Za-z0-9_-]{40,}\n", out)
    human = a2h("token", "create", "--tenant", "acme", "--human", "takeru", db=db).stdout.strip()
    assert human.startswith("a2h_hu_")
    assert a2h("token", "revoke", human, db=db).returncode == 0
    assert a2h("token", "revoke", human, db=db, check=False).returncode != 0


async def test_revoking_a_token_closes_its_sockets(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    agent = create_token(db, agent="bot")
    with HubProcess(db) as hp:
        async with Hub(hp.url, agent) as hub:
            await hub.ping()
            a2h("token", "revoke", agent, db=db)  # the CLI, straight on the database file
            t0 = time.monotonic()
            with pytest.raises(AccessDenied):
                await until(lambda: hub._fatal is not None, timeout=5)
                await hub.ping()
            assert time.monotonic() - t0 < 1.0 * UNIT  # closed within a second


async def test_a2h_ask_from_a_shell(tmp_path: Path) -> None:
    db = tmp_path / "ask.db"
    agent = create_token(db, agent="shell")
    human = create_token(db, human="me")
    with HubProcess(db) as hp:
        env = dict(os.environ, A2H_URL=hp.url, A2H_TOKEN=agent)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hub.cli", "ask", "--to", "me", "Deploy now?",
            "--choices", "yes,no", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        async with Hub(hp.url, human) as h:
            await until(h.inbox)
            (item,) = await h.inbox()
            assert item.choices == ["yes", "no"]
            await h.respond(item.op_id, "yes")
        out, err = await asyncio.wait_for(proc.communicate(), 30 * UNIT)
        assert proc.returncode == 0, err
        assert out.decode().strip() == "yes"
        expired = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hub.cli", "ask", "--to", "me", "Too late?",
            "--expires-in", "0.5", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(expired.communicate(), 30 * UNIT)
        assert expired.returncode == 11 and b"expired" in err


async def test_restart_after_sigkill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    hp = HubProcess(db).start()
    try:
        async with Hub(hp.url, agent, reconnect=False) as a, \
                Hub(hp.url, human, reconnect=False) as h:
            answered = await a.ask("me", "Answered before the crash?", conversation="c1", wait=0)
            await h.respond(answered.op_id, "yes")
            overdue = await a.ask("me", "Expires while down?", conversation="c2",
                                  expires_in=1.0, wait=0)
            alive = await a.ask("me", "Still pending?", conversation="c3", expires_in=600,
                                wait=0)
        before = rows(db)
        assert len(before) == 3
        hp.kill()  # SIGKILL: no shutdown code runs
        # The hub is down while the deadline passes (real time: a real subprocess).
        overdue_at = overdue.request["deadline"] if overdue.request else time.time() + 1.0
        await until(lambda: time.time() > overdue_at, timeout=5)
        hp.start()
        started = time.monotonic()
        # Overdue deadlines fire within 1 s of start-up.
        await until(lambda: dict(rows(db))[overdue.op_id] == "expired", timeout=1.0)
        assert time.monotonic() - started < 1.0 * UNIT
        async with Hub(hp.url, agent) as a, Hub(hp.url, human) as h:
            got = await a.wait(answered.op_id, wait=5)
            assert (got.status, got.value) == ("answered", "yes")
            assert (await a.wait(overdue.op_id, wait=5)).status == "expired"
            assert [i.op_id for i in await h.inbox()] == [alive.op_id]
            # Re-asking with the same op_id re-attaches: still one request.
            again = await a.ask("me", "Still pending?", conversation="c3", expires_in=600,
                                op_id=alive.op_id, wait=0)
            assert again.op_id == alive.op_id
            assert len(await h.inbox()) == 1
        assert sorted(op for op, _ in rows(db)) == sorted(op for op, _ in before)
    finally:
        hp.stop()


async def test_agent_reconnects_and_reattaches_by_op_id(tmp_path: Path) -> None:
    db = tmp_path / "reconnect.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    hp = HubProcess(db).start()
    try:
        async with Hub(hp.url, agent, max_backoff=0.5) as a:
            task = asyncio.create_task(a.ask("me", "Survive a restart?", conversation="c",
                                             wait=30))
            await until(lambda: len(rows(db)) == 1)
            op_id = rows(db)[0][0]
            hp.kill()
            hp.start()  # same port, same database
            await until(lambda: a.reconnects >= 1, timeout=15)
            async with Hub(hp.url, human) as h:
                await until(h.inbox)
                (item,) = await h.inbox()
                assert item.op_id == op_id
                await h.respond(op_id, "yes")
            answer = await asyncio.wait_for(task, 15 * UNIT)
            assert (answer.status, answer.value, answer.op_id) == ("answered", "yes", op_id)
        assert len(rows(db)) == 1  # re-attached, never a second request
    finally:
        hp.stop()


async def test_sigterm_tells_clients_to_reconnect(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    db = tmp_path / "term.db"
    agent = create_token(db, agent="bot")
    hp = HubProcess(db).start()
    ws = await connect(hp.ws_url, additional_headers={"Authorization": f"Bearer {agent}"})
    await ws.recv()  # hello
    assert hp.stop() in (0, -15)  # uvicorn re-raises the SIGTERM it handled
    hint = orjson.loads(await asyncio.wait_for(ws.recv(), 10 * UNIT))
    assert hint["type"] == "reconnect" and hint["after_ms"][0] < hint["after_ms"][1]
    with pytest.raises(ConnectionClosed) as info:
        await asyncio.wait_for(ws.recv(), 10 * UNIT)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1012


def test_every_serve_flag_has_an_environment_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import fields

    from hub.cli import build_parser, settings_from_args
    from hub.config import Settings

    monkeypatch.setenv("A2H_ROOM_IDLE", "5")
    monkeypatch.setenv("A2H_ALLOWED_ORIGINS", "https://a.example,https://b.example")
    args = build_parser().parse_args(["serve", "--port", "9001"])
    s = settings_from_args(args)
    assert (s.room_idle, s.port) == (5.0, 9001)
    assert s.allowed_origins == ["https://a.example", "https://b.example"]
    monkeypatch.setenv("A2H_PORT", "9002")
    assert settings_from_args(build_parser().parse_args(["serve", "--port", "9001"])).port == 9001
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for f in fields(Settings):
        assert "--" + f.name.replace("_", "-") in help_text
        assert "A2H_" + f.name.upper() in help_text
