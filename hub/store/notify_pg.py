"""The notification outbox on PostgreSQL (schema: migration 2 in ``hub.store.postgres``).

The same rules as ``hub.store.notify_sql`` (SQLite), in asyncpg's dialect: delivery rows
are written inside the transaction that commits their event (``enqueue_for_ops`` after
``_apply_ops``, ``step_and_enqueue`` after a journal step); claims take rows with
``FOR UPDATE SKIP LOCKED``, so several nodes share the outbox without sending a row twice
while its lease holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

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
from hub.store.base import Delivery, Endpoint, PriorRun
from hub.store.notify_sql import ENDPOINT_COLUMNS, row_to_endpoint

SCHEMA = """
    CREATE TABLE notify_endpoints (
        id text PRIMARY KEY, tenant text NOT NULL, human text, channel text NOT NULL,
        url text NOT NULL, secret text, created_at double precision NOT NULL,
        failing_since double precision, last_error text, last_success_at double precision,
        disabled_at double precision, disabled_reason text);
    CREATE INDEX notify_endpoints_tenant ON notify_endpoints (tenant, human)
        WHERE disabled_at IS NULL;
    CREATE UNIQUE INDEX notify_push_once ON notify_endpoints (tenant, human, url)
        WHERE channel = 'push';
    CREATE TABLE notify_deliveries (
        msg_id text NOT NULL, endpoint_id text NOT NULL
            REFERENCES notify_endpoints (id) ON DELETE CASCADE,
        tenant text NOT NULL, event text NOT NULL, op_id text, body bytea NOT NULL,
        created_at double precision NOT NULL, state text NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0, next_at double precision NOT NULL,
        leased_until double precision, last_error text, done_at double precision,
        PRIMARY KEY (msg_id, endpoint_id));
    CREATE INDEX notify_due ON notify_deliveries (next_at) WHERE state = 'pending';
    CREATE INDEX notify_by_endpoint ON notify_deliveries (endpoint_id, state);
    CREATE INDEX notify_done ON notify_deliveries (done_at) WHERE state <> 'pending';
    CREATE TABLE hub_settings (name text PRIMARY KEY, value text NOT NULL);
"""


class Conn(Protocol):
    async def execute(self, query: str, *args: Any) -> str: ...
    async def fetch(self, query: str, *args: Any) -> list[Any]: ...
    async def fetchrow(self, query: str, *args: Any) -> Any: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...


_TENANTS = "SELECT DISTINCT tenant FROM notify_endpoints WHERE disabled_at IS NULL"
_WATCHED = "SELECT 1 FROM notify_endpoints WHERE tenant=$1 AND disabled_at IS NULL LIMIT 1"
_E_COLUMNS = ", ".join("e." + c.strip() for c in ENDPOINT_COLUMNS.split(","))
_ENQUEUE = (
    "INSERT INTO notify_deliveries (msg_id, endpoint_id, tenant, event, op_id, body, "
    "created_at, next_at) SELECT $1, id, tenant, $2, $3, $4, $5, $5 FROM notify_endpoints "
    "WHERE tenant=$6 AND (human IS NULL OR human=$7) AND disabled_at IS NULL "
    "AND channel = ANY($8::text[])")


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def enqueue(conn: Conn, event: EventType, tenant: str, human: str | None,
                  op_id: str | None, at: float, data: dict[str, Any]) -> int:
    return _count(await conn.execute(
        _ENQUEUE, new_message_id(), event.value, op_id, event_body(event, at, data), at, tenant,
        human, [c.value for c in CHANNELS[event]]))


async def enqueue_for_ops(conn: Conn, ops: Sequence[Op],
                          results: Sequence[Request | None | bool]) -> None:
    tenants: set[str] | None = None
    for op, result in zip(ops, results):
        if result is not True or isinstance(op, Extend):
            continue
        if tenants is None:
            tenants = {r[0] for r in await conn.fetch(_TENANTS)}
        if not tenants:
            return
        req = op.request
        if req.tenant not in tenants:
            continue
        if isinstance(op, Insert):
            await enqueue(conn, EventType.REQUEST_CREATED, req.tenant, req.to, req.op_id,
                          req.created_at, req.view())
        if req.terminal:
            await enqueue(conn, EventType.REQUEST_RESOLVED, req.tenant, req.to, req.op_id,
                          req.resolved_at if req.resolved_at is not None else req.created_at,
                          req.view())


async def step_and_enqueue(
        conn: Conn, tenant: str, event: Event, now: float,
        step: Callable[[], Awaitable[tuple[Step, PriorRun]]],
) -> Step:
    """``step()`` (a journal step in this transaction; it returns the step and the run's
    status and reason before it, read under the run's lock) and, when it makes its run
    need attention (or changes why), the ``run.needs_attention`` deliveries. The common
    step (``running``, ``done``) reads nothing more: each statement is a round trip to
    the server."""
    result, was = await step()
    run = result.write_run
    if run is not None and run.status is RunStatus.NEEDS_ATTENTION \
            and was != (run.status, run.reason) \
            and await conn.fetchval(_WATCHED, tenant) is not None:
        await enqueue(conn, EventType.RUN_NEEDS_ATTENTION, tenant, run.escalate_to, None, now,
                      run.view())
    return result


async def claim(conn: Conn, now: float, lease: float, limit: int) -> list[Delivery]:
    rows = await conn.fetch(
        f"SELECT d.msg_id, d.event, d.op_id, d.body, d.created_at, d.attempts, {_E_COLUMNS} "
        "FROM notify_deliveries d JOIN notify_endpoints e ON e.id = d.endpoint_id "
        "WHERE d.state='pending' AND d.next_at <= $1 AND e.disabled_at IS NULL "
        "AND (d.leased_until IS NULL OR d.leased_until <= $1) ORDER BY d.next_at LIMIT $2 "
        "FOR UPDATE OF d SKIP LOCKED", now, limit)
    out = []
    for msg_id, event, op_id, body, created_at, attempts, *ep in (tuple(r) for r in rows):
        endpoint = row_to_endpoint(ep)
        out.append(Delivery(msg_id=msg_id, endpoint=endpoint, event=EventType(event),
                            op_id=op_id, body=bytes(body), created_at=created_at,
                            attempts=attempts))
    if out:
        await conn.execute(
            "UPDATE notify_deliveries d SET leased_until=$1 FROM unnest($2::text[], $3::text[]) "
            "AS k(msg_id, endpoint_id) WHERE d.msg_id=k.msg_id AND d.endpoint_id=k.endpoint_id",
            now + lease, [d.msg_id for d in out], [d.endpoint.id for d in out])
    return out


async def settle(conn: Conn, d: Delivery, now: float, outcome: DeliveryOutcome,
                 error: str | None, next_at: float | None) -> None:
    key = (d.msg_id, d.endpoint.id)
    at = next_at if next_at is not None else now
    if outcome is DeliveryOutcome.DONE:
        await conn.execute(
            "UPDATE notify_deliveries SET state='done', done_at=$1, attempts=attempts+1, "
            "last_error=NULL, leased_until=NULL WHERE msg_id=$2 AND endpoint_id=$3", now, *key)
        await conn.execute("UPDATE notify_endpoints SET failing_since=NULL, last_error=NULL, "
                           "last_success_at=$1 WHERE id=$2", now, d.endpoint.id)
    elif outcome is DeliveryOutcome.RETRY:
        await conn.execute(
            "UPDATE notify_deliveries SET attempts=attempts+1, next_at=$1, last_error=$2, "
            "leased_until=NULL WHERE msg_id=$3 AND endpoint_id=$4", at, error, *key)
        await conn.execute("UPDATE notify_endpoints SET failing_since=coalesce(failing_since, "
                           "$1), last_error=$2 WHERE id=$3", now, error, d.endpoint.id)
    elif outcome is DeliveryOutcome.POSTPONED:
        await conn.execute("UPDATE notify_deliveries SET next_at=$1, leased_until=NULL "
                           "WHERE msg_id=$2 AND endpoint_id=$3", at, *key)
    else:
        await conn.execute(
            "UPDATE notify_deliveries SET state=$1, done_at=$2, last_error=$3, "
            "leased_until=NULL WHERE msg_id=$4 AND endpoint_id=$5",
            outcome.value, now, error, *key)
        if outcome is DeliveryOutcome.FAILED and error:
            await conn.execute("UPDATE notify_endpoints SET last_error=$1 WHERE id=$2", error,
                               d.endpoint.id)


async def disable(conn: Conn, endpoint_id: str, now: float, reason: str) -> None:
    await conn.execute("UPDATE notify_endpoints SET disabled_at=$1, disabled_reason=$2 "
                       "WHERE id=$3 AND disabled_at IS NULL", now, reason, endpoint_id)
    await conn.execute("UPDATE notify_deliveries SET state='failed', done_at=$1, "
                       "last_error=coalesce(last_error, $2), leased_until=NULL "
                       "WHERE endpoint_id=$3 AND state='pending'", now, reason, endpoint_id)


async def add_endpoint(conn: Conn, ep: Endpoint) -> Endpoint:
    if ep.channel is Channel.PUSH:
        row = await conn.fetchrow(
            f"INSERT INTO notify_endpoints ({ENDPOINT_COLUMNS}) "
            "VALUES ($1,$2,$3,$4,$5,$6,$7,NULL,NULL,NULL,NULL,NULL) "
            "ON CONFLICT (tenant, human, url) WHERE channel = 'push' DO UPDATE SET "
            "secret=excluded.secret, disabled_at=NULL, disabled_reason=NULL, "
            f"failing_since=NULL RETURNING {ENDPOINT_COLUMNS}",
            ep.id, ep.tenant, ep.human, ep.channel.value, ep.url, ep.secret, ep.created_at)
        return row_to_endpoint(tuple(row))
    await conn.execute(f"INSERT INTO notify_endpoints ({ENDPOINT_COLUMNS}) "
                       "VALUES ($1,$2,$3,$4,$5,$6,$7,NULL,NULL,NULL,NULL,NULL)",
                       ep.id, ep.tenant, ep.human, ep.channel.value, ep.url, ep.secret,
                       ep.created_at)
    return ep


def list_query(tenant: str | None, human: str | None,
               channel: Channel | None) -> tuple[str, list[Any]]:
    where, args = ["TRUE"], []
    for column, value in (("tenant", tenant), ("human", human),
                          ("channel", channel.value if channel is not None else None)):
        if value is not None:
            args.append(value)
            where.append(f"e.{column}=${len(args)}")
    sql = (f"SELECT {_E_COLUMNS}, (SELECT count(*) FROM notify_deliveries d "
           "WHERE d.endpoint_id=e.id AND d.state='pending') FROM notify_endpoints e "
           f"WHERE {' AND '.join(where)} ORDER BY e.created_at, e.id")
    return sql, args


async def remove_endpoint(conn: Conn, endpoint_id: str, tenant: str | None,
                          human: str | None) -> bool:
    return _count(await conn.execute(
        "DELETE FROM notify_endpoints WHERE id=$1 AND ($2::text IS NULL OR tenant=$2) "
        "AND ($3::text IS NULL OR human=$3)", endpoint_id, tenant, human)) == 1


async def setting(conn: Conn, name: str, default: str) -> str:
    await conn.execute("INSERT INTO hub_settings VALUES ($1, $2) ON CONFLICT DO NOTHING",
                       name, default)
    return str(await conn.fetchval("SELECT value FROM hub_settings WHERE name=$1", name))
