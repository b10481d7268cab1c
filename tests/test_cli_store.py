"""``a2h token`` and the first-start bootstrap go through the Store interface (in-process)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hub.cli import EXIT_ERROR, bootstrap, main
from hub.config import Settings
from hub.store import Principal, Role, open_store


def principal(db: Path, token: str) -> Principal | None:
    async def run() -> Principal | None:
        store = open_store(str(db))
        await store.open()
        try:
            return await store.principal(token, 0.0)
        finally:
            await store.close()

    return asyncio.run(run())


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
    assert main(["token", "create", "--db", "postgresql://a2h@127.0.0.1/test",
                 "--agent", "bot"]) == 2
    assert "PostgreSQL" in capsys.readouterr().err


def test_bootstrap_only_on_an_empty_store(tmp_path: Path) -> None:
    settings = Settings(db=str(tmp_path / "first.db"), bootstrap_tenant="acme",
                        bootstrap_human="takeru")
    first = bootstrap(settings)
    assert first is not None
    human, agent = (principal(tmp_path / "first.db", t) for t in first)
    assert human is not None and (human.tenant, human.name) == ("acme", "takeru")
    assert agent is not None and (agent.role, agent.name) == (Role.AGENT, "default")
    assert bootstrap(settings) is None
