"""The shared store: PostgreSQL through asyncpg, for several hub nodes on one database.

Theory of operation
-------------------
Several nodes share one database, so correctness lives in its transactions, never in a
node's memory (invariant 2):

- ``apply(ops)`` is one transaction of compare-and-sets: ``Insert`` is ``INSERT ... ON
  CONFLICT DO NOTHING``, ``Resolve``/``Extend`` are ``UPDATE ... WHERE status='pending'``;
  an op that did not match reports the stored row, exactly like ``SQLiteStore``. Two nodes
  resolving one request at once: PostgreSQL's row lock makes the second ``UPDATE`` wait
  for the first, re-check ``status='pending'`` on the committed row, and match nothing.
- Group commit: every ``apply`` queued while a commit runs goes into the next one (a
  flusher task owned by the store), so a node's ops commit in the order they came. With distinct keys, one statement per
  kind of op does the whole batch (``unnest`` of arrays); rows are touched in key order so
  two nodes' batches cannot deadlock each other (and a deadlock or serialization failure
  is retried: PostgreSQL rolled it back, nothing was written). A batch that repeats a key
  applies its ops one by one, in order. A batch that fails on one bad item (a data error)
  is re-run item by item, so a bad item cannot sink its neighbours.
- ``run_step`` locks the run's row (``SELECT ... FOR UPDATE``), reads the journal entry in
  a later statement (so it sees what the previous lock holder committed), lets
  ``hub.journal.handle`` decide and writes what it returned, in one transaction: fencing
  of a stale execution holds across nodes. A run's first ``run.begin`` has no row to lock
  yet: it takes a transaction-scoped advisory lock on the run's key first. Within a node,
  steps of one run also queue in order (FIFO) before they take a connection: the first
  step submitted is the first decided, as with SQLite's writer, and waiters queue in
  memory rather than holding pooled connections while they wait for the row lock. That
  queue is only about order and efficiency: across nodes, the row lock decides.
- ``bootstrap`` holds an exclusive advisory lock that ``create_token`` takes shared: five
  racing calls, on any nodes, create exactly one pair.

Failures: an unreachable, restarting, read-only or full database raises a retryable
:class:`StoreError` (the rooms answer ``unavailable``). The pool replaces connections the
server closed, and a transaction that failed on a lost connection *before* its ``COMMIT``
was sent is run again on a fresh one (the server rolled it back), so a restart of
PostgreSQL costs the operations in flight at that instant and nothing more. A connection
lost during the ``COMMIT`` itself leaves the outcome unknown; the callers' ops are
idempotent compare-and-sets, so their retry finds the truth in the store.

Schema: numbered migrations in :data:`MIGRATIONS`, the version in table ``a2h_schema``,
applied under an advisory lock so nodes starting at once take turns; a node refuses a
database newer than it knows (:class:`NewerDatabase`). Times are epoch seconds as ``double
precision``; JSON values are ``bytea`` holding orjson bytes, as in SQLite, so the row
mapping (``hub.store.rows``, ``hub.store.journal_sql``) is shared.

The target is a libpq URL, ``postgresql://USER[:PASSWORD]@HOST:PORT/DB``; unknown query
parameters are server settings (``?search_path=a2h`` keeps the tables in schema ``a2h``).
A password never appears in an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import orjson

import hub.store.notify_pg as notify_pg
from hub.core import Extend, Insert, Op, Request, Resolve
from hub.journal import (
    CallReached,
    EntryStatus,
    Event,
    Run,
    RunEnded,
    RunStarted,
    SettlementRequest,
    Snapshot,
    Step,
    handle,
)
from hub.notify.events import Channel, DeliveryOutcome
from hub.protocol import RunStatus
from hub.store.base import (
    Delivery,
    Done,
    Due,
    Endpoint,
    NewerDatabase,
    Principal,
    PriorRun,
    Role,
    RunSummary,
    StoreError,
    TokenInfo,
    hash_token,
    new_token,
    token_hash_of,
)
from hub.store.journal_sql import (
    ENTRY_COLUMNS,
    RUN_COLUMNS,
    row_to_entry,
    row_to_run,
    row_to_summary,
)
from hub.store.notify_sql import row_to_endpoint
from hub.store.rows import REQUEST_COLUMNS as _COLUMNS
from hub.store.rows import request_payload as _payload
from hub.store.rows import row_to_request

log = logging.getLogger("a2h.store")

T = TypeVar("T")

#: Numbered migrations; ``a2h_schema.version`` says how many ran. Each runs in one
#: transaction with its version bump, under the migration advisory lock.
MIGRATIONS: list[str] = [
    # 1: identity, requests, durable runs and their journal (SQLite's migrations 1, 2, 4)
    """
    CREATE TABLE tenants (name text PRIMARY KEY, created_at double precision NOT NULL);
    CREATE TABLE humans (
        tenant text NOT NULL, handle text NOT NULL, created_at double precision NOT NULL,
        PRIMARY KEY (tenant, handle));
    CREATE TABLE tokens (
        hash text PRIMARY KEY, tenant text NOT NULL, role text NOT NULL, name text NOT NULL,
        created_at double precision NOT NULL, expires_at double precision,
        revoked_at double precision);
    CREATE INDEX tokens_tenant ON tokens (tenant, created_at);
    CREATE INDEX tokens_revoked ON tokens (revoked_at) WHERE revoked_at IS NOT NULL;
    CREATE TABLE sessions (
        hash text PRIMARY KEY, token_hash text NOT NULL, created_at double precision NOT NULL,
        expires_at double precision NOT NULL);
    CREATE INDEX sessions_token ON sessions (token_hash);
    CREATE INDEX sessions_expiry ON sessions (expires_at);
    CREATE TABLE requests (
        tenant text NOT NULL, op_id text NOT NULL, conversation text NOT NULL,
        to_human text NOT NULL, sender text NOT NULL, payload bytea NOT NULL,
        payload_hash text NOT NULL, status text NOT NULL, value bytea, actor text,
        created_at double precision NOT NULL, deadline double precision NOT NULL,
        fixed_deadline boolean NOT NULL, resolved_at double precision,
        human_seconds double precision,
        PRIMARY KEY (tenant, op_id));
    CREATE INDEX requests_inbox ON requests (tenant, to_human, deadline)
        WHERE status = 'pending';
    CREATE INDEX requests_room ON requests (tenant, conversation) WHERE status = 'pending';
    CREATE INDEX requests_due ON requests (deadline) WHERE status = 'pending';
    CREATE INDEX requests_sender ON requests (tenant, sender) WHERE status = 'pending';
    CREATE INDEX requests_done ON requests (tenant, to_human, resolved_at)
        WHERE status <> 'pending';
    CREATE INDEX requests_purge ON requests (resolved_at) WHERE status <> 'pending';
    CREATE INDEX requests_created ON requests (created_at);
    CREATE INDEX requests_resolved ON requests (resolved_at) WHERE resolved_at IS NOT NULL;
    CREATE TABLE runs (
        tenant text NOT NULL, run_id text NOT NULL, conversation text NOT NULL,
        version text NOT NULL, agent text NOT NULL, status text NOT NULL, reason text,
        secret text NOT NULL, exec_id text NOT NULL, escalate_to text,
        created_at double precision NOT NULL, updated_at double precision NOT NULL,
        finished_at double precision,
        PRIMARY KEY (tenant, run_id));
    CREATE INDEX runs_status ON runs (tenant, status, updated_at);
    CREATE INDEX runs_updated ON runs (tenant, updated_at);
    CREATE INDEX runs_purge ON runs (finished_at) WHERE finished_at IS NOT NULL;
    CREATE TABLE journal (
        tenant text NOT NULL, run_id text NOT NULL, position integer NOT NULL,
        kind text NOT NULL, name text NOT NULL, args_hash text NOT NULL, args bytea,
        unsafe boolean NOT NULL, status text NOT NULL, result bytea, error bytea, op_id text,
        to_human text, settle_round integer NOT NULL, attempts integer NOT NULL,
        exec_id text NOT NULL, decided_by text, started_at double precision NOT NULL,
        finished_at double precision,
        PRIMARY KEY (tenant, run_id, position),
        FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id) ON DELETE CASCADE);
    CREATE INDEX journal_ops ON journal (tenant, op_id) WHERE op_id IS NOT NULL;
    """,
    # 2: notifications: endpoints, the outbox of deliveries, hub-wide settings (SQLite's 5)
    notify_pg.SCHEMA,
]

SCHEMA_VERSION = len(MIGRATIONS)

#: First key of the two-part advisory locks this module takes (transaction-scoped): the
#: second part names what is locked. The one-part (bigint) key space, which the migration
#: lock uses, does not overlap with it.
_LOCK_CLASS = 0x0A2B
_LOCK_IDENTITY = 1  # shared by create_token, exclusive for bootstrap
_LOCK_RUN_KEY = "SELECT pg_advisory_xact_lock($1, hashtext($2))"

#: Group-commit flushers. One, like SQLite's writer: a node's batches commit in the order
#: they were submitted (more would overlap one batch's COMMIT with the next batch, but
#: could commit a later batch first).
FLUSHERS = 1
#: How often a transaction is tried when the database rolled it back for us (lost
#: connection before COMMIT, deadlock, serialization failure).
ATTEMPTS = 3


class _Conn(Protocol):
    """The part of ``asyncpg.Connection`` this module uses (asyncpg ships no types)."""

    async def execute(self, query: str, *args: Any) -> str: ...
    async def fetch(self, query: str, *args: Any) -> list[Any]: ...
    async def fetchrow(self, query: str, *args: Any) -> Any: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...
    def transaction(self) -> Any: ...
    def is_closed(self) -> bool: ...


# ---------------------------------------------------------------------------- URLs and errors


def redact(url: str) -> str:
    """``url`` without its password (in the authority or as a query parameter)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}:***@{host}"
        query = urlencode([(k, "***" if k.lower() == "password" else v)
                           for k, v in parse_qsl(parts.query, keep_blank_values=True)])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return url.partition("://")[0] + "://..."


#: Errors after which the database rolled the transaction back by itself, on a connection
#: that worked until then: a transaction that met one before its COMMIT was sent may simply
#: run again (on a fresh connection). A failure to connect is not retried on the spot: the
#: caller is told at once (retry later).
_ROLLED_BACK: tuple[type[BaseException], ...] = (
    asyncpg.TransactionRollbackError,  # deadlock detected, serialization failure
    asyncpg.PostgresConnectionError,  # incl. ConnectionDoesNotExistError (lost mid-query)
    asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,  # the server restarts
)

#: Failures to reach the database at all.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError, asyncpg.InterfaceError,
    ConnectionError, OSError, asyncio.TimeoutError,
)

#: Errors about the database as a whole (not one item of a batch).
_WHOLE: tuple[type[BaseException], ...] = _ROLLED_BACK + _UNREACHABLE + (
    asyncpg.InsufficientResourcesError,  # disk full, out of memory, too many connections
    asyncpg.OperatorInterventionError,  # shutdown, statement cancelled
    asyncpg.ReadOnlySQLTransactionError,  # a standby, or default_transaction_read_only
    asyncpg.ProgramLimitExceededError,
)

_DB_ERRORS: tuple[type[BaseException], ...] = _WHOLE + (asyncpg.PostgresError,)


def _store_error(exc: BaseException) -> StoreError:
    """What a caller is told when the database failed: retry later."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
        what = "the database is read-only"
    elif isinstance(exc, asyncpg.DiskFullError):
        what = "the database is full (no disk space left)"
    elif isinstance(exc, asyncpg.InsufficientResourcesError):
        what = f"the database is out of resources ({exc})"
    elif isinstance(exc, asyncpg.TransactionRollbackError):
        what = f"the database aborted the transaction ({exc})"
    elif isinstance(exc, _ROLLED_BACK + _UNREACHABLE + (asyncpg.OperatorInterventionError,)):
        what = f"the database is unreachable ({type(exc).__name__}: {exc})"
    else:
        what = f"the database failed ({type(exc).__name__}: {exc})"
    err = StoreError(f"{what}: nothing was written; try again later")
    err.__cause__ = exc
    return err


# ---------------------------------------------------------------------------- migrations


async def migrate(conn: _Conn, where: str) -> int:
    """Bring the schema (in the first schema of ``search_path``) to SCHEMA_VERSION under an
    advisory lock; refuse a database newer than this code. Returns the version found.

    An up-to-date database is only read (a node may start on a read-only database)."""
    found = await _version(conn)
    if found is not None and found >= SCHEMA_VERSION:
        _refuse_newer(found, where)
        return found
    async with conn.transaction():
        # Nodes starting at once take turns; the later ones find the work done.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended("
            "'a2h.migrate:' || coalesce(current_schema(), ''), 0))")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS a2h_schema (version integer NOT NULL)")
        found = await _version(conn)
        if found is None:
            await conn.execute("INSERT INTO a2h_schema VALUES (0)")
            found = 0
        _refuse_newer(found, where)
        for number in range(found, SCHEMA_VERSION):
            await conn.execute(MIGRATIONS[number])
            await conn.execute("UPDATE a2h_schema SET version = $1", number + 1)
            log.info("%s: schema migrated to version %d", where, number + 1)
        return found


async def _version(conn: _Conn) -> int | None:
    if await conn.fetchval("SELECT to_regclass('a2h_schema')") is None:
        return None
    found = await conn.fetchval("SELECT max(version) FROM a2h_schema")
    return None if found is None else int(found)


def _refuse_newer(found: int, where: str) -> None:
    if found > SCHEMA_VERSION:
        raise NewerDatabase(
            f"{where} has schema version {found}, but this a2h knows only up to "
            f"{SCHEMA_VERSION}: upgrade a2h-hub, or point --store at another database")


# ---------------------------------------------------------------------------- request operations

_INSERT_BULK = (
    f"INSERT INTO requests ({_COLUMNS}) SELECT * FROM unnest("
    "$1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], "
    "$8::text[], $9::bytea[], $10::text[], $11::float8[], $12::float8[], $13::bool[], "
    "$14::float8[], $15::float8[]) ON CONFLICT DO NOTHING RETURNING tenant, op_id")
_RESOLVE_BULK = (
    "UPDATE requests r SET status = v.status, value = v.value, actor = v.actor, "
    "resolved_at = v.resolved_at, human_seconds = v.human_seconds "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::float8[], "
    "$7::float8[]) AS v(tenant, op_id, status, value, actor, resolved_at, human_seconds) "
    "WHERE r.tenant = v.tenant AND r.op_id = v.op_id AND r.status = 'pending' "
    "RETURNING r.tenant, r.op_id")
_EXTEND_BULK = (
    "UPDATE requests r SET deadline = v.deadline "
    "FROM unnest($1::text[], $2::text[], $3::float8[]) AS v(tenant, op_id, deadline) "
    "WHERE r.tenant = v.tenant AND r.op_id = v.op_id AND r.status = 'pending' "
    "RETURNING r.tenant, r.op_id")
_FETCH_MANY = (
    f"SELECT {', '.join('r.' + c.strip() for c in _COLUMNS.split(','))} FROM requests r "
    "JOIN unnest($1::text[], $2::text[]) AS k(tenant, op_id) "
    "ON r.tenant = k.tenant AND r.op_id = k.op_id")

_INSERT_ONE = (f"INSERT INTO requests ({_COLUMNS}) VALUES "
               "($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15) ON CONFLICT DO NOTHING")
_RESOLVE_ONE = ("UPDATE requests SET status=$3, value=$4, actor=$5, resolved_at=$6, "
                "human_seconds=$7 WHERE tenant=$1 AND op_id=$2 AND status='pending'")
_EXTEND_ONE = ("UPDATE requests SET deadline=$3 WHERE tenant=$1 AND op_id=$2 "
               "AND status='pending'")
_FETCH_ONE = f"SELECT {_COLUMNS} FROM requests WHERE tenant=$1 AND op_id=$2"

Key = tuple[str, str]


def _value(v: Any) -> bytes | None:
    return None if v is None else orjson.dumps(v)


def _insert_row(r: Request) -> tuple[Any, ...]:
    return (r.tenant, r.op_id, r.conversation, r.to, r.sender, _payload(r), r.payload_hash,
            r.status.value, _value(r.value), r.actor, r.created_at, r.deadline,
            bool(r.fixed_deadline), r.resolved_at, r.human_seconds)


def _resolve_row(r: Request) -> tuple[Any, ...]:
    return (r.tenant, r.op_id, r.status.value, _value(r.value), r.actor, r.resolved_at,
            r.human_seconds)


def _columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows to one array per column (what ``unnest`` takes), in key order: every batch
    locks rows in the same order, so two nodes' batches cannot deadlock each other."""
    ordered = sorted(rows, key=lambda row: (row[0], row[1]))
    return [list(col) for col in zip(*ordered)]


async def _apply_ops(conn: _Conn, ops: list[Op]) -> list[Request | None | bool]:
    """Apply request ops inside the caller's transaction; per op True when the store
    agreed, else the stored row (None if there is none)."""
    keys: list[Key] = [(op.request.tenant, op.request.op_id) for op in ops]
    if len(set(keys)) != len(keys):
        return [await _apply_one(conn, op) for op in ops]  # in order: later ops see earlier
    # Distinct keys: no op can see another's effect, so one statement per kind is exact.
    ins = [_insert_row(op.request) for op in ops if isinstance(op, Insert)]
    res = [_resolve_row(op.request) for op in ops if isinstance(op, Resolve)]
    ext = [(op.request.tenant, op.request.op_id, op.request.deadline)
           for op in ops if isinstance(op, Extend)]
    agreed: set[Key] = set()
    for sql, rows in ((_INSERT_BULK, ins), (_EXTEND_BULK, ext), (_RESOLVE_BULK, res)):
        if rows:
            agreed.update((r[0], r[1]) for r in await conn.fetch(sql, *_columns(rows)))
    lost = [k for k in keys if k not in agreed]
    stored: dict[Key, Request] = {}
    if lost:
        for row in await conn.fetch(_FETCH_MANY, [k[0] for k in lost], [k[1] for k in lost]):
            req = row_to_request(tuple(row))
            stored[(req.tenant, req.op_id)] = req
    return [True if k in agreed else stored.get(k) for k in keys]


async def _apply_and_enqueue(conn: _Conn, ops: list[Op]) -> list[Request | None | bool]:
    """The ops, and the notification deliveries they cause, in one transaction."""
    results = await _apply_ops(conn, ops)
    await notify_pg.enqueue_for_ops(conn, ops, results)
    return results


async def _apply_one(conn: _Conn, op: Op) -> Request | None | bool:
    req = op.request
    if isinstance(op, Insert):
        status = await conn.execute(_INSERT_ONE, *_insert_row(req))
    elif isinstance(op, Resolve):
        status = await conn.execute(_RESOLVE_ONE, *_resolve_row(req))
    elif isinstance(op, Extend):
        status = await conn.execute(_EXTEND_ONE, req.tenant, req.op_id, req.deadline)
    else:  # pragma: no cover - exhaustive
        raise TypeError(op)
    if status.rsplit(" ", 1)[-1] == "1":  # "INSERT 0 1" / "UPDATE 1"
        return True
    row = await conn.fetchrow(_FETCH_ONE, req.tenant, req.op_id)
    return row_to_request(tuple(row)) if row is not None else None


# ---------------------------------------------------------------------------- the journal

_RUN_FOR_UPDATE = (f"SELECT {RUN_COLUMNS} FROM runs WHERE tenant=$1 AND run_id=$2 "
                   "FOR UPDATE")
_ENTRY = f"SELECT {ENTRY_COLUMNS} FROM journal WHERE tenant=$1 AND run_id=$2 AND position=$3"
_SAVE_RUN = (
    f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) "
    "ON CONFLICT (tenant, run_id) DO UPDATE SET status=excluded.status, "
    "reason=excluded.reason, exec_id=excluded.exec_id, escalate_to=excluded.escalate_to, "
    "updated_at=excluded.updated_at, finished_at=excluded.finished_at")
_SAVE_ENTRY = (
    f"INSERT INTO journal ({ENTRY_COLUMNS}) VALUES "
    "($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19) "
    "ON CONFLICT (tenant, run_id, position) DO UPDATE SET status=excluded.status, "
    "result=excluded.result, error=excluded.error, op_id=excluded.op_id, "
    "settle_round=excluded.settle_round, attempts=excluded.attempts, "
    "exec_id=excluded.exec_id, decided_by=excluded.decided_by, "
    "started_at=excluded.started_at, finished_at=excluded.finished_at")
_PENDING = (
    f"SELECT {_COLUMNS} FROM requests WHERE tenant=$1 AND status='pending' AND "
    "(sender=$2 OR op_id IN (SELECT op_id FROM journal WHERE tenant=$1 AND "
    "op_id IS NOT NULL AND status IN ('running', 'unknown'))) "
    "ORDER BY deadline, created_at LIMIT $3")


async def _locked_run(conn: _Conn, tenant: str, run_id: str) -> Run | None:
    row = await conn.fetchrow(_RUN_FOR_UPDATE, tenant, run_id)
    return row_to_run(tuple(row)) if row is not None else None


async def _step(conn: _Conn, tenant: str, event: Event, now: float,
                max_entries: int) -> tuple[Step, PriorRun]:
    """Read (under the run's lock), decide, write: one journal step in one transaction.
    Returns the step and the run's status and reason before it (None: no run yet); the
    core moves the run it was given in place."""
    run_id = event.run_id
    if isinstance(event, RunStarted):
        # No row to lock before a run's first begin: serialize begins on the run's key.
        await conn.execute(_LOCK_RUN_KEY, _LOCK_CLASS + 1, f"{tenant}\x1f{run_id}")
        snap = Snapshot(await _locked_run(conn, tenant, run_id), max_entries=max_entries)
    elif isinstance(event, RunEnded):
        run = await _locked_run(conn, tenant, run_id)
        length = 0
        if run is not None:
            length = await conn.fetchval(
                "SELECT count(*) FROM journal WHERE tenant=$1 AND run_id=$2", tenant, run_id)
        snap = Snapshot(run, journal_length=int(length))
    else:
        run = await _locked_run(conn, tenant, run_id)
        entry = later = settlement = fallback = None
        if run is not None:
            # A statement after the lock: it sees what the previous holder committed.
            row = await conn.fetchrow(_ENTRY, tenant, run_id, event.position)
            entry = row_to_entry(tuple(row)) if row is not None else None
            if isinstance(event, CallReached):
                if entry is not None and entry.status is EntryStatus.FAILED:
                    later = await conn.fetchval(
                        "SELECT EXISTS (SELECT 1 FROM journal WHERE tenant=$1 AND run_id=$2 "
                        "AND position>$3)", tenant, run_id, event.position)
                elif entry is not None and entry.status is EntryStatus.UNKNOWN and entry.op_id:
                    srow = await conn.fetchrow(
                        "SELECT status, value, actor FROM requests WHERE tenant=$1 "
                        "AND op_id=$2", tenant, entry.op_id)
                    if srow is not None:
                        value = orjson.loads(srow[1]) if srow[1] is not None else None
                        settlement = SettlementRequest(srow[0], value, srow[2])
                elif entry is None and event.unsafe and run.escalate_to is None:
                    fallback = await _fallback_human(conn, tenant, run_id)
        snap = Snapshot(run, entry, bool(later), settlement, fallback, max_entries)
    was = None if snap.run is None else (snap.run.status, snap.run.reason)
    step = handle(event, snap, now)
    if step.write_run is not None:
        r = step.write_run
        await conn.execute(_SAVE_RUN, r.tenant, r.run_id, r.conversation, r.version, r.agent,
                           r.status.value, r.reason, r.secret, r.exec_id, r.escalate_to,
                           r.created_at, r.updated_at, r.finished_at)
    if step.write_entry is not None:
        e = step.write_entry
        await conn.execute(_SAVE_ENTRY, e.tenant, e.run_id, e.position, e.kind.value, e.name,
                           e.args_hash, _value(e.args), bool(e.unsafe), e.status.value,
                           _value(e.result), _value(e.error), e.op_id, e.to, e.settle_round,
                           e.attempts, e.exec_id, e.decided_by, e.started_at, e.finished_at)
    return step, was


async def _fallback_human(conn: _Conn, tenant: str, run_id: str) -> str | None:
    last = await conn.fetchval(
        "SELECT to_human FROM journal WHERE tenant=$1 AND run_id=$2 AND kind='interrupt' "
        "ORDER BY position DESC LIMIT 1", tenant, run_id)
    if last:
        return str(last)
    rows = await conn.fetch("SELECT handle FROM humans WHERE tenant=$1 LIMIT 2", tenant)
    return str(rows[0][0]) if len(rows) == 1 else None


# ---------------------------------------------------------------------------- the store


@dataclass(slots=True)
class _Job:
    ops: list[Op]
    fut: asyncio.Future[list[Request | None | bool]]


@dataclass(slots=True)
class _Gate:
    """The queue of one run's steps on this node (see the module docstring)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass(slots=True)
class _Stats:
    commits: int = 0
    items: int = 0
    max_batch: int = 0
    queued: int = 0
    failed_batches: int = 0
    retries: int = 0
    latencies: list[float] = field(default_factory=list)


class PostgresStore:
    """PostgreSQL backend of :class:`hub.store.base.Store` (asyncpg, a connection pool).

    Args:
        url: ``postgresql://USER[:PASSWORD]@HOST:PORT/DB[?search_path=SCHEMA]``.
        min_size, max_size: the pool's connections.
        connect_timeout: seconds to wait for a new connection before the operation fails
            with a retryable :class:`StoreError`.
    """

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10,
                 connect_timeout: float = 5.0) -> None:
        self.url = url
        self.where = redact(url)
        self._min, self._max, self._timeout = min_size, max_size, connect_timeout
        self._pool: Any = None
        self._jobs: list[_Job] = []
        self._wake = asyncio.Event()
        self._flushers: list[asyncio.Task[None]] = []
        self._closing = False
        self._gates: dict[tuple[str, str], _Gate] = {}
        self._stats = _Stats()
        self.schema_version_found = 0

    # -- lifecycle

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=self._min, max_size=self._max, timeout=self._timeout,
                reset=_keep_session)
        except (NewerDatabase, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise self._open_error(exc) from None
        try:
            async with self._pool.acquire() as conn:
                self.schema_version_found = await migrate(conn, self.where)
        except NewerDatabase:
            await self._pool.close()
            raise
        except _DB_ERRORS as exc:
            self._pool.terminate()
            raise self._open_error(exc) from None
        self._wake = asyncio.Event()
        self._closing = False
        self._flushers = [asyncio.create_task(self._flush_forever(), name=f"a2h-pg-flush-{i}")
                          for i in range(FLUSHERS)]

    def _open_error(self, exc: BaseException) -> StoreError:
        text = str(exc)
        password = urlsplit(self.url).password if "://" in self.url else None
        if password:
            text = text.replace(password, "***")
        return StoreError(f"cannot open the PostgreSQL store {self.where}: "
                          f"{type(exc).__name__}: {text}")

    async def close(self) -> None:
        """Commit what is queued (bounded: 10 s), then close the pool."""
        flushers, self._flushers = self._flushers, []
        self._closing = True
        self._wake.set()
        if flushers:
            _, late = await asyncio.wait(flushers, timeout=10.0)
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            if not job.fut.done():
                job.fut.set_exception(StoreError("the store closed: nothing was written"))
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 10.0)
            except _DB_ERRORS:  # incl. a timeout
                pool.terminate()

    # -- transactions

    async def _transact(self, body: Callable[[_Conn], Awaitable[T]]) -> T:
        """Run ``body(conn)`` in one transaction and return its result once committed.

        A failure the database rolled back by itself before the COMMIT was sent (a lost
        connection, a deadlock) runs the body again, up to ATTEMPTS times. Database
        failures raise StoreError; what ``body`` raises otherwise passes through (nothing
        is written then)."""
        if self._pool is None:
            raise StoreError("the store is not open")
        for attempt in range(ATTEMPTS):
            committing = False
            try:
                async with self._pool.acquire() as conn:
                    tx = conn.transaction()
                    await tx.start()
                    try:
                        result = await body(conn)
                    except BaseException:
                        with contextlib.suppress(*_DB_ERRORS):
                            await tx.rollback()
                        raise
                    committing = True
                    await tx.commit()
                    return result
            except _ROLLED_BACK as exc:
                if committing or attempt == ATTEMPTS - 1:
                    raise _store_error(exc) from exc
                self._stats.retries += 1
            except _DB_ERRORS as exc:
                raise _store_error(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, sql: str, *args: Any) -> list[Any]:
        """One read-only query; retried on a fresh connection if the one taken was lost."""
        if self._pool is None:
            raise StoreError("the store is not open")
        for attempt in range(ATTEMPTS):
            try:
                rows: list[Any] = await self._pool.fetch(sql, *args)
                return rows
            except _ROLLED_BACK as exc:
                if attempt == ATTEMPTS - 1:
                    raise _store_error(exc) from exc
                self._stats.retries += 1
            except _DB_ERRORS as exc:
                raise _store_error(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- group commit of request operations

    async def _flush_forever(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            while self._jobs:
                batch, self._jobs = self._jobs, []
                try:
                    await self._commit(batch)
                except asyncio.CancelledError:
                    for job in batch:
                        if not job.fut.done():
                            job.fut.set_exception(StoreError(
                                "the store closed during the commit: its outcome is unknown"))
                    raise
        self._wake.set()  # the other flushers stop too

    async def _commit(self, batch: list[_Job]) -> None:
        st = self._stats
        ops = [op for job in batch for op in job.ops]
        started = time.perf_counter()
        try:
            results = await self._transact(lambda c: _apply_and_enqueue(c, ops))
        except StoreError as exc:
            st.failed_batches += 1
            if len(batch) > 1 and not isinstance(exc.__cause__, _WHOLE):
                # One bad item (a data error) must not sink its neighbours: one by one.
                for job in batch:
                    await self._commit([job])
                return
            if st.failed_batches % 100 == 1:
                log.warning("a batch of %d writes failed: %s", len(batch), exc)
            for job in batch:
                if not job.fut.done():
                    job.fut.set_exception(exc)
        except Exception as exc:  # a bug: tell the callers, keep the flusher alive
            st.failed_batches += 1
            for job in batch:
                if not job.fut.done():
                    job.fut.set_exception(exc)
        else:
            at = 0
            for job in batch:
                n = len(job.ops)
                if not job.fut.done():
                    job.fut.set_result(results[at:at + n])
                at += n
        st.commits += 1
        st.items += len(batch)
        st.max_batch = max(st.max_batch, len(batch))
        st.latencies.append(time.perf_counter() - started)
        if len(st.latencies) > 1024:
            del st.latencies[:512]

    async def apply(self, ops: list[Op]) -> list[Request | None | bool]:
        if not ops:
            return []
        if not self._flushers or self._closing:
            raise StoreError("the store is not open")
        fut: asyncio.Future[list[Request | None | bool]] = \
            asyncio.get_running_loop().create_future()
        self._jobs.append(_Job(list(ops), fut))
        self._stats.queued += 1
        self._wake.set()
        return await fut

    def apply_soon(self, batches: list[tuple[list[Op], Done]]) -> None:
        loop = asyncio.get_running_loop()
        for ops, done in batches:
            if not self._flushers or self._closing:
                done(False, StoreError("the store is not open"))
                continue
            fut: asyncio.Future[list[Request | None | bool]] = loop.create_future()
            fut.add_done_callback(functools.partial(_report, done))
            self._jobs.append(_Job(list(ops), fut))
            self._stats.queued += 1
        self._wake.set()

    # -- identity

    async def is_empty(self) -> bool:
        return not await self._read("SELECT 1 FROM tokens LIMIT 1")

    async def bootstrap(self, tenant: str, human: str) -> tuple[str, str] | None:
        human_token, agent_token = new_token(Role.HUMAN), new_token(Role.AGENT)

        async def body(c: _Conn) -> bool:
            # Exclusive against every create_token (shared): "empty" stays true until
            # this transaction commits, on every node.
            await c.execute("SELECT pg_advisory_xact_lock($1, $2)", _LOCK_CLASS,
                            _LOCK_IDENTITY)
            if await c.fetchval("SELECT EXISTS (SELECT 1 FROM tokens)"):
                return False
            now = time.time()
            await _create_token(c, human_token, tenant, Role.HUMAN, human, None, now)
            await _create_token(c, agent_token, tenant, Role.AGENT, "default", None, now)
            return True

        return (human_token, agent_token) if await self._transact(body) else None

    async def create_token(self, tenant: str, role: Role, name: str,
                           expires_at: float | None = None) -> str:
        token = new_token(role)

        async def body(c: _Conn) -> None:
            await c.execute("SELECT pg_advisory_xact_lock_shared($1, $2)", _LOCK_CLASS,
                            _LOCK_IDENTITY)
            await _create_token(c, token, tenant, role, name, expires_at, time.time())

        await self._transact(body)
        return token

    async def principal(self, token: str, now: float) -> Principal | None:
        return await self.principal_by_hash(hash_token(token), now)

    async def principal_by_hash(self, token_hash: str, now: float) -> Principal | None:
        rows = await self._read(
            "SELECT tenant, role, name, expires_at, revoked_at FROM tokens WHERE hash=$1",
            token_hash)
        if not rows:
            return None
        tenant, role, name, expires_at, revoked_at = rows[0]
        if revoked_at is not None or (expires_at is not None and expires_at <= now):
            return None
        return Principal(tenant, Role(role), name, token_hash)

    async def revoke_token(self, token: str, now: float, tenant: str | None = None) -> bool:
        h = token_hash_of(token)

        async def body(c: _Conn) -> bool:
            status = await c.execute(
                "UPDATE tokens SET revoked_at=$1 WHERE hash=$2 AND revoked_at IS NULL "
                "AND ($3::text IS NULL OR tenant=$3)", now, h, tenant)
            if status != "UPDATE 1":
                return False
            await c.execute("DELETE FROM sessions WHERE token_hash=$1", h)
            return True

        return await self._transact(body)

    async def list_tokens(self, tenant: str) -> list[TokenInfo]:
        rows = await self._read(
            "SELECT hash, role, name, created_at, expires_at, revoked_at FROM tokens "
            "WHERE tenant=$1 ORDER BY created_at", tenant)
        return [TokenInfo(hash=h, role=role, name=name, created_at=created,
                          expires_at=expires, revoked_at=revoked)
                for h, role, name, created, expires, revoked in rows]

    async def revoked_since(self, since: float) -> list[str]:
        rows = await self._read("SELECT hash FROM tokens WHERE revoked_at >= $1", since)
        return [r[0] for r in rows]

    async def list_humans(self, tenant: str) -> list[str]:
        rows = await self._read("SELECT handle FROM humans WHERE tenant=$1 ORDER BY handle",
                                tenant)
        return [r[0] for r in rows]

    async def create_session(self, token_hash: str, now: float, ttl: float) -> str:
        session = secrets.token_urlsafe(32)

        async def body(c: _Conn) -> None:
            await c.execute("DELETE FROM sessions WHERE expires_at < $1", now)
            await c.execute("INSERT INTO sessions VALUES ($1,$2,$3,$4)",
                            hash_token(session), token_hash, now, now + ttl)

        await self._transact(body)
        return session

    async def session_principal(self, session: str, now: float) -> Principal | None:
        rows = await self._read("SELECT token_hash, expires_at FROM sessions WHERE hash=$1",
                                hash_token(session))
        if not rows or rows[0][1] <= now:
            return None
        return await self.principal_by_hash(rows[0][0], now)

    async def end_session(self, session: str) -> None:
        async def body(c: _Conn) -> None:
            await c.execute("DELETE FROM sessions WHERE hash=$1", hash_token(session))

        await self._transact(body)

    # -- requests

    async def _requests(self, sql: str, *args: Any) -> list[Request]:
        return [row_to_request(tuple(r)) for r in await self._read(sql, *args)]

    async def get_request(self, tenant: str, op_id: str) -> Request | None:
        found = await self._requests(_FETCH_ONE, tenant, op_id)
        return found[0] if found else None

    async def load_room(self, tenant: str, conversation: str) -> list[Request]:
        return await self._requests(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=$1 AND conversation=$2 "
            "AND status='pending'", tenant, conversation)

    async def inbox(self, tenant: str, handle: str) -> list[Request]:
        return await self._requests(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=$1 AND to_human=$2 "
            "AND status='pending' ORDER BY deadline, created_at", tenant, handle)

    async def history(self, tenant: str, handle: str, limit: int) -> list[Request]:
        return await self._requests(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=$1 AND to_human=$2 "
            "AND status<>'pending' ORDER BY resolved_at DESC LIMIT $3", tenant, handle, limit)

    async def due(self, now: float, limit: int) -> list[Due]:
        # Every node sweeps: reading is enough, because expiry is a compare-and-set
        # (``Resolve``), which one node wins.
        rows = await self._read(
            "SELECT tenant, conversation, op_id, deadline FROM requests "
            "WHERE status='pending' AND deadline <= $1 ORDER BY deadline LIMIT $2", now, limit)
        return [Due(*r) for r in rows]

    async def changed_since(self, since: float, limit: int = 10_000) -> list[Request]:
        return await self._requests(
            f"SELECT {_COLUMNS} FROM requests WHERE created_at >= $1 OR resolved_at >= $1 "
            "ORDER BY greatest(created_at, coalesce(resolved_at, created_at)) LIMIT $2",
            since, limit)

    async def counts(self) -> dict[str, int]:
        rows = await self._read("SELECT status, count(*) FROM requests GROUP BY status")
        return {s: int(n) for s, n in rows}

    async def pending_usage(self, tenant: str) -> tuple[int, int]:
        rows = await self._read(
            "SELECT count(*), coalesce(sum(length(payload)), 0) FROM requests "
            "WHERE tenant=$1 AND status='pending'", tenant)
        return int(rows[0][0]), int(rows[0][1])

    # -- runs and their journal

    async def run_step(self, tenant: str, event: Event, now: float,
                       max_entries: int) -> Step:
        key = (tenant, event.run_id)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate()
        gate.users += 1
        try:
            async with gate.lock:
                return await self._transact(lambda c: notify_pg.step_and_enqueue(
                    c, tenant, event, now, lambda: _step(c, tenant, event, now, max_entries)))
        finally:
            gate.users -= 1
            if not gate.users:
                del self._gates[key]

    async def list_runs(self, tenant: str, status: RunStatus | None = None,
                        limit: int = 100) -> list[RunSummary]:
        cols = ", ".join("r." + c.strip() for c in RUN_COLUMNS.split(","))
        where, args = "r.tenant=$1", [tenant]
        if status is not None:
            where += " AND r.status=$3"
            args.append(status.value)
        rows = await self._read(
            f"SELECT {cols}, (SELECT count(*) FROM journal j WHERE j.tenant=r.tenant "
            f"AND j.run_id=r.run_id) FROM runs r WHERE {where} "
            "ORDER BY r.updated_at DESC LIMIT $2", args[0], limit, *args[1:])
        return [row_to_summary(tuple(r)) for r in rows]

    async def run_pending(self, tenant: str, sender: str, limit: int = 500) -> list[Request]:
        return await self._requests(_PENDING, tenant, sender, limit)

    # -- notifications (hub/store/notify_pg.py)

    async def add_endpoint(self, endpoint: Endpoint) -> Endpoint:
        return await self._transact(lambda c: notify_pg.add_endpoint(c, endpoint))

    async def list_endpoints(self, tenant: str | None = None, *, human: str | None = None,
                             channel: Channel | None = None) -> list[Endpoint]:
        sql, args = notify_pg.list_query(tenant, human, channel)
        return [row_to_endpoint(tuple(r), int(r[12]))
                for r in await self._read(sql, *args)]

    async def remove_endpoint(self, endpoint_id: str, tenant: str | None = None,
                              human: str | None = None) -> bool:
        return await self._transact(
            lambda c: notify_pg.remove_endpoint(c, endpoint_id, tenant, human))

    async def claim_deliveries(self, now: float, lease: float, limit: int) -> list[Delivery]:
        return await self._transact(lambda c: notify_pg.claim(c, now, lease, limit))

    async def release_deliveries(self) -> None:
        async def body(c: _Conn) -> None:
            await c.execute("UPDATE notify_deliveries SET leased_until=NULL "
                            "WHERE leased_until IS NOT NULL")

        await self._transact(body)

    async def settle_delivery(self, delivery: Delivery, now: float, outcome: DeliveryOutcome,
                              error: str | None = None, next_at: float | None = None) -> None:
        await self._transact(
            lambda c: notify_pg.settle(c, delivery, now, outcome, error, next_at))

    async def disable_endpoint(self, endpoint_id: str, now: float, reason: str) -> None:
        await self._transact(lambda c: notify_pg.disable(c, endpoint_id, now, reason))

    async def setting(self, name: str, default: str) -> str:
        return await self._transact(lambda c: notify_pg.setting(c, name, default))

    # -- housekeeping

    async def purge(self, before: float) -> int:
        """Deleted rows' space goes back to PostgreSQL's free space map (autovacuum)."""

        async def body(c: _Conn) -> int:
            n = _count(await c.execute(
                "DELETE FROM requests WHERE status<>'pending' AND resolved_at < $1", before))
            n += _count(await c.execute(
                "DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1", before))
            await c.execute("DELETE FROM sessions WHERE expires_at < $1", before)
            await c.execute("DELETE FROM notify_deliveries WHERE state<>'pending' "
                            "AND done_at < $1", before)
            return n

        return await self._transact(body)

    async def ping(self) -> bool:
        rows = await self._read("SELECT 1")
        return bool(rows) and rows[0][0] == 1

    def statistics(self) -> dict[str, float]:
        st = self._stats
        lat = sorted(st.latencies)
        pool = self._pool
        return {
            "commits": st.commits,
            "items": st.items,
            "max_batch": st.max_batch,
            "mean_batch": (st.items / st.commits) if st.commits else 0.0,
            "queued": st.queued - st.items,
            "failed_batches": st.failed_batches,
            "retries": st.retries,
            "commit_p50_ms": lat[len(lat) // 2] * 1000 if lat else 0.0,
            "commit_p99_ms": lat[int(len(lat) * 0.99)] * 1000 if lat else 0.0,
            "pool_size": pool.get_size() if pool is not None else 0,
            "pool_idle": pool.get_idle_size() if pool is not None else 0,
        }


def _count(status: str) -> int:
    """Rows a command touched, from its status tag ("DELETE 3")."""
    return int(status.rsplit(" ", 1)[-1])


async def _create_token(c: _Conn, token: str, tenant: str, role: Role, name: str,
                        expires_at: float | None, now: float) -> None:
    await c.execute("INSERT INTO tenants VALUES ($1, $2) ON CONFLICT DO NOTHING", tenant, now)
    if role is Role.HUMAN:
        await c.execute("INSERT INTO humans VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                        tenant, name, now)
    await c.execute("INSERT INTO tokens VALUES ($1,$2,$3,$4,$5,$6,NULL)",
                    hash_token(token), tenant, role.value, name, now, expires_at)


async def _keep_session(conn: Any) -> None:
    """What the pool runs when a connection comes back: nothing. asyncpg's default resets the
    session (``RESET ALL``, unlisten, close cursors — one more statement per use, 14 % of a
    node's CPU in the cluster bench); the store keeps no session state (its advisory locks
    are transaction-scoped, its settings come from the URL), so there is nothing to reset."""
    del conn


def _report(done: Done, fut: asyncio.Future[Any]) -> None:
    """A commit future's outcome as ``done(ok, value)``."""
    if fut.cancelled():
        done(False, StoreError("the commit was cancelled"))
    elif fut.exception() is not None:
        done(False, fut.exception())
    else:
        done(True, fut.result())
