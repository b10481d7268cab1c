"""The plain HTTP API over a real ``a2h serve`` (httpx; no SDK)."""

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
    with HubProcess(db) as proc:
        clients = [_client(proc.url, t) for t in (agent, human, other)]
        h = Hub(proc.url, *clients, _client(proc.url), human)
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


def test_hub_issues_op_ids(hub: Hub) -> None:
    a, b = ask(hub).json()["request"]["op_id"], ask(hub).json()["request"]["op_id"]
    assert a != b and len(a) == 32 and int(a, 16) >= 0


def test_long_poll_returns_at_once_when_resolved(hub: Hub) -> None:
    op_id = ask(hub).json()["request"]["op_id"]
    r = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": "done"})
    assert r.status_code == 200, r.text
    t0 = time.monotonic()
    got = hub.agent.get(f"/api/requests/{op_id}", params={"wait": 30})
    assert time.monotonic() - t0 < 5 * UNIT
    req = got.json()["request"]
    assert (req["status"], req["value"], req["actor"]) == ("answered", "done", "human:me")
    assert req["human_seconds"] is not None


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


def test_long_poll_times_out_pending_and_extends_the_deadline(hub: Hub) -> None:
    created = ask(hub).json()["request"]
    got = hub.agent.get(f"/api/requests/{created['op_id']}", params={"wait": 0.2}).json()
    assert got["request"]["status"] == "pending"
    assert got["request"]["deadline"] >= created["deadline"]
    bad = hub.agent.get(f"/api/requests/{created['op_id']}", params={"wait": "soon"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"


def test_create_with_wait_blocks_until_answered(hub: Hub) -> None:
    key = str(uuid.uuid4())
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(ask, hub, key, wait=30)
        for _ in range(500):  # until the inbox shows it
            if any(i["op_id"] == key for i in hub.human.get("/api/inbox").json()["items"]):
                break
            time.sleep(0.01)
        assert hub.human.post(f"/api/requests/{key}/respond",
                              json={"value": "ok"}).status_code == 200
        r = fut.result(timeout=30 * UNIT)
    assert r.status_code == 201 and r.json()["request"]["value"] == "ok"


def test_cancel(hub: Hub) -> None:
    op_id = ask(hub).json()["request"]["op_id"]
    r = hub.agent.post(f"/api/requests/{op_id}/cancel")
    assert r.status_code == 200 and r.json()["request"]["status"] == "cancelled"
    assert r.json()["request"]["actor"] == "system"
    again = hub.agent.post(f"/api/requests/{op_id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_resolved"
    assert again.json()["error"]["request"]["status"] == "cancelled"
    late = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": "x"})
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"


def test_inbox_respond_and_history(hub: Hub) -> None:
    op_id = ask(hub, choices=["a", "b"]).json()["request"]["op_id"]
    items = hub.human.get("/api/inbox").json()["items"]
    assert op_id in [i["op_id"] for i in items]
    wrong = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": "c"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid"
    typo = hub.human.post(f"/api/requests/{op_id}/respond", json={"valeu": "a"})
    assert typo.status_code == 400
    r = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": "a"})
    assert r.json()["request"]["status"] == "answered"
    assert op_id not in [i["op_id"] for i in hub.human.get("/api/inbox").json()["items"]]
    hist = hub.human.get("/api/history", params={"limit": 5}).json()["items"]
    assert hist[0]["op_id"] == op_id
    assert hub.human.get("/api/history", params={"limit": 0}).status_code == 400


def test_decline(hub: Hub) -> None:
    op_id = ask(hub).json()["request"]["op_id"]
    r = hub.human.post(f"/api/requests/{op_id}/respond",
                       json={"value": "not my call", "status": "declined"})
    assert r.json()["request"]["status"] == "declined"
    got = hub.agent.get(f"/api/requests/{op_id}").json()["request"]
    assert (got["status"], got["value"]) == ("declined", "not my call")


def test_schema_answers_are_validated(hub: Hub) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    op_id = ask(hub, schema=schema).json()["request"]["op_id"]
    bad = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": {"n": "three"}})
    assert bad.status_code == 400 and "$.n" in bad.json()["error"]["message"]
    ok = hub.human.post(f"/api/requests/{op_id}/respond", json={"value": {"n": 3}})
    assert ok.json()["request"]["value"] == {"n": 3}
    refused = ask(hub, schema={"type": "date"})
    assert refused.status_code == 400 and "schema" in refused.json()["error"]["message"]


def test_another_tenant_looks_like_a_missing_request(hub: Hub) -> None:
    op_id = ask(hub).json()["request"]["op_id"]
    missing = uuid.uuid4().hex
    for path in ("/api/requests/{}", "/api/requests/{}?wait=1"):
        theirs = hub.other_agent.get(path.format(op_id))
        nothing = hub.other_agent.get(path.format(missing))
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json() == nothing.json()
        assert theirs.json()["error"]["code"] == "not_found"
    theirs = hub.other_agent.post(f"/api/requests/{op_id}/cancel")
    nothing = hub.other_agent.post(f"/api/requests/{missing}/cancel")
    assert theirs.status_code == nothing.status_code == 404
    assert theirs.json() == nothing.json()
    # and it is untouched
    assert hub.agent.get(f"/api/requests/{op_id}").json()["request"]["status"] == "pending"


def test_roles_and_tokens(hub: Hub) -> None:
    r = hub.anonymous.get("/api/inbox")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    bogus = _client(hub.url, "a2h_not_a_token")
    assert bogus.post("/api/requests", json={"to": "me", "question": "x"}).status_code == 401
    bogus.close()
    assert hub.agent.get("/api/inbox").status_code == 403
    assert hub.human.post("/api/requests", json={"to": "me", "question": "x"}).status_code \
        == 403
    assert ask(hub, to="nobody").status_code == 404


def test_bad_bodies(hub: Hub) -> None:
    r = hub.agent.post("/api/requests", content=b"{nope", headers={
        "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
    r = hub.agent.post("/api/requests", json={"to": "me"})
    assert r.status_code == 400 and "question" in r.json()["error"]["message"]
    r = hub.agent.post("/api/requests", json={"to": "me", "question": "x", "colour": 1})
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]
    r = ask(hub, "has spaces/slash")
    assert r.status_code == 400
    r = hub.agent.post("/api/requests", json={"to": "me", "question": "x" * 200_000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


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


def test_openapi_document(hub: Hub) -> None:
    doc = hub.anonymous.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in ("/api/requests", "/api/requests/{op_id}", "/api/requests/{op_id}/cancel",
                 "/api/requests/{op_id}/respond", "/api/inbox", "/api/history",
                 "/v1/chat/completions", "/v1/models"):
        assert path in doc["paths"]
