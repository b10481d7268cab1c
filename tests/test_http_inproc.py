"""The plain HTTP API, sessions, /metrics and /openapi.json, in-process: httpx's
ASGITransport against the app, a real SQLiteStore in tmp_path and the fake clock.

ASGITransport does not run the lifespan, so :func:`edge` starts the service itself. The
helpers here (``edge``, ``Live``, ``NapClock``) serve the other ``*_inproc`` tests too.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from e2e_util import until
from starlette.applications import Starlette

from hub.cli import build_parser, settings_from_args
from hub.clock import FakeClock
from hub.config import Settings
from hub.errors import Unauthorized
from hub.protocol import MAX_JSON_DEPTH
from hub.server import create_app
from hub.server.openapi import OPERATIONS, undescribed
from hub.service import HubService
from hub.store import Role, open_store

BASE = "http://hub.test"


class NapClock(FakeClock):
    """A fake clock that also lists the durations of the sleeps parked on it, so a test can
    wait until a given sleeper (an SSE keep-alive tick, say) is in place."""

    def __init__(self) -> None:
        super().__init__()
        self.naps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        try:
            await super().sleep(seconds)
        finally:
            self.naps.remove(seconds)


@dataclass
class Edge:
    app: Starlette
    hub: HubService
    clock: NapClock
    agent: str
    human: str
    human2: str
    admin: str
    other_agent: str  # tenant "other", whose human is "them"

    def client(self, token: str | None = None, **headers: str) -> httpx.AsyncClient:
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=BASE,
                                 headers=headers)

    async def call(self, method: str, path: str, token: str | None = None,
                   **kw: Any) -> httpx.Response:
        async with self.client(token) as http:
            return await http.request(method, path, **kw)


@contextlib.asynccontextmanager
async def edge(tmp: Path, **settings: Any) -> AsyncIterator[Edge]:
    """A hub app with its service started (ASGITransport runs no lifespan)."""
    clock = NapClock()
    s = Settings(db=str(tmp / "hub.db"), **settings)
    app = create_app(s, store=open_store(s.db), clock=clock, web_dir=tmp / "no-web")
    hub: HubService = app.state.hub
    async with hub:
        store = hub.store
        tokens = [await store.create_token("default", Role.AGENT, "bot"),
                  await store.create_token("default", Role.HUMAN, "me"),
                  await store.create_token("default", Role.HUMAN, "you"),
                  await store.create_token("default", Role.ADMIN, "root"),
                  await store.create_token("other", Role.AGENT, "spy")]
        await store.create_token("other", Role.HUMAN, "them")
        yield Edge(app, hub, clock, *tokens)


class Live:
    """One HTTP call into the ASGI app, its response read as the app sends it (httpx's
    ASGITransport hands the body over only once the app has finished)."""

    def __init__(self, app: Starlette, method: str, path: str, token: str,
                 body: Any) -> None:
        self._q: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        self._payload = orjson.dumps(body)
        self._sent = False
        self._gone = asyncio.Event()
        self._buffer = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5000),
                 "server": ("hub.test", 80), "state": {},
                 "headers": [(b"host", b"hub.test"), (b"content-type", b"application/json"),
                             (b"authorization", f"Bearer {token}".encode())]}
        self.task = asyncio.ensure_future(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": self._payload, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        await self._q.put(message)

    async def start(self) -> Live:
        msg = await asyncio.wait_for(self._q.get(), 10)
        assert msg["type"] == "http.response.start", msg
        self.status = msg["status"]
        self.headers = {k.decode(): v.decode() for k, v in msg["headers"]}
        return self

    async def event(self) -> str | None:
        """The next SSE event (``data: ...`` or a ``: comment``), or None at the end."""
        while b"\n\n" not in self._buffer:
            msg = await asyncio.wait_for(self._q.get(), 10)
            self._buffer += msg.get("body", b"")
            if not msg.get("more_body", False):
                if not self._buffer:
                    return None
                break
        event, _, self._buffer = self._buffer.partition(b"\n\n")
        return event.decode()

    async def rest(self) -> list[str]:
        out: list[str] = []
        while (ev := await self.event()) is not None:
            out.append(ev)
        await asyncio.wait_for(self.task, 10)
        return out

    async def aclose(self) -> None:
        self._gone.set()
        if not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


def data(event: str | None) -> Any:
    assert event is not None and event.startswith("data: "), event
    return orjson.loads(event[6:])


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


async def ask(e: Edge, key: str | None = None, **body: Any) -> httpx.Response:
    payload = {"to": "me", "question": f"q {uuid.uuid4()}", "conversation": "http", **body}
    headers = {"Idempotency-Key": key} if key else {}
    return await e.call("POST", "/api/requests", e.agent, json=payload, headers=headers)


async def inbox(e: Edge, token: str | None = None) -> list[dict[str, Any]]:
    r = await e.call("GET", "/api/inbox", token or e.human)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


# ---------------------------------------------------------------------------- agents


async def test_create_is_idempotent_and_conflicts(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        key = str(uuid.uuid4())
        body = {"question": f"Deploy {key}?", "choices": ["yes", "no"]}
        first = await ask(e, key, **body)
        assert first.status_code == 201, first.text
        assert first.headers["location"] == f"/api/requests/{key}"
        assert first.json()["attached"] is False
        again = await ask(e, key, **body)
        assert again.status_code == 200 and again.json()["attached"] is True
        assert again.json()["request"]["op_id"] == key
        assert [i["op_id"] for i in await inbox(e)] == [key]
        clash = await ask(e, key, question="something else")
        assert clash.status_code == 409
        err = clash.json()["error"]
        assert err["code"] == "conflict" and err["retryable"] is False
        assert err["request"]["question"] == body["question"]
        ra = (await ask(e)).json()["request"]
        rb = (await ask(e)).json()["request"]
        a, b = ra["op_id"], rb["op_id"]
        # issued by the hub: the time in microseconds (13 hex digits), then 128 random bits
        assert a != b and len(a) == 45 and int(a, 16) >= 0 and a[13:] != b[13:]
        assert a[:13] <= b[:13] and int(a[:13], 16) <= ra["created_at"] * 1_000_000 + 1


async def test_long_poll_returns_at_once_when_resolved(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        op_id = (await ask(e)).json()["request"]["op_id"]
        r = await e.call("POST", f"/api/requests/{op_id}/respond", e.human,
                         json={"value": "done"})
        assert r.status_code == 200, r.text
        got = await e.call("GET", f"/api/requests/{op_id}", e.agent, params={"wait": 600})
        req = got.json()["request"]
        assert (req["status"], req["value"], req["actor"]) == ("answered", "done", "human:me")
        assert req["human_seconds"] is not None


async def test_long_poll_wakes_on_the_answer(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        created = (await ask(e)).json()["request"]
        op_id = created["op_id"]
        poll = asyncio.ensure_future(
            e.call("GET", f"/api/requests/{op_id}", e.agent, params={"wait": 100}))

        async def parked() -> bool:  # the re-attach moved the deadline to now + 100 + 10
            return any(i["op_id"] == op_id and i["deadline"] > created["deadline"]
                       for i in await inbox(e))
        await until(parked, 10, "the long-poll re-attached")
        assert not poll.done()
        r = await e.call("POST", f"/api/requests/{op_id}/respond", e.human,
                         json={"value": "now"})
        assert r.status_code == 200
        req = (await asyncio.wait_for(poll, 10)).json()["request"]
        assert req["status"] == "answered" and req["value"] == "now"


async def test_long_poll_pending_wait_bounds_and_deadline(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        created = (await ask(e)).json()["request"]
        path = f"/api/requests/{created['op_id']}"
        got = (await e.call("GET", path, e.agent, params={"wait": 0})).json()["request"]
        assert got["status"] == "pending" and got["deadline"] >= created["deadline"]
        for bad in ("soon", "601", "-1", "nan", "1e308"):
            r = await e.call("GET", path, e.agent, params={"wait": bad})
            assert r.status_code == 400, bad
            assert r.json()["error"]["code"] == "invalid" and \
                r.json()["error"]["param"] == "wait"
        r = await ask(e, wait=601)
        assert r.status_code == 400 and r.json()["error"]["param"] == "wait"
        r = await ask(e, expires_in=1e308)
        assert r.status_code == 400 and r.json()["error"]["param"] == "expires_in"


async def test_create_with_wait_blocks_until_answered(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        key = str(uuid.uuid4())
        call = asyncio.ensure_future(ask(e, key, wait=30))

        async def listed() -> bool:
            return any(i["op_id"] == key for i in await inbox(e))
        await until(listed, 10, "the ask reached the inbox")
        r = await e.call("POST", f"/api/requests/{key}/respond", e.human, json={"value": "ok"})
        assert r.status_code == 200
        done = await asyncio.wait_for(call, 10)
        assert done.status_code == 201 and done.json()["request"]["value"] == "ok"


async def test_expiry_on_the_fake_clock(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        key = str(uuid.uuid4())
        call = asyncio.ensure_future(ask(e, key, wait=300, expires_in=5))

        async def listed() -> bool:
            return any(i["op_id"] == key for i in await inbox(e))
        await until(listed, 10, "the ask reached the inbox")
        e.clock.advance(6)
        done = await asyncio.wait_for(call, 10)
        assert done.json()["request"]["status"] == "expired"


async def test_cancel(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        op_id = (await ask(e)).json()["request"]["op_id"]
        r = await e.call("POST", f"/api/requests/{op_id}/cancel", e.agent)
        assert r.status_code == 200 and r.json()["request"]["status"] == "cancelled"
        assert r.json()["request"]["actor"] == "system"
        again = await e.call("POST", f"/api/requests/{op_id}/cancel", e.agent)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "already_resolved"
        assert again.json()["error"]["request"]["status"] == "cancelled"
        late = await e.call("POST", f"/api/requests/{op_id}/respond", e.human,
                            json={"value": "x"})
        assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"


# ---------------------------------------------------------------------------- humans


async def test_inbox_respond_decline_and_history(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        op_id = (await ask(e, choices=["a", "b"])).json()["request"]["op_id"]
        assert op_id in [i["op_id"] for i in await inbox(e)]
        assert await inbox(e, e.human2) == []  # someone else's inbox
        path = f"/api/requests/{op_id}/respond"
        wrong = await e.call("POST", path, e.human, json={"value": "c"})
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid"
        typo = await e.call("POST", path, e.human, json={"valeu": "a"})
        assert typo.status_code == 400 and "valeu" in typo.json()["error"]["message"]
        r = await e.call("POST", path, e.human, json={"value": "a"})
        assert r.json()["request"]["status"] == "answered"
        assert op_id not in [i["op_id"] for i in await inbox(e)]
        hist = (await e.call("GET", "/api/history", e.human, params={"limit": 5})).json()
        assert hist["items"][0]["op_id"] == op_id
        for bad in ("0", "501", "x"):
            r = await e.call("GET", "/api/history", e.human, params={"limit": bad})
            assert r.status_code == 400
        declined = (await ask(e)).json()["request"]["op_id"]
        r = await e.call("POST", f"/api/requests/{declined}/respond", e.human,
                         json={"value": "not my call", "status": "declined"})
        assert r.json()["request"]["status"] == "declined"
        got = (await e.call("GET", f"/api/requests/{declined}", e.agent)).json()["request"]
        assert (got["status"], got["value"]) == ("declined", "not my call")


async def test_schema_answers_are_validated(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        op_id = (await ask(e, schema=schema)).json()["request"]["op_id"]
        path = f"/api/requests/{op_id}/respond"
        bad = await e.call("POST", path, e.human, json={"value": {"n": "three"}})
        assert bad.status_code == 400 and "$.n" in bad.json()["error"]["message"]
        ok = await e.call("POST", path, e.human, json={"value": {"n": 3}})
        assert ok.json()["request"]["value"] == {"n": 3}
        refused = await ask(e, schema={"type": "date"})
        assert refused.status_code == 400 and "schema" in refused.json()["error"]["message"]


async def test_another_tenant_looks_like_a_missing_request(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        op_id = (await ask(e)).json()["request"]["op_id"]
        missing = uuid.uuid4().hex
        for path in ("/api/requests/{}", "/api/requests/{}?wait=1"):
            theirs = await e.call("GET", path.format(op_id), e.other_agent)
            nothing = await e.call("GET", path.format(missing), e.other_agent)
            assert theirs.status_code == nothing.status_code == 404
            assert theirs.json() == nothing.json()
            assert theirs.json()["error"]["code"] == "not_found"
        theirs = await e.call("POST", f"/api/requests/{op_id}/cancel", e.other_agent)
        nothing = await e.call("POST", f"/api/requests/{missing}/cancel", e.other_agent)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json() == nothing.json()
        r = await e.call("GET", f"/api/requests/{op_id}", e.agent)
        assert r.json()["request"]["status"] == "pending"  # untouched


# ---------------------------------------------------------------------------- errors


async def test_roles_and_tokens(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("GET", "/api/inbox")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["retryable"] is False
        r = await e.call("POST", "/api/requests", "a2h_not_a_token",
                         json={"to": "me", "question": "x"})
        assert r.status_code == 401
        r = await e.call("GET", "/api/inbox", e.agent)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert "www-authenticate" not in r.headers
        r = await e.call("POST", "/api/requests", e.human, json={"to": "me", "question": "x"})
        assert r.status_code == 403
        assert (await ask(e, to="nobody")).status_code == 404
        assert (await e.call("GET", "/api/inbox", e.admin)).status_code == 403


async def test_bad_bodies(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/requests", e.agent, content=b"{nope",
                         headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
        r = await e.call("POST", "/api/requests", e.agent, json=[1])
        assert r.status_code == 400 and "object" in r.json()["error"]["message"]
        r = await e.call("POST", "/api/requests", e.agent, json={"to": "me"})
        assert r.status_code == 400 and "question" in r.json()["error"]["message"]
        r = await e.call("POST", "/api/requests", e.agent,
                         json={"to": "me", "question": "x", "colour": 1})
        assert r.status_code == 400 and "colour" in r.json()["error"]["message"]
        r = await ask(e, "has spaces/slash")
        assert r.status_code == 400 and r.json()["error"]["param"] == "op_id"
        r = await ask(e, to="a b")
        assert r.status_code == 400 and r.json()["error"]["param"] == "to"
        r = await ask(e, conversation="x\ny")
        assert r.status_code == 400 and r.json()["error"]["param"] == "conversation"
        r = await e.call("POST", "/api/requests", e.agent,
                         json={"to": "me", "question": "x" * 200_000})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


async def test_json_nesting_is_bounded_at_decode(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        ok = await ask(e, context=nested(MAX_JSON_DEPTH - 2))
        assert ok.status_code == 201, ok.text
        for path, token, body in (
                ("/api/requests", e.agent, {"to": "me", "question": "q",
                                            "context": nested(MAX_JSON_DEPTH)}),
                (f"/api/requests/{ok.json()['request']['op_id']}/respond", e.human,
                 {"value": nested(300)}),
                ("/api/admin/tokens", e.admin, {"role": "agent", "name": nested(100)}),
                ("/api/session", None, {"token": nested(100)})):
            r = await e.call("POST", path, token, json=body, headers={"origin": BASE})
            assert r.status_code == 400, (path, r.text)
            assert r.json()["error"]["code"] == "invalid"
            if path != "/api/session":
                assert "nested deeper" in r.json()["error"]["message"]
        # the inbox still lists everything
        assert len(await inbox(e)) == 1


async def test_an_internal_error_is_a_retryable_503(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    async with edge(tmp_path) as e:
        async def broken(*a: Any, **kw: Any) -> Any:
            raise RuntimeError("disk on fire")
        monkeypatch.setattr(type(e.hub), "inbox", broken)
        r = await e.call("GET", "/api/inbox", e.human)
        assert r.status_code == 503
        assert r.json() == {"error": {"code": "unavailable", "message": "internal error",
                                      "retryable": True}}
        assert "disk on fire" not in r.text


async def test_revoked_token_ends_a_long_poll_with_401(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The service raises Unauthorized from a wait when the caller's token is revoked or
    expires while it blocks; the long-poll (and a create that waits) answers 401."""
    async with edge(tmp_path) as e:
        op_id = (await ask(e)).json()["request"]["op_id"]
        revoked = asyncio.Event()
        blocked: list[str] = []

        async def wait_for(*a: Any, **kw: Any) -> Any:
            blocked.append("x")
            await revoked.wait()
            raise Unauthorized("the token was revoked")
        monkeypatch.setattr(type(e.hub), "wait_for", wait_for)
        monkeypatch.setattr(type(e.hub), "ask_and_wait", wait_for)
        poll = asyncio.ensure_future(
            e.call("GET", f"/api/requests/{op_id}", e.agent, params={"wait": 300}))
        create = asyncio.ensure_future(ask(e, wait=300))
        await until(lambda: len(blocked) == 2, 10, "both calls block in the service")
        assert not poll.done() and not create.done()
        revoked.set()
        for r in (await asyncio.wait_for(poll, 10), await asyncio.wait_for(create, 10)):
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"


async def test_revoking_through_the_admin_api_ends_blocked_calls(tmp_path: Path) -> None:
    """The real thing: an admin revokes the agent's token while its long-poll and its
    waiting create block in the service; both answer 401 at once."""
    async with edge(tmp_path) as e:
        created = (await ask(e)).json()["request"]
        op_id = created["op_id"]
        poll = asyncio.ensure_future(
            e.call("GET", f"/api/requests/{op_id}", e.agent, params={"wait": 300}))
        key = str(uuid.uuid4())
        create = asyncio.ensure_future(ask(e, key, wait=300))

        async def both_parked() -> bool:
            items = {i["op_id"]: i for i in await inbox(e)}
            return key in items and items[op_id]["deadline"] > created["deadline"]
        await until(both_parked, 10, "both calls block")
        r = await e.call("POST", "/api/admin/tokens/revoke", e.admin, json={"token": e.agent})
        assert r.status_code == 204
        for done in (await asyncio.wait_for(poll, 10), await asyncio.wait_for(create, 10)):
            assert done.status_code == 401 and done.json()["error"]["code"] == "unauthorized"
        assert (await e.call("GET", "/api/me", e.agent)).status_code == 401


# ---------------------------------------------------------------------------- sessions


async def test_cookie_session_refuses_cross_site_changes(tmp_path: Path) -> None:
    async with edge(tmp_path) as e, e.client() as browser:
        r = await browser.post("/api/session", json={"token": e.human},
                               headers={"origin": "https://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = await browser.post("/api/session", json={"token": e.agent},
                               headers={"origin": BASE})
        assert r.status_code == 403
        r = await browser.post("/api/session", json={"token": "a2h_hu_wrong"},
                               headers={"origin": BASE})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await browser.post("/api/session", content=b"{", headers={"origin": BASE})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid"
        r = await browser.post("/api/session", json={"token": e.human},
                               headers={"origin": BASE})
        assert r.status_code == 204
        me = await browser.get("/api/me")
        assert me.json() == {"tenant": "default", "handle": "me", "role": "human"}
        op_id = (await ask(e)).json()["request"]["op_id"]
        listed = (await browser.get("/api/inbox")).json()["items"]
        assert op_id in [i["op_id"] for i in listed]
        evil = await browser.post(f"/api/requests/{op_id}/respond", json={"value": "x"},
                                  headers={"origin": "https://evil.example"})
        assert evil.status_code == 403
        sneaky = await browser.post(f"/api/requests/{op_id}/respond", json={"value": "x"},
                                    headers={"sec-fetch-site": "cross-site"})
        assert sneaky.status_code == 403
        ok = await browser.post(f"/api/requests/{op_id}/respond", json={"value": "x"},
                                headers={"origin": BASE})
        assert ok.status_code == 200 and ok.json()["request"]["status"] == "answered"
        # a cookie opens neither /v1 nor the admin API: bearer tokens only
        assert (await browser.get("/v1/models")).status_code == 401
        assert (await browser.get("/api/admin/humans")).status_code == 401
        r = await browser.delete("/api/session", headers={"origin": BASE})
        assert r.status_code == 204
        assert (await browser.get("/api/me")).status_code == 401


async def test_me_with_a_bearer_token(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("GET", "/api/me", e.agent)
        assert r.json() == {"tenant": "default", "handle": "bot", "role": "agent"}
        r = await e.call("GET", "/api/me")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


# ---------------------------------------------------------------------------- ops


async def test_metrics_need_an_admin_token_by_default(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("GET", "/metrics")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert (await e.call("GET", "/metrics", e.agent)).status_code == 403
        assert (await e.call("GET", "/metrics", e.human)).status_code == 403
        r = await e.call("GET", "/metrics", e.admin)
        assert r.status_code == 200 and "a2h_rooms_live" in r.text
        assert r.headers["content-type"].startswith("text/plain")
        health = await e.call("GET", "/healthz")
        body = health.json()
        assert health.status_code == 200 and body["ok"] is True
        assert body["store"]["ok"] is True and body["store"]["seconds"] >= 0
        assert body["bus"] == {"ok": True, "kind": "local", "seconds": 0.0}
        assert "a2h_store_ping_seconds" in r.text and "a2h_bus_up 1" in r.text


async def test_metrics_public_setting_opens_them(tmp_path: Path) -> None:
    assert Settings.from_env({"A2H_METRICS_PUBLIC": "1"}).metrics_public is True
    args = build_parser().parse_args(["serve", "--metrics-public", "true"])
    assert settings_from_args(args).metrics_public is True
    async with edge(tmp_path, metrics_public=True) as e:
        r = await e.call("GET", "/metrics")
        assert r.status_code == 200 and "a2h_rooms_live" in r.text


async def test_openapi_describes_every_route(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        assert undescribed(e.app.routes) == []
        doc = (await e.call("GET", "/openapi.json")).json()
        assert doc["openapi"].startswith("3.")
        served = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
        assert served == set(OPERATIONS)  # nothing described that is not served
        for path in ("/api/requests", "/api/requests/{op_id}", "/api/requests/{op_id}/cancel",
                     "/api/requests/{op_id}/respond", "/api/inbox", "/api/history",
                     "/v1/chat/completions", "/v1/models", "/v1/models/{model}",
                     "/api/admin/tokens", "/metrics"):
            assert path in doc["paths"], path
        wait = doc["paths"]["/api/requests/{op_id}"]["get"]["parameters"][1]
        assert wait["schema"]["maximum"] == 600
