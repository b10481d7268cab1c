"""Operations endpoints: /healthz proves the store answers; /metrics in Prometheus text.

``/healthz`` is public: ``{"ok", "store": {"ok", "seconds"}, "bus": {"ok", "kind",
"seconds"}}``, HTTP 200 while the store answers (a load balancer's health check). A bus
that is down is reported but does not fail the check: without it pushes between nodes wait
for the reconcile loop, and nothing is lost. ``/metrics`` shows counts across every tenant, so it needs an admin
bearer token (Prometheus: ``authorization: {credentials: <token>}`` in the scrape config),
unless the hub runs with ``--metrics-public`` (``A2H_METRICS_PUBLIC=1``).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from hub.server.auth import authenticate
from hub.server.errors import endpoint
from hub.service import HubService
from hub.store import Role


async def probe(hub: HubService) -> dict[str, Any]:
    """The store and the bus, each with whether it answered and how long it took."""
    out: dict[str, Any] = {}
    t = time.perf_counter()
    try:
        store_ok = await hub.store.ping()
        out["store"] = {"ok": store_ok, "seconds": round(time.perf_counter() - t, 6)}
    except Exception as exc:
        out["store"] = {"ok": False, "error": str(exc)}
    bus_kind = hub.bus.statistics().get("kind", "local")
    try:
        out["bus"] = {"ok": True, "kind": bus_kind,
                      "seconds": round(await hub.bus.ping(), 6)}
    except Exception as exc:
        out["bus"] = {"ok": False, "kind": bus_kind, "error": str(exc)}
    out["ok"] = bool(out["store"]["ok"])
    return out


async def healthz(request: Request) -> JSONResponse:
    hub: HubService = request.app.state.hub
    health = await probe(hub)
    return JSONResponse(health, status_code=200 if health["ok"] else 503)


@endpoint
async def metrics(request: Request) -> Response:
    hub: HubService = request.app.state.hub
    if not hub.settings.metrics_public:
        await authenticate(request, Role.ADMIN, cookies=False)
    st = hub.statistics()
    lines: list[str] = []

    def gauge(name: str, value: float, help_: str, labels: str = "") -> None:
        if not any(line.startswith(f"# HELP {name} ") for line in lines):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} gauge")
        lines.append(f"{name}{labels} {value}")

    roles: dict[str, int] = {}
    for conn in hub.gateway.connections:
        role = getattr(conn.meta, "role", None)
        key = role.value if role is not None else "unknown"
        roles[key] = roles.get(key, 0) + 1
    for role in ("agent", "human"):
        gauge("a2h_connections", roles.get(role, 0), "Open WebSocket connections.",
              f'{{role="{role}"}}')
    r, g, a, s = st["rooms"], st["gateway"], st["alarms"], st["store"]
    gauge("a2h_rooms_live", r["live_rooms"], "Rooms in memory.")
    gauge("a2h_room_evictions_total", r["evictions"], "Rooms dropped from memory.")
    gauge("a2h_room_rebuilds_total", r["rebuilds"], "Rooms rebuilt from the store.")
    gauge("a2h_overloaded_total", r["overloaded"], "Messages answered 'overloaded'.")
    gauge("a2h_alarm_lag_seconds_max", a["max_lag"], "Largest alarm lag seen.")
    gauge("a2h_alarms_fired_total", a["fired"], "Alarms fired.")
    gauge("a2h_store_commits_total", s["commits"], "Group commits.")
    gauge("a2h_store_commit_items_total", s["items"], "Items committed.")
    gauge("a2h_store_commit_batch_max", s["max_batch"], "Largest group-commit batch.")
    if "delayed_commits" in s:
        gauge("a2h_store_commits_delayed_total", s["delayed_commits"],
              "Group commits that waited for company (--commit-delay).")
    gauge("a2h_gateway_resyncs_total", g["resyncs"], "Sockets closed for falling behind.")
    health = await probe(hub)
    for part in ("store", "bus"):
        gauge(f"a2h_{part}_up", int(health[part]["ok"]), f"1 if the {part} answered.")
        if "seconds" in health[part]:
            gauge(f"a2h_{part}_ping_seconds", health[part]["seconds"],
                  f"Round trip to the {part}, seconds.")
    b = st["bus"]
    for key in ("sent", "received", "dropped", "errors"):
        if key in b:
            gauge(f"a2h_bus_{key}_total", b[key], f"Bus wake-ups {key}.")
    for status, n in (await hub.store.counts()).items():
        gauge("a2h_requests", n, "Requests in the store by state.", f'{{state="{status}"}}')
    return PlainTextResponse("\n".join(lines) + "\n",
                             media_type="text/plain; version=0.0.4")
