"""Settings, apart from the CLI. Every field has a flag ``--name-with-dashes`` and an
environment twin ``A2H_NAME`` (see ``hub.cli``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    db: str = "./a2h.db"
    #: The store as a URL (``postgresql://USER@HOST:PORT/DB``, shared by several nodes);
    #: empty: the SQLite file ``db``.
    store: str = ""
    #: SQLite synchronous mode: "full" (durable against power loss) or "normal".
    sync: str = "full"
    #: SQLite group commit under load: a commit that follows one of at least
    #: ``commit_siblings`` callers starts no sooner than ``commit_delay`` seconds after the
    #: previous one started, so that more callers share its fsync (PostgreSQL's
    #: commit_delay / commit_siblings). Light load never waits. 0: off.
    commit_delay: float = 0.003
    commit_siblings: int = 4
    #: A commit waiting for company stops waiting once none has come for this many
    #: seconds: company that stopped arriving is not worth the rest of the delay. 0: it
    #: waits out ``commit_delay``.
    commit_gap: float = 0.001
    #: Seconds a room may sit idle before it is dropped from memory (hibernation).
    room_idle: float = 30.0
    #: Messages a room's mailbox holds before callers get ``overloaded``.
    room_mailbox: int = 1000
    #: Largest WebSocket frame accepted, bytes (bigger closes with 1009).
    max_frame: int = 64 * 1024
    #: Bytes a connection's outbox may hold before it is closed with "resync" (4000).
    outbox_bytes: int = 1024 * 1024
    #: Seconds resolved requests are kept (idempotency and audit) before deletion.
    retention: float = 24 * 3600.0
    #: Bus between hub nodes (``nats://HOST:PORT``); empty: this node serves alone.
    bus: str = ""
    #: Seconds between two reads of what changed in the store (multi-node safety net).
    reconcile_interval: float = 2.0
    #: Fraction of outgoing bus wake-ups to drop on purpose (tests only).
    bus_drop: float = 0.0
    #: Seconds between sweeps of the store for overdue deadlines.
    alarm_sweep: float = 1.0
    #: Seconds between SSE keep-alive comments on a streaming chat completion.
    sse_keepalive: float = 15.0
    #: Seconds between MCP progress notifications while a tool call waits for a person.
    mcp_progress_interval: float = 15.0
    #: Seconds a browser session lasts.
    session_ttl: float = 7 * 24 * 3600.0
    #: WebSocket ping interval, seconds (0 disables).
    heartbeat: float = 20.0
    #: Extra origins allowed to open browser (cookie) WebSockets, comma-separated.
    allowed_origins: list[str] = field(default_factory=list)
    #: Proxy addresses trusted for X-Forwarded-* (uvicorn's --forwarded-allow-ips).
    forwarded_allow_ips: str = "127.0.0.1"
    # -- limits (each answers with its own error code; docs/THREAT_MODEL.md)
    #: Messages per second per connection (token bucket refill rate) ...
    rate: float = 200.0
    #: ... and the bucket's size (a burst allowed at once).
    burst: float = 400.0
    #: Open WebSockets per token.
    max_sockets_per_token: int = 256
    #: Pending requests per tenant ...
    max_pending_per_tenant: int = 100_000
    #: ... and the bytes they may hold together (question, choices, context, default, form).
    max_pending_bytes_per_tenant: int = 128 * 1024 * 1024
    #: Characters in a question.
    max_question_chars: int = 16_000
    #: Choices in a question.
    max_choices: int = 50
    #: Bytes of a request's context, JSON-encoded.
    max_context_bytes: int = 48 * 1024
    #: Open connections one client address may hold (0: no limit; behind a proxy, every
    #: connection comes from the proxy).
    max_conns_per_ip: int = 4096
    #: Seconds a client has to send a request's headers before the connection is closed.
    header_timeout: float = 10.0
    #: Journal entries in one run.
    max_journal_entries: int = 10_000
    #: Serve /metrics without a token (else it needs an admin bearer token).
    metrics_public: bool = False
    log_level: str = "info"
    #: Tenant/human created on the first start of an empty store.
    bootstrap_tenant: str = "default"
    bootstrap_human: str = "me"
    # -- notifications (hub/notify, docs/notifications.md)
    #: The hub's address as people's browsers reach it (links in ntfy messages); empty:
    #: ``http://HOST:PORT``.
    public_url: str = ""
    #: Notification sends in flight at once (webhooks, ntfy, pushes together).
    notify_concurrency: int = 8
    #: Seconds one send may take before it counts as failed.
    notify_timeout: float = 10.0
    #: Seconds before the first retry of a failed delivery; doubled each time ...
    notify_backoff: float = 5.0
    #: ... up to this many seconds between two tries.
    notify_backoff_max: float = 3600.0
    #: Seconds an endpoint may fail (every delivery) before it is disabled; also how long
    #: one delivery is retried.
    notify_disable_after: float = 24 * 3600.0
    #: Seconds between two looks at the outbox when nothing wakes the sender.
    notify_poll: float = 1.0
    #: Shortest pause, seconds, between two looks at the outbox (under a flood of commits).
    notify_min_interval: float = 0.05
    #: Seconds after a push during which new requests for the same browser wait, to go out
    #: together as one summary notification.
    push_coalesce: float = 3.0
    #: Accept push subscriptions to any http(s) URL (a push-service stand-in on loopback in
    #: tests). Off: a browser may register only an https endpoint on a public host name,
    #: never an IP literal, localhost or a private/loopback address.
    push_any_endpoint: bool = False
    #: VAPID ``sub`` claim: a ``mailto:`` or ``https:`` contact for push services.
    vapid_subject: str = "mailto:a2h-hub@localhost"
    #: Asks one room (conversation) admits per second, on average; more is ``overloaded``
    #: (retryable: false), so that one flooded room cannot take the hub from every other
    #: (0: no limit). Bursts up to ``room_ask_burst``.
    room_ask_rate: float = 1000.0
    room_ask_burst: int = 1000

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        s = cls()
        for f in fields(cls):
            key = "A2H_" + f.name.upper()
            if key in env:
                setattr(s, f.name, coerce(f.name, env[key]))
        for k, v in overrides.items():
            if v is not None:
                setattr(s, k, v)
        return s


def coerce(name: str, raw: str) -> Any:
    default = getattr(Settings(), name)
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, list):
        return [x.strip() for x in raw.split(",") if x.strip()]
    return raw
