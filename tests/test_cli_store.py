"""``a2h token`` and the first-start bootstrap go through the Store interface (in-process),
on SQLite (``--db``) and on PostgreSQL (``--store``, real subprocesses)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_util import UNIT, HubProcess, a2h, until
from pg_util import admin, pg_schema

from client_sdk import Hub
from hub.cli import EXIT_ERROR, bootstrap, main
from hub.config import Settings
from hub.store import Principal, Role, open_store


async def principal_in(target: str, token: str) -> Principal | None:
    store = open_store(target)
    await store.open()
    try:
        return await store.principal(token, 0.0)
    finally:
        await store.close()


def principal(db: Path, token: str) -> Principal | None:
    return asyncio.run(principal_in(str(db), token))


def test_token_create_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.db"
    assert main(["token", "create", "--db", str(db), "--tenant", "acme", "--human", "ann"]) == 0
    token = capsys.readouterr().out.strip()
    who = principal(db, token)
    assert who is not None and (who.tenant, who.role, who.name) == ("acme", Role.HUMAN, "ann")
    assert main(["token", "revoke", token, "--db", str(db)]) == 0
    assert principal(db, token) is None
    assert main(["token", "revoke", token, "--db", str(db)]) == EXIT_ERROR
    assert "no such active token" in capsys.readouterr().err


def test_token_commands_refuse_a_store_this_build_lacks(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--store", "mysql://a2h@127.0.0.1/test",
                 "--agent", "bot"]) == 2
    assert "unknown store mysql://" in capsys.readouterr().err


def test_an_unreachable_store_fails_cleanly_without_showing_its_password(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1: nothing listens there, the connection is refused at once.
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test?password=s3cret-pw"
    assert main(["token", "create", "--store", url, "--agent", "bot"]) == 2
    err = capsys.readouterr().err
    assert "cannot open the PostgreSQL store postgresql://postgres:***@127.0.0.1:1/test" in err
    assert "s3cret" not in err


def test_bootstrap_only_on_an_empty_store(tmp_path: Path) -> None:
    settings = Settings(db=str(tmp_path / "first.db"), bootstrap_tenant="acme",
                        bootstrap_human="takeru")
    first = bootstrap(settings)
    assert first is not None
    human, agent = (principal(tmp_path / "first.db", t) for t in first)
    assert human is not None and (human.tenant, human.name) == ("acme", "takeru")
    assert agent is not None and (agent.role, agent.name) == (Role.AGENT, "default")
    assert bootstrap(settings) is None


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.mark.e2e
async def test_token_and_serve_on_postgresql_answer_through_the_sdk(tmp_path: Path) -> None:
    """``a2h token create|revoke --store`` and ``a2h serve --store``, real processes: an
    agent asks and a person answers through the hub, the request lives in PostgreSQL."""
    with pg_schema() as url:
        schema = url.rsplit("search_path=", 1)[1]
        agent = a2h("token", "create", "--store", url, "--agent", "bot").stdout.strip()
        # The environment twin of --store.
        human = subprocess.run(
            [sys.executable, "-m", "hub.cli", "token", "create", "--human", "me"],
            capture_output=True, text=True, check=True, timeout=60 * UNIT,
            env={**os.environ, "A2H_STORE": url}).stdout.strip()
        spare = a2h("token", "create", "--store", url, "--human", "spare").stdout.strip()
        assert agent.startswith("a2h_ag_") and human.startswith("a2h_hu_")
        assert await principal_in(url, spare) is not None
        revoked = a2h("token", "revoke", spare, "--store", url)
        assert revoked.returncode == 0 and "revoked" in revoked.stderr
        assert await principal_in(url, spare) is None
        with HubProcess(tmp_path / "unused.db", "--store", url) as hp:
            assert any("serves alone" in line for line in hp.output)
            async with Hub(hp.url, agent) as a, Hub(hp.url, human) as h:
                asked = await a.ask("me", "Ship?", conversation="c", choices=["yes", "no"],
                                    wait=0)
                assert asked.pending
                items = await until(h.inbox, what="the request in the inbox")
                assert [i.op_id for i in items] == [asked.op_id]
                await h.respond(asked.op_id, "yes")
                answer = await a.wait(asked.op_id, 10 * UNIT)
                assert (answer.status, answer.value, answer.actor) == \
                    ("answered", "yes", "human:me")
        rows = await admin(f"SELECT status, value FROM {schema}.requests")
        assert [(r[0], bytes(r[1])) for r in rows] == [("answered", b'"yes"')]
        assert not (tmp_path / "unused.db").exists()  # --store won over --db


def test_token_create_refuses_names_outside_the_character_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "names.db")
    for args in (["--tenant", "acme x", "--agent", "bot"], ["--tenant", "acme", "--human", "a\nb"],
                 ["--tenant", "", "--agent", "bot"]):
        assert main(["token", "create", "--db", db, *args]) == 2
        assert "must be 1..200 of" in capsys.readouterr().err
