"""Notifications over a real ``a2h serve``: the CLI manages endpoints on the database file,
and a hub killed between the commit of an event and its delivery delivers it after the
restart (the outbox is in the store, hub/faults.py ``notify.before_send``)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import httpx
import pytest
from e2e_util import UNIT, HubProcess, a2h, create_token, until
from notify_util import Receiver
from standardwebhooks.webhooks import Webhook

from hub.faults import CRASH_EXIT

pytestmark = pytest.mark.e2e


def deliveries(db: Path) -> list[tuple[str, str, int]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return list(conn.execute("SELECT event, state, attempts FROM notify_deliveries"))
    finally:
        conn.close()


def test_the_cli_adds_lists_and_removes_endpoints(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    out = a2h("notify", "add", "--tenant", "acme", "--webhook", "https://example.com/h", db=db)
    assert out.stdout.count("\n") == 1 and out.stdout.startswith("whsec_")  # alone, once
    a2h("notify", "add", "--tenant", "acme", "--human", "ann", "--ntfy",
        "https://ntfy.sh/acme-ann", db=db)
    listed = a2h("notify", "list", db=db).stdout
    assert "webhook acme/*" in listed and "ntfy    acme/ann" in listed
    assert out.stdout.strip() not in listed  # the secret is never listed
    first = listed.split()[0]
    a2h("notify", "remove", first, db=db)
    assert first not in a2h("notify", "list", db=db).stdout
    assert a2h("notify", "remove", first, db=db, check=False).returncode == 1
    bad = a2h("notify", "add", "--webhook", "file:///etc/passwd", db=db, check=False)
    assert bad.returncode == 2 and "http or https" in bad.stderr


def test_a_hub_killed_before_sending_delivers_after_its_restart(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    agent = create_token(db, agent="bot")
    create_token(db, human="me")
    with Receiver() as rx:
        secret = a2h("notify", "add", "--webhook", rx.url + "/hook", db=db).stdout.strip()
        hub = HubProcess(db, env={"A2H_CRASH_AT": "notify.before_send"}).start()
        try:
            r = httpx.post(hub.url + "/api/requests", timeout=10 * UNIT,
                           headers={"authorization": f"Bearer {agent}"},
                           json={"to": "me", "question": "Survive a crash?"})
            assert r.status_code == 201, r.text
            op_id = r.json()["request"]["op_id"]
            assert hub.proc is not None
            hub.proc.wait(30 * UNIT)
            assert hub.proc.returncode == CRASH_EXIT
            assert rx.hits == []
            assert deliveries(db) == [("request.created", "pending", 0)]  # committed
            hub.env = {}
            hub.start()
            asyncio.run(until(lambda: len(rx.hits) >= 1, 30, "the delivery after restart"))
            event = Webhook(secret).verify(rx.hits[0].body, rx.hits[0].headers)
            assert event["type"] == "request.created"
            assert event["data"]["op_id"] == op_id
            asyncio.run(until(lambda: deliveries(db) == [("request.created", "done", 1)], 30,
                              "the delivery settled"))
            assert len(rx.hits) == 1
        finally:
            hub.stop()
    assert "pending=0" in a2h("notify", "list", db=db).stdout
