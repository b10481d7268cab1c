"""Hardening over real sockets: origins, cookies, headers, limits, slow consumers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest
from inproc import Running, serve
from test_hub_sockets import Raw, until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from client_sdk import Hub, LimitExceeded
from hub.clock import FakeClock


async def login(run: Running, token: str) -> str:
    async with httpx.AsyncClient(base_url=run.url) as http:
        r = await http.post("/api/session", json={"token": token},
                            headers={"Origin": run.url})
        assert r.status_code == 204, r.text
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        return str(r.cookies["a2h_session"])


async def test_browser_socket_needs_its_own_origin(tmp_path: Path) -> None:
    async with serve(tmp_path) as run:
        session = await login(run, run.human)
        cookie = {"Cookie": f"a2h_session={session}"}
        with pytest.raises(InvalidStatus) as info:
            await connect(run.ws_url, additional_headers=cookie, origin="http://evil.example")  # type: ignore[arg-type]
        assert info.value.response.status_code == 403
        with pytest.raises(InvalidStatus):  # no Origin at all: not a same-site browser
            await connect(run.ws_url, additional_headers=cookie)
        ws = await connect(run.ws_url, additional_headers=cookie, origin=run.url)  # type: ignore[arg-type]
        hello = orjson.loads(await ws.recv())
        assert (hello["role"], hello["handle"]) == ("human", "me")
        await ws.close()


async def test_allowed_origins_setting(tmp_path: Path) -> None:
    async with serve(tmp_path, allowed_origins=["https://inbox.example"]) as run:
        session = await login(run, run.human)
        ws = await connect(run.ws_url, additional_headers={"Cookie": f"a2h_session={session}"},
                           origin="https://inbox.example")  # type: ignore[arg-type]
        assert orjson.loads(await ws.recv())["type"] == "hello"
        await ws.close()


async def test_tokens_in_query_strings_are_not_accepted(tmp_path: Path) -> None:
    async with serve(tmp_path) as run:
        for q in (f"?token={run.agent}", f"?access_token={run.agent}"):
            with pytest.raises(InvalidStatus) as info:
                await connect(run.ws_url + q)
            assert info.value.response.status_code == 403


async def test_session_endpoints_and_headers(tmp_path: Path) -> None:
    async with serve(tmp_path) as run, httpx.AsyncClient(base_url=run.url) as http:
        r = await http.post("/api/session", json={"token": "a2h_hu_wrong"},
                            headers={"Origin": run.url})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await http.post("/api/session", json={"token": run.agent}, headers={"Origin": run.url})
        assert r.status_code == 403  # only human tokens open the inbox
        r = await http.post("/api/session", json={"token": run.human},
                            headers={"Origin": "http://evil.example"})
        assert r.status_code == 403  # cross-site
        r = await http.post("/api/session", json={"token": run.human}, headers={"Origin": run.url})
        assert r.status_code == 204
        me = await http.get("/api/me")
        assert me.json() == {"tenant": "default", "handle": "me", "role": "human"}
        # Revoking the token ends its sessions.
        assert await run.hub.store.revoke_token(run.human, run.hub.clock.now())
        assert (await http.get("/api/me")).status_code == 401
        page = await http.get("/")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        assert "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"


async def test_rate_limit_triggers_and_recovers(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serve(tmp_path, clock=clock, rate=20.0, burst=5.0) as run:
        raw = await Raw.open(run, run.agent)
        for _ in range(12):
            await raw.send({"type": "ping"})
        frames = [await raw.recv() for _ in range(12)]
        codes = [f.get("code") for f in frames if f["type"] == "error"]
        assert codes and set(codes) == {"rate_limited"}
        assert all(f["retryable"] for f in frames if f["type"] == "error")
        assert len(codes) == 12 - 5  # the burst was served, the rest refused
        # The bucket refills at 20/s: half a second later a client is served again.
        clock.advance(0.5)
        for _ in range(5):
            assert (await raw.call({"type": "ping"}))["type"] == "ok"
        assert (await raw.call({"type": "ping"}))["code"] == "rate_limited"
        await raw.ws.close()


async def test_limits_answer_with_their_own_codes(tmp_path: Path) -> None:
    async with serve(tmp_path, max_question_chars=100, max_choices=3, max_context_bytes=200,
                     max_pending_per_tenant=2, max_sockets_per_token=2) as run, \
            Hub(run.url, run.agent) as agent:
        cases = [
            (dict(question="x" * 101), "question_too_large"),
            (dict(question="Q", choices=["a", "b", "c", "d"]), "too_many_choices"),
            (dict(question="Q", context={"blob": "y" * 300}), "context_too_large"),
        ]
        for kw, code in cases:
            with pytest.raises(LimitExceeded) as info:
                await agent.ask("me", conversation="c", wait=0, **kw)  # type: ignore[arg-type]
            assert info.value.code == code
        await agent.ask("me", "one", conversation="c", wait=0)
        await agent.ask("me", "two", conversation="c", wait=0)
        with pytest.raises(LimitExceeded) as info:
            await agent.ask("me", "three", conversation="c", wait=0)
        assert info.value.code == "too_many_pending"
        # Another tenant is not affected by this tenant's limit.
        from hub.store import Role

        other = await run.hub.store.create_token("other", Role.AGENT, "x")
        await run.hub.store.create_token("other", Role.HUMAN, "me")
        async with Hub(run.url, other) as agent2:
            assert (await agent2.ask("me", "fine", conversation="c", wait=0)).pending
        # Sockets per token: the agent holds one; a second is allowed, a third is refused.
        async with Hub(run.url, run.agent):
            ws = await connect(run.ws_url, additional_headers={
                "Authorization": f"Bearer {run.agent}"})
            frame = orjson.loads(await ws.recv())
            assert frame["type"] == "error" and frame["code"] == "too_many_sockets"
            with pytest.raises(ConnectionClosed):
                await ws.recv()


async def test_slow_reader_is_resynced_and_loses_nothing(tmp_path: Path) -> None:
    async with serve(tmp_path, outbox_bytes=64 * 1024, rate=1e6, burst=1e6) as run, \
            Hub(run.url, run.agent) as agent:
        slow = await connect(run.ws_url, additional_headers={
            "Authorization": f"Bearer {run.human}"}, max_queue=1, compression=None)
        fast = await Raw.open(run, run.human)  # a well-behaved inbox socket of the same human
        big = "x" * 15_000
        ops = []
        for i in range(2000):  # up to 30 MB of pushes the slow socket never reads; kernel
            # buffers on loopback absorb several MB before the hub's outbox starts to grow
            ops.append((await agent.ask("me", f"{i} {big}", conversation=f"c{i % 20}",
                                        wait=0, expires_in=600)).op_id)
            if run.hub.gateway.resyncs:
                break
        await until(lambda: run.hub.gateway.resyncs >= 1, timeout=10)
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await asyncio.wait_for(slow.recv(), 5)
        assert info.value.rcvd is not None and info.value.rcvd.code == 4000
        # Other sockets were never blocked: the fast one got every push.
        seen = set()
        while len(seen) < len(ops):
            f = await fast.recv()
            if f["type"] == "inbox.add":
                seen.add(f["request"]["op_id"])
        # Reconnect and catch up from the store: nothing lost.
        async with Hub(run.url, run.human) as again:
            assert {i.op_id for i in await again.inbox()} == set(ops)
        await fast.ws.close()


async def test_other_tenants_requests_look_missing(tmp_path: Path) -> None:
    from hub.store import Role

    async with serve(tmp_path) as run, Hub(run.url, run.agent) as agent:
        mine = await agent.ask("me", "Mine", conversation="c", wait=0)
        other_agent = await run.hub.store.create_token("other", Role.AGENT, "x")
        other_human = await run.hub.store.create_token("other", Role.HUMAN, "me")
        async with Hub(run.url, other_agent) as a2, Hub(run.url, other_human) as h2:
            raw = await Raw.open(run, other_agent)
            missing = await raw.call({"type": "wait", "op_id": "does-not-exist", "wait": 0})
            foreign = await raw.call({"type": "wait", "op_id": mine.op_id, "wait": 0})
            assert {k: v for k, v in missing.items() if k != "id"} == \
                {k: v for k, v in foreign.items() if k != "id"}
            assert foreign["code"] == "not_found"
            assert await h2.inbox() == []  # same handle, other tenant: nothing
            from client_sdk import NotFound

            with pytest.raises(NotFound):
                await h2.respond(mine.op_id, "x")
            with pytest.raises(NotFound):
                await a2.cancel(mine.op_id)
            # Re-using the op_id in the other tenant is a different request, not a conflict.
            theirs = await a2.ask("me", "Theirs", conversation="c", op_id=mine.op_id, wait=0)
            assert theirs.op_id == mine.op_id
            await raw.ws.close()
