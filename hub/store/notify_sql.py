"""SQL of the notification outbox (schema: migration 5 in ``hub.store.sqlite``).

Delivery rows are written inside the writer's transaction that commits their event:
``enqueue_for_ops`` right after a group commit applied request operations, and
``step_and_enqueue`` after a journal step. The first asks which tenants have an enabled
endpoint at all (one indexed read per batch), so a hub without endpoints pays next to
nothing; an op of such a tenant adds one ``INSERT … SELECT … FROM notify_endpoints``. The
second reads nothing unless the step made its run need attention.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from hub.core import Extend, Insert, Op, Request
from hub.journal import Event, Step
from hub.notify.events import (
    CHANNELS,
    Channel,
    DeliveryOutcome,
    EventType,
    event_body,
    new_message_id,
)
from hub.protocol import RunStatus
from hub.store.base import Delivery, Endpoint
from hub.store.journal_sql import step_sync

SCHEMA = """
    CREATE TABLE notify_endpoints (
        id TEXT PRIMARY KEY, tenant TEXT NOT NULL, human TEXT, channel TEXT NOT NULL,
        url TEXT NOT NULL, secret TEXT, created_at REAL NOT NULL, failing_since REAL,
        last_error TEXT, last_success_at REAL, disabled_at REAL, disabled_reason TEXT);
    CREATE INDEX notify_endpoints_tenant ON notify_endpoints (tenant, human)
        WHERE disabled_at IS NULL;
    CREATE UNIQUE INDEX notify_push_once ON notify_endpoints (tenant, human, url)
        WHERE channel = 'push';
    CREATE TABLE notify_deliveries (
        msg_id TEXT NOT NULL, endpoint_id TEXT NOT NULL, tenant TEXT NOT NULL,
        event TEXT NOT NULL, op_id TEXT, body BLOB NOT NULL, created_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
        next_at REAL NOT NULL, leased_until REAL, last_error TEXT, done_at REAL,
        PRIMARY KEY (msg_id, endpoint_id),
        FOREIGN KEY (endpoint_id) REFERENCES notify_endpoints (id) ON DELETE CASCADE);
    CREATE INDEX notify_due ON notify_deliveries (next_at) WHERE state = 'pending';
    CREATE INDEX notify_by_endpoint ON notify_deliveries (endpoint_id, state);
    CREATE INDEX notify_done ON notify_deliveries (done_at) WHERE state != 'pending';
    CREATE TABLE hub_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)
"""

ENDPOINT_COLUMNS = ("id, tenant, human, channel, url, secret, created_at, failing_since, "
                    "last_error, last_success_at, disabled_at, disabled_reason")
_E_COLUMNS = ", ".join("e." + c.strip() for c in ENDPOINT_COLUMNS.split(","))

_TENANTS = "SELECT DISTINCT tenant FROM notify_endpoints WHERE disabled_at IS NULL"
_WATCHED = "SELECT 1 FROM notify_endpoints WHERE tenant=? AND disabled_at IS NULL LIMIT 1"


def row_to_endpoint(row: Sequence[Any], pending: int = 0) -> Endpoint:
    (eid, tenant, human, channel, url, secret, created_at, failing_since, last_error,
     last_success_at, disabled_at, disabled_reason) = row[:12]
    return Endpoint(id=eid, tenant=tenant, human=human, channel=Channel(channel), url=url,
                    secret=secret, created_at=created_at, failing_since=failing_since,
                    last_error=last_error, last_success_at=last_success_at,
                    disabled_at=disabled_at, disabled_reason=disabled_reason, pending=pending)


# ---------------------------------------------------------------------------- the outbox


def enqueue(conn: sqlite3.Connection, event: EventType, tenant: str, human: str | None,
            op_id: str | None, at: float, data: dict[str, Any]) -> int:
    """Write one delivery of ``event`` per enabled endpoint that hears it: the tenant's
    endpoints for everyone, and those of ``human``. Returns how many."""
    channels = CHANNELS[event]
    marks = ",".join("?" * len(channels))
    cur = conn.execute(
        "INSERT INTO notify_deliveries (msg_id, endpoint_id, tenant, event, op_id, body, "
        "created_at, next_at) SELECT ?, id, tenant, ?, ?, ?, ?, ? FROM notify_endpoints "
        "WHERE tenant=? AND (human IS NULL OR human=?) AND disabled_at IS NULL "
        f"AND channel IN ({marks})",
        (new_message_id(), event.value, op_id, event_body(event, at, data), at, at, tenant,
         human, *[c.value for c in channels]))
    return int(cur.rowcount)


def enqueue_for_ops(conn: sqlite3.Connection, ops: Sequence[Op],
                    applied: Sequence[bool]) -> None:
    """The deliveries of request operations the store just applied (``applied[i]``: the
    i-th op's compare-and-set matched), in the same transaction."""
    tenants: set[str] | None = None
    for op, ok in zip(ops, applied):
        if ok is not True or isinstance(op, Extend):
            continue
        if tenants is None:
            tenants = {r[0] for r in conn.execute(_TENANTS)}
        if not tenants:
            return
        req: Request = op.request
        if req.tenant not in tenants:
            continue
        if isinstance(op, Insert):
            enqueue(conn, EventType.REQUEST_CREATED, req.tenant, req.to, req.op_id,
                    req.created_at, req.view())
        if req.terminal:  # a Resolve, or an Insert already resolved
            enqueue(conn, EventType.REQUEST_RESOLVED, req.tenant, req.to, req.op_id,
                    req.resolved_at if req.resolved_at is not None else req.created_at,
                    req.view())


def step_and_enqueue(conn: sqlite3.Connection, tenant: str, event: Event, now: float,
                     max_entries: int) -> Step:
    """A journal step (``journal_sql.step_sync``) and, when it makes its run need
    attention (or changes why), the ``run.needs_attention`` deliveries. The common step
    (``running``, ``done``) reads nothing more than the step itself: each statement of the
    writer is one hand-over of the GIL."""
    step, was = step_sync(conn, tenant, event, now, max_entries)
    run = step.write_run
    if run is not None and run.status is RunStatus.NEEDS_ATTENTION \
            and was != (run.status, run.reason) \
            and conn.execute(_WATCHED, (tenant,)).fetchone() is not None:
        enqueue(conn, EventType.RUN_NEEDS_ATTENTION, tenant, run.escalate_to, None, now,
                run.view())
    return step


def claim_sync(conn: sqlite3.Connection, now: float, lease: float,
               limit: int) -> list[Delivery]:
    rows = conn.execute(
        f"SELECT d.msg_id, d.event, d.op_id, d.body, d.created_at, d.attempts, {_E_COLUMNS} "
        "FROM notify_deliveries d JOIN notify_endpoints e ON e.id = d.endpoint_id "
        "WHERE d.state='pending' AND d.next_at <= ? AND e.disabled_at IS NULL "
        "AND (d.leased_until IS NULL OR d.leased_until <= ?) ORDER BY d.next_at LIMIT ?",
        (now, now, limit)).fetchall()
    out = []
    for msg_id, event, op_id, body, created_at, attempts, *ep in rows:
        endpoint = row_to_endpoint(ep)
        conn.execute("UPDATE notify_deliveries SET leased_until=? WHERE msg_id=? "
                     "AND endpoint_id=?", (now + lease, msg_id, endpoint.id))
        out.append(Delivery(msg_id=msg_id, endpoint=endpoint, event=EventType(event),
                            op_id=op_id, body=bytes(body), created_at=created_at,
                            attempts=attempts))
    return out


def settle_sync(conn: sqlite3.Connection, d: Delivery, now: float, outcome: DeliveryOutcome,
                error: str | None, next_at: float | None) -> None:
    key = (d.msg_id, d.endpoint.id)
    if outcome is DeliveryOutcome.DONE:
        conn.execute("UPDATE notify_deliveries SET state='done', done_at=?, attempts=attempts+1, "
                     "last_error=NULL, leased_until=NULL WHERE msg_id=? AND endpoint_id=?",
                     (now, *key))
        conn.execute("UPDATE notify_endpoints SET failing_since=NULL, last_error=NULL, "
                     "last_success_at=? WHERE id=?", (now, d.endpoint.id))
    elif outcome is DeliveryOutcome.RETRY:
        conn.execute("UPDATE notify_deliveries SET attempts=attempts+1, next_at=?, "
                     "last_error=?, leased_until=NULL WHERE msg_id=? AND endpoint_id=?",
                     (next_at if next_at is not None else now, error, *key))
        conn.execute("UPDATE notify_endpoints SET failing_since=coalesce(failing_since, ?), "
                     "last_error=? WHERE id=?", (now, error, d.endpoint.id))
    elif outcome is DeliveryOutcome.POSTPONED:
        conn.execute("UPDATE notify_deliveries SET next_at=?, leased_until=NULL "
                     "WHERE msg_id=? AND endpoint_id=?",
                     (next_at if next_at is not None else now, *key))
    else:  # FAILED, SKIPPED: settled for good
        conn.execute("UPDATE notify_deliveries SET state=?, done_at=?, last_error=?, "
                     "leased_until=NULL WHERE msg_id=? AND endpoint_id=?",
                     (outcome.value, now, error, *key))
        if outcome is DeliveryOutcome.FAILED and error:
            conn.execute("UPDATE notify_endpoints SET last_error=? WHERE id=?",
                         (error, d.endpoint.id))


def disable_sync(conn: sqlite3.Connection, endpoint_id: str, now: float, reason: str) -> None:
    conn.execute("UPDATE notify_endpoints SET disabled_at=?, disabled_reason=? WHERE id=? "
                 "AND disabled_at IS NULL", (now, reason, endpoint_id))
    conn.execute("UPDATE notify_deliveries SET state='failed', done_at=?, "
                 "last_error=coalesce(last_error, ?), leased_until=NULL "
                 "WHERE endpoint_id=? AND state='pending'", (now, reason, endpoint_id))


def add_endpoint_sync(conn: sqlite3.Connection, ep: Endpoint) -> Endpoint:
    if ep.channel is Channel.PUSH:
        row = conn.execute(f"SELECT {ENDPOINT_COLUMNS} FROM notify_endpoints WHERE tenant=? "
                           "AND human=? AND url=? AND channel='push'",
                           (ep.tenant, ep.human, ep.url)).fetchone()
        if row is not None:  # the same browser subscribing again: new keys, enabled again
            conn.execute("UPDATE notify_endpoints SET secret=?, disabled_at=NULL, "
                         "disabled_reason=NULL, failing_since=NULL WHERE id=?", (ep.secret, row[0]))
            row = conn.execute(f"SELECT {ENDPOINT_COLUMNS} FROM notify_endpoints WHERE id=?",
                               (row[0],)).fetchone()
            return row_to_endpoint(row)
    conn.execute(f"INSERT INTO notify_endpoints ({ENDPOINT_COLUMNS}) "
                 "VALUES (?,?,?,?,?,?,?,NULL,NULL,NULL,NULL,NULL)",
                 (ep.id, ep.tenant, ep.human, ep.channel.value, ep.url, ep.secret,
                  ep.created_at))
    return ep


def remove_endpoint_sync(conn: sqlite3.Connection, endpoint_id: str, tenant: str | None,
                         human: str | None) -> bool:
    sql, params = "DELETE FROM notify_endpoints WHERE id=?", [endpoint_id]
    if tenant is not None:
        sql += " AND tenant=?"
        params.append(tenant)
    if human is not None:
        sql += " AND human=?"
        params.append(human)
    return conn.execute(sql, params).rowcount == 1


def list_endpoints_query(tenant: str | None, human: str | None,
                         channel: Channel | None) -> tuple[str, tuple[Any, ...]]:
    where, params = ["1=1"], []
    if tenant is not None:
        where.append("e.tenant=?")
        params.append(tenant)
    if human is not None:
        where.append("e.human=?")
        params.append(human)
    if channel is not None:
        where.append("e.channel=?")
        params.append(channel.value)
    sql = (f"SELECT {_E_COLUMNS}, (SELECT count(*) FROM notify_deliveries d "
           "WHERE d.endpoint_id=e.id AND d.state='pending') FROM notify_endpoints e "
           f"WHERE {' AND '.join(where)} ORDER BY e.created_at, e.id")
    return sql, tuple(params)


def setting_sync(conn: sqlite3.Connection, name: str, default: str) -> str:
    conn.execute("INSERT OR IGNORE INTO hub_settings VALUES (?, ?)", (name, default))
    return str(conn.execute("SELECT value FROM hub_settings WHERE name=?",
                            (name,)).fetchone()[0])


def purge_deliveries_sync(conn: sqlite3.Connection, before: float) -> int:
    return int(conn.execute("DELETE FROM notify_deliveries WHERE state != 'pending' "
                            "AND done_at < ?", (before,)).rowcount)
