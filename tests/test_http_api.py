"""The plain HTTP API over a real ``a2h serve`` (httpx; no SDK): a small end-to-end set.

Shapes, errors and bounds are tested in-process in tests/test_http_inproc.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2e_util import UNIT, HubProcess, create_token

pytestmark = pytest.mark.e2e


@dataclass
class Hub:
    url: str
    agent: httpx.Client
    human: httpx.Client
    other_agent: httpx.Client  # another tenant
    anonymous: httpx.Client
    human_token: str
    admin_token: str


def _client(url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=30 * UNIT)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    db: Path = tmp_path_factory.mktemp("http") / "hub.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    create_token(db, human="you")
    other = create_token(db, agent="spy", tenant="other")
    create_token(db, human="me", tenant="other")
    admin = create_token(db, admin=True)
    with HubProcess(db) as proc:
        clients = [_client(proc.url, t) for t in (agent, human, other)]
        h = Hub(proc.url, *clients, _client(proc.url), human, admin)
        try:
            yield h
        finally:
            for c in (*clients, h.anonymous):
                c.close()


def ask(hub: Hub, key: str | None = None, **body: object) -> httpx.Response:
    payload = {"to": "me", "question": f"q {uuid.uuid4()}", "conversation": "http", **body}
    headers = {"Idempotency-Key": key} if key else {}
    return hub.agent.post("/api/requests", json=payload, headers=headers)


def test_create_is_idempotent(hub: Hub) -> None:
    key = str(uuid.uuid4())
    body = {"question": f"Deploy {key}?", "choices": ["yes", "no"]}
    first = ask(hub, key, **body)
    assert first.status_code == 201, first.text
    assert first.headers["location"] == f"/api/requests/{key}"
    assert first.json()["attached"] is False
    again = ask(hub, key, **body)
    assert again.status_code == 200
    assert again.json()["attached"] is True
    assert again.json()["request"]["op_id"] == first.json()["request"]["op_id"] == key
    items = [i for i in hub.human.get("/api/inbox").json()["items"] if i["op_id"] == key]
    assert len(items) == 1
    # same key, another payload: conflict, carrying the request that holds the key
    clash = ask(hub, key, question="something else")
    assert clash.status_code == 409
    err = clash.json()["error"]
    assert err["code"] == "conflict" and err["retryable"] is False
    assert err["request"]["question"] == body["question"]


def test_long_poll_wakes_on_the_answer(hub: Hub) -> None:
    created = ask(hub).json()["request"]
    op_id = created["op_id"]
    with ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        poll = pool.submit(hub.agent.get, f"/api/requests/{op_id}", params={"wait": 100})
        # The long-poll subscribes, then re-attaches, which pushes the open-ended deadline
        # to now + 100 + 10 s: once the inbox shows that, the poll is parked.
        for _ in range(1000):
            item = next(i for i in hub.human.get("/api/inbox").json()["items"]
                        if i["op_id"] == op_id)
            if item["deadline"] > created["deadline"]:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the long-poll never re-attached")
        assert not poll.done()
        assert hub.human.post(f"/api/requests/{op_id}/respond",
                              json={"value": "now"}).status_code == 200
        req = poll.result(timeout=30 * UNIT).json()["request"]
    assert req["status"] == "answered" and req["value"] == "now"
    assert time.monotonic() - t0 < 10 * UNIT


def test_cookie_session_refuses_cross_site_changes(hub: Hub) -> None:
    with httpx.Client(base_url=hub.url, timeout=30 * UNIT) as browser:
        origin = hub.url
        assert browser.post("/api/session", json={"token": hub.human_token},
                            headers={"Origin": origin}).status_code == 204
        op_id = ask(hub).json()["request"]["op_id"]
        assert op_id in [i["op_id"] for i in browser.get("/api/inbox").json()["items"]]
        evil = browser.post(f"/api/requests/{op_id}/respond", json={"value": "x"},
                            headers={"Origin": "https://evil.example"})
        assert evil.status_code == 403
        ok = browser.post(f"/api/requests/{op_id}/respond", json={"value": "x"},
                          headers={"Origin": origin})
        assert ok.status_code == 200 and ok.json()["request"]["status"] == "answered"


def test_openapi_and_metrics(hub: Hub) -> None:
    doc = hub.anonymous.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.") and "/api/requests" in doc["paths"]
    assert hub.anonymous.get("/healthz").json()["ok"] is True
    r = hub.anonymous.get("/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = hub.anonymous.get("/metrics", headers={"Authorization": f"Bearer {hub.admin_token}"})
    assert r.status_code == 200 and "a2h_rooms_live" in r.text
