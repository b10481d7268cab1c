"""Who may do what: every HTTP endpoint and WebSocket message type × every role × own tenant /
other tenant / other human. The TABLE below is the documentation (docs/THREAT_MODEL.md).

Targets: ``own`` — a request of the caller's tenant (for a human: addressed to them);
``other_human`` — addressed to another human of the same tenant; ``other_tenant`` — a request
of another tenant. A deny of a request id is always the same ``not_found`` a missing id gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from inproc import Running, serve
from test_hub_sockets import Raw
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from client_sdk import new_op_id
from hub.notify import endpoints as notify_endpoints
from hub.protocol import Ask, OpId
from hub.store import Principal, Role

ALLOW, DENY = "allow", "deny"

# (surface, action, role, target, expected)
TABLE: list[tuple[str, str, str, str, str]] = [
    # -- WebSocket: connecting
    ("ws", "connect", "agent", "-", ALLOW),
    ("ws", "connect", "human", "-", ALLOW),
    ("ws", "connect", "admin", "-", DENY),
    ("ws", "connect", "none", "-", DENY),
    ("ws", "connect", "revoked", "-", DENY),
    # -- WebSocket: agent frames
    ("ws", "ask", "agent", "own", ALLOW),
    ("ws", "ask", "agent", "other_tenant", DENY),  # the other tenant's human is unknown here
    ("ws", "ask", "human", "own", DENY),
    ("ws", "wait", "agent", "own", ALLOW),
    ("ws", "wait", "agent", "other_tenant", DENY),
    ("ws", "wait", "human", "own", DENY),
    ("ws", "cancel", "agent", "own", ALLOW),
    ("ws", "cancel", "agent", "other_tenant", DENY),
    ("ws", "cancel", "human", "own", DENY),
    ("ws", "unwatch", "agent", "own", ALLOW),
    ("ws", "unwatch", "human", "own", DENY),
    # -- WebSocket: human frames
    ("ws", "inbox", "human", "own", ALLOW),
    ("ws", "inbox", "agent", "own", DENY),
    ("ws", "history", "human", "own", ALLOW),
    ("ws", "history", "agent", "own", DENY),
    ("ws", "respond", "human", "own", ALLOW),
    ("ws", "respond", "human", "other_human", DENY),
    ("ws", "respond", "human", "other_tenant", DENY),
    ("ws", "respond", "agent", "own", DENY),
    ("ws", "ping", "agent", "-", ALLOW),
    ("ws", "ping", "human", "-", ALLOW),
    # -- WebSocket: runs (docs/runs.md)
    ("ws", "run.list", "agent", "-", ALLOW),
    ("ws", "run.list", "human", "-", DENY),
    ("ws", "run.pending", "agent", "-", ALLOW),
    ("ws", "run.pending", "human", "-", DENY),
    # -- HTTP API
    ("http", "POST /api/requests", "agent", "own", ALLOW),
    ("http", "POST /api/requests", "agent", "other_tenant", DENY),
    ("http", "POST /api/requests", "human", "own", DENY),
    ("http", "POST /api/requests", "admin", "own", DENY),
    ("http", "POST /api/requests", "none", "own", DENY),
    ("http", "GET /api/requests/{op}", "agent", "own", ALLOW),
    ("http", "GET /api/requests/{op}", "agent", "other_tenant", DENY),
    ("http", "GET /api/requests/{op}", "human", "own", DENY),
    ("http", "POST /api/requests/{op}/cancel", "agent", "own", ALLOW),
    ("http", "POST /api/requests/{op}/cancel", "agent", "other_tenant", DENY),
    ("http", "POST /api/requests/{op}/cancel", "human", "own", DENY),
    ("http", "POST /api/requests/{op}/respond", "human", "own", ALLOW),
    ("http", "POST /api/requests/{op}/respond", "human", "other_human", DENY),
    ("http", "POST /api/requests/{op}/respond", "human", "other_tenant", DENY),
    ("http", "POST /api/requests/{op}/respond", "agent", "own", DENY),
    ("http", "GET /api/inbox", "human", "own", ALLOW),
    ("http", "GET /api/inbox", "agent", "own", DENY),
    ("http", "GET /api/history", "human", "own", ALLOW),
    ("http", "GET /api/history", "agent", "own", DENY),
    ("http", "POST /v1/chat/completions", "agent", "own", ALLOW),
    ("http", "POST /v1/chat/completions", "agent", "other_tenant", DENY),
    ("http", "POST /v1/chat/completions", "human", "own", DENY),
    ("http", "POST /v1/chat/completions", "admin", "own", DENY),
    ("http", "GET /v1/models", "agent", "own", ALLOW),
    ("http", "GET /v1/models", "none", "own", DENY),
    ("http", "POST /api/admin/tokens", "admin", "own", ALLOW),
    ("http", "POST /api/admin/tokens", "agent", "own", DENY),
    ("http", "POST /api/admin/tokens", "human", "own", DENY),
    ("http", "GET /api/admin/tokens", "admin", "own", ALLOW),
    ("http", "GET /api/admin/tokens", "agent", "own", DENY),
    ("http", "POST /api/admin/tokens/revoke", "admin", "own", ALLOW),
    ("http", "POST /api/admin/tokens/revoke", "admin", "other_tenant", DENY),
    ("http", "POST /api/admin/tokens/revoke", "agent", "own", DENY),
    ("http", "GET /api/admin/humans", "admin", "own", ALLOW),
    ("http", "GET /api/admin/humans", "human", "own", DENY),
    # -- notifications (docs/notifications.md)
    ("http", "POST /api/admin/notify", "admin", "own", ALLOW),
    ("http", "POST /api/admin/notify", "agent", "own", DENY),
    ("http", "POST /api/admin/notify", "human", "own", DENY),
    ("http", "GET /api/admin/notify", "admin", "own", ALLOW),
    ("http", "GET /api/admin/notify", "human", "own", DENY),
    ("http", "DELETE /api/admin/notify/{endpoint}", "admin", "own", ALLOW),
    ("http", "DELETE /api/admin/notify/{endpoint}", "admin", "other_tenant", DENY),
    ("http", "DELETE /api/admin/notify/{endpoint}", "agent", "own", DENY),
    ("http", "GET /api/push/key", "human", "own", ALLOW),
    ("http", "GET /api/push/key", "agent", "own", DENY),
    ("http", "POST /api/push/subscriptions", "human", "own", ALLOW),
    ("http", "POST /api/push/subscriptions", "agent", "own", DENY),
    ("http", "POST /api/push/subscriptions", "admin", "own", DENY),
    ("http", "DELETE /api/push/subscriptions", "human", "own", ALLOW),
    ("http", "DELETE /api/push/subscriptions", "human", "other_human", DENY),
    ("http", "DELETE /api/push/subscriptions", "agent", "own", DENY),
    ("http", "GET /api/me", "human", "own", ALLOW),
    ("http", "GET /api/me", "none", "own", DENY),
    # -- operations: /metrics counts across tenants (admin bearer token unless
    #    --metrics-public); /healthz is public
    ("http", "GET /metrics", "admin", "-", ALLOW),
    ("http", "GET /metrics", "agent", "-", DENY),
    ("http", "GET /metrics", "human", "-", DENY),
    ("http", "GET /metrics", "none", "-", DENY),
    # -- MCP (docs/integrations.md): agent tokens only
    ("http", "POST /mcp", "agent", "own", ALLOW),
    ("http", "POST /mcp", "human", "own", DENY),
    ("http", "POST /mcp", "admin", "own", DENY),
    ("http", "POST /mcp", "none", "-", DENY),
    ("http", "GET /mcp", "none", "-", DENY),
    ("http", "DELETE /mcp", "none", "-", DENY),
]


@dataclass
class World:
    run: Running
    tokens: dict[str, str]
    ops: dict[str, str]  # target -> op_id of a fresh pending request
    victim_tokens: dict[str, str]  # target -> a token an admin might revoke
    endpoints: dict[str, str]  # target -> a notification endpoint id
    push: dict[str, str]  # target -> a push subscription's URL


async def make_world(run: Running) -> World:
    store = run.hub.store
    admin = await store.create_token("default", Role.ADMIN, "root")
    revoked = await store.create_token("default", Role.AGENT, "gone")
    await store.revoke_token(revoked, run.hub.clock.now())
    other_agent = await store.create_token("other", Role.AGENT, "x")
    await store.create_token("other", Role.HUMAN, "them")
    tokens = {"agent": run.agent, "human": run.human, "admin": admin, "revoked": revoked}

    async def ask(tenant: str, agent: str, to: str) -> str:
        who = Principal(tenant, Role.AGENT, agent, "-")
        req, _ = await run.hub.ask_and_wait(
            who, Ask(0, OpId(new_op_id()), to, f"for {to}",
                     "authz", wait=0, expires_in=600))
        return req.op_id

    ops = {"own": await ask("default", "bot", "me"),
           "other_human": await ask("default", "bot", "you"),
           "other_tenant": await ask("other", "x", "them")}
    victims = {"own": await store.create_token("default", Role.AGENT, "victim"),
               "other_tenant": await store.create_token("other", Role.AGENT, "victim")}
    assert other_agent
    now = run.hub.clock.now()
    endpoints, push = {}, {}
    for target, tenant, human in (("own", "default", "me"), ("other_human", "default", "you"),
                                  ("other_tenant", "other", "them")):
        hook, _ = notify_endpoints.webhook(tenant, None, "http://127.0.0.1:9/hook", now)
        endpoints[target] = (await store.add_endpoint(hook)).id
        push[target] = f"https://push.example/{new_op_id()}"
        await store.add_endpoint(notify_endpoints.push_subscription(
            tenant, human, {"endpoint": push[target], "keys": {"p256dh": "BA", "auth": "AA"}},
            now))
    return World(run, tokens, ops, victims, endpoints, push)


def frame_for(action: str, target: str, w: World) -> dict[str, Any]:
    op = w.ops.get(target, w.ops["own"])
    to = "them" if target == "other_tenant" else "me"
    return {
        "ask": {"type": "ask", "op_id": f"new-{target}", "to": to, "question": "Q",
                "conversation": "authz", "wait": 0},
        "wait": {"type": "wait", "op_id": op, "wait": 0},
        "cancel": {"type": "cancel", "op_id": op},
        "unwatch": {"type": "unwatch", "op_id": op},
        "inbox": {"type": "inbox"},
        "history": {"type": "history"},
        "respond": {"type": "respond", "op_id": op, "value": "ok"},
        "ping": {"type": "ping"},
        "run.list": {"type": "run.list"},
        "run.pending": {"type": "run.pending"},
    }[action]


async def try_ws(action: str, role: str, target: str, w: World) -> str:
    token = w.tokens.get(role)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        ws = await connect(w.run.ws_url, additional_headers=headers)
    except InvalidStatus as exc:
        assert exc.response.status_code == 403
        return DENY
    hello = orjson.loads(await ws.recv())
    assert hello["type"] == "hello"
    raw = Raw(ws)
    try:
        if action == "connect":
            return ALLOW
        reply = await raw.call(frame_for(action, target, w))
        if reply["type"] == "ok":
            if action == "inbox":  # only the caller's own requests are listed
                assert {i["to"] for i in reply["items"]} <= {hello["handle"]}
                assert w.ops["other_tenant"] not in {i["op_id"] for i in reply["items"]}
            return ALLOW
        assert reply["code"] in ("forbidden", "unauthorized", "not_found"), reply
        return DENY
    finally:
        await ws.close()


async def try_http(action: str, role: str, target: str, w: World) -> str:
    method, path = action.split(" ", 1)
    op = w.ops.get(target, w.ops["own"])
    path = path.replace("{op}", op).replace("{endpoint}", w.endpoints.get(target, ""))
    token = w.tokens.get(role)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body: Any = None
    if path == "/api/requests":
        body = {"to": "them" if target == "other_tenant" else "me", "question": "Q",
                "conversation": "authz"}
    elif path.endswith("/respond"):
        body = {"value": "ok"}
    elif path == "/v1/chat/completions":
        body = {"model": "them" if target == "other_tenant" else "me",
                "messages": [{"role": "user", "content": "Q?"}], "wait": 0}
    elif path == "/api/admin/tokens" and method == "POST":
        body = {"role": "agent", "name": "new"}
    elif path == "/api/admin/tokens/revoke":
        body = {"token": w.victim_tokens[target]}
    elif path == "/api/admin/notify" and method == "POST":
        body = {"webhook": "http://127.0.0.1:9/new"}
    elif path == "/api/push/subscriptions":
        body = {"endpoint": w.push.get(target, ""), "keys": {"p256dh": "BA", "auth": "AA"}}
    elif path == "/mcp":
        headers["accept"] = "application/json, text/event-stream"
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "authz", "version": "1"}}}
    async with httpx.AsyncClient(base_url=w.run.url, timeout=10) as http:
        r = await http.request(method, path, json=body, headers=headers)
    if r.status_code < 300 or (path == "/v1/chat/completions" and r.status_code == 408):
        return ALLOW  # 408: the person has not answered yet — the call itself was allowed
    assert r.status_code in (401, 403, 404), (action, role, target, r.status_code, r.text)
    return DENY


@pytest.fixture(scope="module")
def table_results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], str]:
    import asyncio

    results: dict[tuple[str, ...], str] = {}

    async def go() -> None:
        async with serve(tmp_path_factory.mktemp("authz")) as run:
            for surface, action, role, target, _ in TABLE:
                w = await make_world(run)  # fresh requests for every row
                fn = try_ws if surface == "ws" else try_http
                results[(surface, action, role, target)] = await fn(action, role, target, w)

    import threading

    errors: list[BaseException] = []

    def runner() -> None:
        try:
            asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=runner)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("surface,action,role,target,expected", TABLE,
                         ids=[f"{s}:{a}:{r}:{t}" for s, a, r, t, _ in TABLE])
def test_authorization_table(table_results: dict[tuple[str, ...], str], surface: str,
                             action: str, role: str, target: str, expected: str) -> None:
    assert table_results[(surface, action, role, target)] == expected


def test_table_covers_every_message_type_and_endpoint() -> None:
    from hub.config import Settings
    from hub.protocol import _PARSERS
    from hub.server import create_app

    ws_actions = {a for s, a, *_ in TABLE if s == "ws"}
    client_types = set(_PARSERS)
    run_frames = {t for t in client_types if t.startswith("run.")}
    # Every core client frame type is in the table; run frames beyond list/pending need a
    # live run and are covered (role and tenant) by tests/test_runs_e2e.py.
    assert client_types - run_frames <= ws_actions
    assert {"run.list", "run.pending"} <= ws_actions
    app = create_app(Settings(db=str(Path("/nonexistent/never-opened.db"))))
    http_actions = {a for s, a, *_ in TABLE if s == "http"}
    for route in app.routes:
        methods = getattr(route, "methods", None)
        path = getattr(route, "path", "")
        if not methods or path in ("/healthz", "/openapi.json", "/api/session") \
                or path.startswith("/v1/models/"):
            continue  # public, or the session exchange (tests/test_security.py)
        path = path.replace("{op_id:str}", "{op}").replace("{endpoint_id:str}", "{endpoint}")
        for m in methods - {"HEAD"}:
            assert f"{m} {path}" in http_actions, f"{m} {path} is missing from the table"
