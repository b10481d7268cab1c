"""The embedded store: SQLite in WAL mode, one writer thread with group commit.

Writes: one dedicated thread owns the only writing connection (the database as an actor,
like aiosqlite's own design). Callers enqueue work and await a future; the thread takes
*everything* queued while its previous commit ran, applies it in one transaction (a
savepoint per item, so one bad item cannot sink its neighbours) and commits once. With
``synchronous=FULL`` (the default, ``--sync full``) a commit survives power loss, and group
commit makes its fsync cost per batch, not per request. ``--sync normal`` survives kill -9
but may lose the last commits on power loss; it is faster on slow disks.

Under load a commit waits a little for company (``--commit-delay``, 3 ms, after a commit of
at least ``--commit-siblings`` callers, 4): the next commit starts no sooner than the delay
after the previous one started, unless no new write has come for ``--commit-gap`` (1 ms).
A commit's cost is mostly fixed (WAL frames, fsync, the GIL hand-offs of its statements),
so at 2,000 cycles/s this takes batches from ~6 to ~12 callers and the hub's CPU per cycle
from ~353 to ~300 µs (docs/performance.md, measured when it came); a lone caller never
waits.

When the database as a whole cannot be written (read-only, disk or size limit full, I/O
error) the whole batch fails cleanly: rolled back, every caller gets a retryable
:class:`StoreError` that says why, and the next batch tries again, so the store recovers by
itself when the condition clears. A few jobs (PRAGMAs, incremental vacuum) run between
batches, outside any transaction.

Reads: an aiosqlite connection; WAL lets it read while the writer writes.

Space: the database uses incremental auto-vacuum (migration 3), and a purge that deleted
rows gives the freed pages back to the file system.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import chain
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from hub.core import Extend, Insert, Op, Request, Resolve
from hub.faults import crash_point
from hub.journal import Event, Step
from hub.notify.events import Channel, DeliveryOutcome
from hub.protocol import TEXT, RunStatus
from hub.store.base import (
    Delivery,
    Done,
    Due,
    Endpoint,
    NewerDatabase,
    Principal,
    Role,
    RunSummary,
    StoreError,
    TokenInfo,
    hash_token,
    new_token,
    token_hash_of,
)
from hub.store.journal_sql import (
    PENDING,
    list_runs_query,
    purge_runs_sync,
    row_to_summary,
)
from hub.store.notify_sql import SCHEMA as NOTIFY_SCHEMA
from hub.store.notify_sql import (
    add_endpoint_sync,
    claim_sync,
    disable_sync,
    enqueue_for_ops,
    list_endpoints_query,
    purge_deliveries_sync,
    remove_endpoint_sync,
    row_to_endpoint,
    setting_sync,
    settle_sync,
    step_and_enqueue,
)
from hub.store.rows import REQUEST_COLUMNS as _COLUMNS
from hub.store.rows import request_payload as _payload
from hub.store.rows import row_to_request

log = logging.getLogger("a2h.store")


def _auto_vacuum(conn: sqlite3.Connection) -> None:
    """Migration 3: incremental auto-vacuum, so purges can give space back (issue 15).

    An existing database switches only through a VACUUM, which rewrites the file and cannot
    run inside a transaction: this migration runs outside one, and is idempotent (a crash
    before ``user_version`` moves just runs it again, finding the switch already made).
    """
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")


#: Numbered migrations gated by ``PRAGMA user_version``. SQL runs in one transaction with
#: the version bump; a function runs outside any transaction (for VACUUM), then the bump.
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    # 1: tenants, humans, tokens, sessions, requests
    """
    CREATE TABLE tenants (name TEXT PRIMARY KEY, created_at REAL NOT NULL);
    CREATE TABLE humans (
        tenant TEXT NOT NULL, handle TEXT NOT NULL, created_at REAL NOT NULL,
        PRIMARY KEY (tenant, handle));
    CREATE TABLE tokens (
        hash TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, name TEXT NOT NULL,
        created_at REAL NOT NULL, expires_at REAL, revoked_at REAL);
    CREATE INDEX tokens_revoked ON tokens (revoked_at) WHERE revoked_at IS NOT NULL;
    CREATE TABLE sessions (
        hash TEXT PRIMARY KEY, token_hash TEXT NOT NULL, created_at REAL NOT NULL,
        expires_at REAL NOT NULL);
    CREATE TABLE requests (
        tenant TEXT NOT NULL, op_id TEXT NOT NULL, conversation TEXT NOT NULL,
        to_human TEXT NOT NULL, sender TEXT NOT NULL, payload BLOB NOT NULL,
        payload_hash TEXT NOT NULL, status TEXT NOT NULL, value BLOB, actor TEXT,
        created_at REAL NOT NULL, deadline REAL NOT NULL, fixed_deadline INTEGER NOT NULL,
        resolved_at REAL, human_seconds REAL,
        PRIMARY KEY (tenant, op_id));
    CREATE INDEX requests_inbox ON requests (tenant, to_human, deadline) WHERE status = 'pending';
    CREATE INDEX requests_room ON requests (tenant, conversation) WHERE status = 'pending';
    CREATE INDEX requests_due ON requests (deadline) WHERE status = 'pending';
    CREATE INDEX requests_done ON requests (tenant, to_human, resolved_at) WHERE status != 'pending';
    CREATE INDEX requests_purge ON requests (resolved_at) WHERE status != 'pending';
    """,
    # 2: durable runs and their journal (issue 6; hub/journal.py, hub/store/journal_sql.py)
    """
    CREATE TABLE runs (
        tenant TEXT NOT NULL, run_id TEXT NOT NULL, conversation TEXT NOT NULL,
        version TEXT NOT NULL, agent TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
        secret TEXT NOT NULL, exec_id TEXT NOT NULL, escalate_to TEXT,
        created_at REAL NOT NULL, updated_at REAL NOT NULL, finished_at REAL,
        PRIMARY KEY (tenant, run_id));
    CREATE INDEX runs_status ON runs (tenant, status, updated_at);
    CREATE INDEX runs_purge ON runs (finished_at) WHERE finished_at IS NOT NULL;
    CREATE TABLE journal (
        tenant TEXT NOT NULL, run_id TEXT NOT NULL, position INTEGER NOT NULL,
        kind TEXT NOT NULL, name TEXT NOT NULL, args_hash TEXT NOT NULL, args BLOB,
        unsafe INTEGER NOT NULL, status TEXT NOT NULL, result BLOB, error BLOB, op_id TEXT,
        to_human TEXT, settle_round INTEGER NOT NULL, attempts INTEGER NOT NULL,
        exec_id TEXT NOT NULL, decided_by TEXT, started_at REAL NOT NULL, finished_at REAL,
        PRIMARY KEY (tenant, run_id, position),
        FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id) ON DELETE CASCADE);
    CREATE INDEX journal_ops ON journal (tenant, op_id) WHERE op_id IS NOT NULL;
    CREATE INDEX requests_sender ON requests (tenant, sender) WHERE status = 'pending';
    """,
    # 3: reclaim the space purges free
    _auto_vacuum,
    # 4: what changed lately, for the reconcile loop of several nodes
    """
    CREATE INDEX requests_created ON requests (created_at);
    CREATE INDEX requests_resolved ON requests (resolved_at) WHERE resolved_at IS NOT NULL;
    """,
    # 5: notifications: endpoints, the outbox of deliveries, hub-wide settings (issue 14)
    NOTIFY_SCHEMA,
    # 6: SQLite serves one node, where no reconcile loop reads what changed: the indexes of
    # migration 4 only cost every insert and resolution a write (issue 12's profile)
    """
    DROP INDEX IF EXISTS requests_created;
    DROP INDEX IF EXISTS requests_resolved;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the schema to SCHEMA_VERSION; refuse a database newer than this code."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise NewerDatabase(
            f"{path} has schema version {version}, but this a2h knows only up to "
            f"{SCHEMA_VERSION}: upgrade a2h-hub, or point --db at another file")
    for number in range(version, SCHEMA_VERSION):
        migration = MIGRATIONS[number]
        if not isinstance(migration, str):
            migration(conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process (the CLI, a second hub) may have migrated meanwhile.
            if conn.execute("PRAGMA user_version").fetchone()[0] <= number:
                for stmt in migration.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {number + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


#: Bytes the write-ahead log keeps after a checkpoint.
WAL_SIZE_LIMIT = 16 * 1024 * 1024


def _as_is(value: Any) -> Any:
    return value


def _bind_as_is() -> None:
    """Bind ``None`` and ``bytes`` as they are, through the adapter registry.

    The ``sqlite3`` module binds only ``int``, ``float``, ``str`` and ``bytearray`` without
    asking for an adapter. For any other value it looks one up and, finding none, tries the
    ``__adapt__`` and ``__conform__`` protocols: two failed attribute lookups, the first of
    which formats an ``AttributeError`` message that is then thrown away (about 2,500
    instructions a value, with the GIL held; a cycle binds some ten ``None`` and ``bytes``).
    An adapter that returns the value found in the registry binds the same NULL or BLOB
    without them. The registry is the process's: the same value is bound either way."""
    for kind in (type(None), bytes):
        if sqlite3.adapters.get((kind, sqlite3.PrepareProtocol)) is None:
            sqlite3.register_adapter(kind, _as_is)


def connect_sync(path: str | Path, synchronous: str = "FULL") -> sqlite3.Connection:
    _bind_as_is()
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                           timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA foreign_keys=ON")
    # After a checkpoint, cut the write-ahead log back to this size: a flood's WAL is not
    # kept on disk forever.
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    migrate(conn, str(path))
    # After the migrations (a VACUUM would build its copy of the database in memory): the
    # table a bulk resolution's ``UPDATE ... FROM`` fills is held in memory, not in a
    # temporary file created and unlinked for most commits (open, write, unlink and close:
    # ~10 % of the writer's CPU a commit, ``python -m bench.writer``). Statement journals
    # are not affected: a large one still spills to disk.
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


# ---------------------------------------------------------------------------- request operations


def _fetch(conn: sqlite3.Connection, tenant: str, op_id: str) -> Request | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM requests WHERE tenant=? AND op_id=?",
                       (tenant, op_id)).fetchone()
    return row_to_request(row) if row else None


def apply_op(conn: sqlite3.Connection, op: Op) -> Request | None | bool:
    """Run one request operation inside the writer's transaction.

    Returns True when the store agreed, else the stored row (None if there is none).
    """
    req = op.request
    if isinstance(op, Insert):
        cur = conn.execute(
            f"INSERT OR IGNORE INTO requests ({_COLUMNS}) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (req.tenant, req.op_id, req.conversation, req.to, req.sender, _payload(req),
             req.payload_hash, req.status.value,
             orjson.dumps(req.value) if req.value is not None else None, req.actor,
             req.created_at, req.deadline, int(req.fixed_deadline), req.resolved_at,
             req.human_seconds))
    elif isinstance(op, Resolve):
        cur = conn.execute(
            "UPDATE requests SET status=?, value=?, actor=?, resolved_at=?, human_seconds=? "
            "WHERE tenant=? AND op_id=? AND status='pending'",
            (req.status.value, orjson.dumps(req.value) if req.value is not None else None,
             req.actor, req.resolved_at, req.human_seconds, req.tenant, req.op_id))
    elif isinstance(op, Extend):
        cur = conn.execute(
            "UPDATE requests SET deadline=? WHERE tenant=? AND op_id=? AND status='pending'",
            (req.deadline, req.tenant, req.op_id))
    else:  # pragma: no cover - exhaustive
        raise TypeError(op)
    if cur.rowcount == 1:
        return True
    return _fetch(conn, req.tenant, req.op_id)


def _apply_ops(ops: list[Op], conn: sqlite3.Connection) -> list[Request | None | bool]:
    results = [apply_op(conn, op) for op in ops]
    enqueue_for_ops(conn, ops, [r is True for r in results])  # the outbox, same transaction
    return results


# ---------------------------------------------------------------------------- the writer

#: Primary result codes that concern the database as a whole, not one item: when one of
#: them hits, the whole batch fails (SQLite may already have rolled the transaction back).
_WHOLE_BATCH = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR,
                          sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_NOMEM,
                          sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED,
                          sqlite3.SQLITE_PROTOCOL})


def _code(exc: BaseException) -> int:
    return int(getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF


def _whole_batch(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) and _code(exc) in _WHOLE_BATCH


def _store_error(exc: BaseException) -> StoreError:
    """What a caller is told when the database could not be written: retry later."""
    if isinstance(exc, StoreError):
        return exc
    code = _code(exc)
    if code == sqlite3.SQLITE_FULL:
        what = "the database is full (no disk space left, or its size limit reached)"
    elif code == sqlite3.SQLITE_READONLY:
        what = "the database is read-only"
    elif code == sqlite3.SQLITE_IOERR:
        what = "the database could not be written (I/O error)"
    elif code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        what = "the database is locked by another process"
    else:
        what = f"the database failed ({exc})"
    err = StoreError(f"{what}: nothing was written; try again later")
    err.__cause__ = exc
    return err


#: Pages one incremental-vacuum job gives back (16 MiB of 4 KiB pages): a large purge
#: frees its space in several jobs, with other callers' batches committed in between.
VACUUM_PAGES = 4096


def _incremental_vacuum(conn: sqlite3.Connection) -> int:
    """Give up to VACUUM_PAGES free pages back to the file system; return how many free
    pages are left. Runs outside the group commit's transaction: this PRAGMA frees one page
    per step, and only ``executescript`` steps a statement to its end (it would commit an
    open transaction first)."""
    conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES})")
    return int(conn.execute("PRAGMA freelist_count").fetchone()[0])


#: Told a job's outcome, in the loop's thread: ``(True, result)`` or ``(False, exception)``.


@dataclass(slots=True)
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    #: a future to complete, or a callback called at once with the outcome
    fut: asyncio.Future[Any] | Done
    #: request ops the writer may apply in bulk with neighbouring jobs' ops
    ops: list[Op] | None = None
    #: run between batches, outside any transaction (PRAGMAs, incremental vacuum)
    outside: bool = False


class _Writer:
    """One thread, one connection, group commit."""

    def __init__(self, path: str, synchronous: str, commit_delay: float = 0.0,
                 commit_siblings: int = 4, commit_gap: float = 0.0) -> None:
        self._path = path
        self._sync = synchronous
        self._delay = commit_delay
        self._siblings = commit_siblings
        #: a wait for company ends once none has come for this long (0: never)
        self._gap = commit_gap or commit_delay
        self._q: queue.SimpleQueue[_Job | list[_Job] | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, name="a2h-sqlite-writer", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: the loop the callers wait in (results are delivered there)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.commits = 0
        self.items = 0
        self.max_batch = 0
        self.queued = 0
        self.failed_batches = 0
        #: commits that waited for company (``--commit-delay``)
        self.delayed = 0

    def start(self) -> None:
        self._worker.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def submit(self, fn: Callable[[sqlite3.Connection], Any], *, ops: list[Op] | None = None,
               outside: bool = False) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = self._caller_loop().create_future()
        self.queued += 1
        self._q.put(_Job(fn, fut, ops, outside))
        return fut

    def submit_ops(self, batches: list[tuple[list[Op], Done]]) -> None:
        """Submit several callers' request ops with one hand-off to the thread (one queue
        item, at most one wake-up); each keeps its own savepoint, and its callback is
        called with its outcome as soon as the commit is back in the loop's thread (no
        future, no extra loop iteration)."""
        self._caller_loop()
        jobs = [_Job(partial(_apply_ops, ops), done, ops) for ops, done in batches]
        self.queued += len(jobs)
        self._q.put(jobs)

    def _caller_loop(self) -> asyncio.AbstractEventLoop:
        """The loop results go to: the first caller's (asked once, since
        ``asyncio.get_running_loop()`` costs a ``getpid()`` call on Python 3.11)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def stop(self) -> None:
        if self._worker.is_alive():
            self._q.put(None)
            self._worker.join(30)

    def _run(self) -> None:
        try:
            conn = connect_sync(self._path, self._sync)
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        started = 0.0  # when the previous commit began, and how many callers it had
        callers = 0
        try:
            while True:
                first = self._q.get()
                if first is None:
                    return
                batch = first if isinstance(first, list) else [first]
                stop = False
                if self._delay and callers >= self._siblings:
                    stop = self._fill(batch, started + self._delay)
                started = time.monotonic()
                while not stop:
                    try:
                        item = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    if isinstance(item, list):
                        batch.extend(item)
                    else:
                        batch.append(item)
                group: list[_Job] = []
                for job in batch:
                    if job.outside:
                        if group:
                            self._commit(conn, group)
                            group = []
                        self._outside(conn, job)
                    else:
                        group.append(job)
                if group:
                    self._commit(conn, group)
                callers = len(group)
                if stop:
                    return
        finally:
            conn.close()

    def _fill(self, batch: list[_Job], until: float) -> bool:
        """Under load, let a batch of room writes fill until ``until`` (the previous commit's
        time counts): one fsync for more of them. A job that is not a room write (a journal
        step, a lone caller awaiting its future) ends the wait at once, and so does a gap of
        ``commit_gap`` with nothing new. True: stop."""
        items = batch
        waited = False
        while all(job.ops is not None for job in items):
            wait = until - time.monotonic()
            if wait <= 0:
                break
            if not waited:
                waited = True
                self.delayed += 1
            try:
                item = self._q.get(timeout=min(wait, self._gap))
            except queue.Empty:
                break
            if item is None:
                return True
            items = item if isinstance(item, list) else [item]
            batch.extend(items)
        return False

    def _outside(self, conn: sqlite3.Connection, job: _Job) -> None:
        result: tuple[bool, Any]
        try:
            result = (True, job.fn(conn))
        except sqlite3.Error as exc:
            result = (False, _store_error(exc))
        except Exception as exc:
            result = (False, exc)
        self.items += 1
        _post(self._loop, [job.fut], [result])

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        """One transaction for the batch. Every statement costs a hand-over of the GIL
        (the sqlite3 module releases it around each), so the batch is first applied
        without a savepoint per job: a lone job as it is, request ops in bulk, every other
        job (a journal step) straight. Only when a job fails or a compare-and-set in bulk
        does not match is the transaction rolled back and the batch applied again, each job
        in its own savepoint, so that one job's failure is only its own."""
        results: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            if len(batch) == 1:
                results = [self._lone(conn, batch[0])]
                if results[0][0]:
                    conn.execute("COMMIT")
                self.commits += 1
                self.items += 1
                self.max_batch = max(self.max_batch, 1)
                _post(self._loop, [batch[0].fut], results)
                return
            together = self._together(conn, batch)
            if together is not None:
                results = together
            else:  # nothing of it stays: start again, job by job
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                results = self._one_by_one(conn, batch)
            if any(job.ops is not None for job in batch):  # a group commit of room writes
                crash_point("store.mid_commit")
            conn.execute("COMMIT")
        except BaseException as exc:  # the commit failed: nobody's write happened
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            err = _store_error(exc) if isinstance(exc, sqlite3.Error | StoreError) \
                else StoreError(f"commit failed: {exc!r}")
            if self.failed_batches % 100 == 0:
                log.warning("a batch of %d writes failed: %s", len(batch), err)
            self.failed_batches += 1
            results = [(False, err)] * len(batch)
        self.commits += 1
        self.items += len(batch)
        self.max_batch = max(self.max_batch, len(batch))
        _post(self._loop, [job.fut for job in batch], results)

    @staticmethod
    def _together(conn: sqlite3.Connection, batch: list[_Job]) -> list[tuple[bool, Any]] | None:
        """Apply the whole batch with no savepoint: runs of request ops in bulk, every
        other job straight. None when a job failed or a compare-and-set did not match:
        part of the batch may then be applied, and the caller rolls it back. An error of
        the database as a whole is raised."""
        results: list[tuple[bool, Any]] = []
        i = 0
        while i < len(batch):
            j = _ops_run(batch, i)
            if j - i >= 2 and _BULK_OK:
                done = _bulk_jobs(conn, batch[i:j], savepoint=False)
                if done is None:
                    return None
                results.extend(done)
                i = j
                continue
            try:
                results.append((True, batch[i].fn(conn)))
            except sqlite3.DatabaseError as exc:
                if _whole_batch(exc):
                    raise
                return None
            except Exception:
                return None
            i += 1
        return results

    @staticmethod
    def _one_by_one(conn: sqlite3.Connection, batch: list[_Job]) -> list[tuple[bool, Any]]:
        """Apply the batch again after ``_together`` failed: each job in its own savepoint
        (runs of request ops in bulk under one, unless the run is the whole batch, which
        just failed in bulk)."""
        results: list[tuple[bool, Any]] = []
        i = 0
        while i < len(batch):
            j = _ops_run(batch, i)
            if j - i >= 2 and not (i == 0 and j == len(batch)):
                done = _bulk_jobs(conn, batch[i:j], savepoint=True)
                if done is not None:
                    results.extend(done)
                    i = j
                    continue
            fn = batch[i].fn
            i += 1
            conn.execute("SAVEPOINT item")
            try:
                results.append((True, fn(conn)))
                conn.execute("RELEASE item")
            except sqlite3.DatabaseError as exc:
                if _whole_batch(exc):
                    raise
                conn.execute("ROLLBACK TO item")
                conn.execute("RELEASE item")
                results.append((False, StoreError(str(exc))))
            except Exception as exc:
                conn.execute("ROLLBACK TO item")
                conn.execute("RELEASE item")
                results.append((False, exc))
        return results

    def _lone(self, conn: sqlite3.Connection, job: _Job) -> tuple[bool, Any]:
        """Run the only job of a transaction, without a savepoint: on failure the whole
        transaction is rolled back (the caller then does not commit)."""
        try:
            return (True, job.fn(conn))
        except sqlite3.DatabaseError as exc:
            if _whole_batch(exc):
                raise
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return (False, StoreError(str(exc)))
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return (False, exc)


def _ops_run(batch: list[_Job], i: int) -> int:
    """Where the run of request-op jobs that starts at ``i`` ends."""
    j = i
    while j < len(batch) and batch[j].ops is not None:
        j += 1
    return j


def _bulk_jobs(conn: sqlite3.Connection, jobs: list[_Job], *,
               savepoint: bool) -> list[tuple[bool, Any]] | None:
    """The request ops of ``jobs`` in bulk (``_bulk``): each job's result, or None if a
    compare-and-set did not match."""
    group = [job.ops or [] for job in jobs]
    if not _bulk(conn, [op for ops in group for op in ops], savepoint=savepoint):
        return None
    return [(True, [True] * len(ops)) for ops in group]


def _post(loop: asyncio.AbstractEventLoop | None, sinks: list[asyncio.Future[Any] | Done],
          results: list[tuple[bool, Any]]) -> None:
    if loop is None:
        return
    try:
        loop.call_soon_threadsafe(_deliver, sinks, results)
    except RuntimeError:  # loop closed during shutdown
        pass


#: UPDATE ... FROM needs SQLite 3.33; older libraries take the per-item path.
_BULK_OK = sqlite3.sqlite_version_info >= (3, 33, 0)


@lru_cache(maxsize=256)
def _rows_sql(head: str, width: int, rows: int, tail: str = "") -> str:
    """``head`` + ``VALUES (?,..),(?,..)`` for ``rows`` rows of ``width`` + ``tail``."""
    row = "(" + ",".join("?" * width) + ")"
    return head + "VALUES " + ",".join([row] * rows) + tail


#: Bulk statements by kind: plain bound parameters, one multi-row VALUES list per statement
#: (no JSON to parse per column). Row counts are padded to a power of two by repeating the
#: last row, so a few prepared statements serve every batch (the module caches them by
#: text); a repeated row changes nothing twice: the insert ignores it, the compare-and-set
#: no longer matches it.
_INS_HEAD = f"INSERT OR IGNORE INTO requests ({_COLUMNS}) "
_RES_HEAD = "WITH v(t, o, s, val, a, ra, hs) AS ("
_RES_TAIL = (") UPDATE requests SET status = v.s, value = v.val, actor = v.a, resolved_at = v.ra, "
             "human_seconds = v.hs FROM v WHERE requests.tenant = v.t AND requests.op_id = v.o "
             "AND requests.status = 'pending'")
_EXT_HEAD = "WITH v(t, o, d) AS ("
_EXT_TAIL = (") UPDATE requests SET deadline = v.d FROM v WHERE requests.tenant = v.t "
             "AND requests.op_id = v.o AND requests.status = 'pending'")
#: Rows per statement: SQLite's default limit of bound parameters (32,766) over 15 columns.
_MAX_ROWS = 2048


def _padded(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _run_bulk(conn: sqlite3.Connection, head: str, tail: str, width: int,
              rows: list[tuple[Any, ...]]) -> None:
    for at in range(0, len(rows), _MAX_ROWS):
        chunk = rows[at:at + _MAX_ROWS]
        n = _padded(len(chunk))
        params = list(chain.from_iterable(chunk))  # flat, in C
        params.extend(chunk[-1] * (n - len(chunk)))
        conn.execute(_rows_sql(head, width, n, tail), params)


def _bulk(conn: sqlite3.Connection, ops: list[Op], *, savepoint: bool = True) -> bool:
    """Apply request ops with one statement per kind (one GIL hand-off each, instead of
    three per op); False (nothing applied) if any compare-and-set did not match.

    Without ``savepoint`` (the ops are all the transaction holds) a False means the
    caller must roll the transaction back: part of the ops may have been applied."""
    if not _BULK_OK:
        return False
    ins: list[tuple[Any, ...]] = []
    ext: list[tuple[Any, ...]] = []
    res: list[tuple[Any, ...]] = []
    for op in ops:
        r = op.request
        if isinstance(op, Insert):
            ins.append((r.tenant, r.op_id, r.conversation, r.to, r.sender, _payload(r),
                        r.payload_hash, TEXT[r.status],
                        orjson.dumps(r.value) if r.value is not None else None, r.actor,
                        r.created_at, r.deadline, int(r.fixed_deadline), r.resolved_at,
                        r.human_seconds))
        elif isinstance(op, Resolve):
            res.append((r.tenant, r.op_id, TEXT[r.status],
                        orjson.dumps(r.value) if r.value is not None else None, r.actor,
                        r.resolved_at, r.human_seconds))
        else:
            ext.append((r.tenant, r.op_id, r.deadline))
    if savepoint:
        conn.execute("SAVEPOINT bulk")
    before = conn.total_changes
    try:
        # Inserts first: a batch may create a request and resolve it in one go.
        if ins:
            _run_bulk(conn, _INS_HEAD, "", 15, ins)
        if ext:
            _run_bulk(conn, _EXT_HEAD, _EXT_TAIL, 3, ext)
        if res:
            _run_bulk(conn, _RES_HEAD, _RES_TAIL, 7, res)
    except sqlite3.OperationalError as exc:
        if _whole_batch(exc):
            raise
        if savepoint:
            conn.execute("ROLLBACK TO bulk")
            conn.execute("RELEASE bulk")
        return False
    if conn.total_changes - before == len(ops):
        enqueue_for_ops(conn, ops, [True] * len(ops))  # the outbox, in the same transaction
        if savepoint:
            conn.execute("RELEASE bulk")
        return True
    if savepoint:
        conn.execute("ROLLBACK TO bulk")
        conn.execute("RELEASE bulk")
    return False


def _deliver(sinks: list[asyncio.Future[Any] | Done], results: list[tuple[bool, Any]]) -> None:
    for sink, (ok, val) in zip(sinks, results):
        if isinstance(sink, asyncio.Future):
            if sink.done():
                continue
            if ok:
                sink.set_result(val)
            else:
                sink.set_exception(val)
            continue
        try:
            sink(ok, val)
        except Exception:  # one caller's bug must not keep the others from their results
            log.exception("a commit callback failed")


# ---------------------------------------------------------------------------- the store


async def _open_reader(path: str) -> aiosqlite.Connection:
    reader = await aiosqlite.connect(path, isolation_level=None)
    await reader.execute("PRAGMA busy_timeout=30000")
    await reader.execute("PRAGMA query_only=1")
    return reader


class SQLiteStore:
    """SQLite backend of :class:`hub.store.base.Store`."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL", commit_delay: float = 0.0,
                 commit_siblings: int = 4, commit_gap: float = 0.0) -> None:
        self.path = str(path)
        self.synchronous = synchronous.upper()
        self._writer = _Writer(self.path, self.synchronous, commit_delay, commit_siblings,
                               commit_gap)
        self._reader: aiosqlite.Connection | None = None
        #: rooms are rebuilt on their own connection (and thread): after a restart with
        #: many overdue deadlines the first alarm sweep rebuilds thousands of rooms at once,
        #: and every other read (health checks, inboxes, history) would queue behind them
        self._room_reader: aiosqlite.Connection | None = None
        self._default_max_pages: int | None = None  # read and used in the writer thread

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        # Migrations run in the writer thread as it opens; wait for that off the loop.
        await loop.run_in_executor(None, self._writer.start)
        self._reader = await _open_reader(self.path)
        self._room_reader = await _open_reader(self.path)

    async def close(self) -> None:
        for reader in (self._reader, self._room_reader):
            if reader is not None:
                await reader.close()
        self._reader = self._room_reader = None
        await asyncio.get_running_loop().run_in_executor(None, self._writer.stop)

    async def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn(conn)`` in the writer thread, inside the next group commit (its own
        savepoint), and return its result once the transaction has committed."""
        return await self._writer.submit(fn)

    async def _read(self, sql: str, params: tuple[Any, ...] = (), *,
                    reader: aiosqlite.Connection | None = None) -> list[Any]:
        """Run one read-only query on the reader connection (or ``reader``): one trip to
        its thread and back (a cursor's ``execute``, ``fetchall`` and ``close`` are three,
        each a wake-up of that thread and then of the loop)."""
        reader = reader or self._reader
        assert reader is not None, "store not open"
        return list(await reader.execute_fetchall(sql, params))

    # -- identity

    async def is_empty(self) -> bool:
        rows = await self._read("SELECT 1 FROM tokens LIMIT 1")
        return not rows

    async def bootstrap(self, tenant: str, human: str) -> tuple[str, str] | None:
        human_token, agent_token = new_token(Role.HUMAN), new_token(Role.AGENT)

        def write(c: sqlite3.Connection) -> bool:
            if c.execute("SELECT 1 FROM tokens LIMIT 1").fetchone():
                return False
            create_token_sync(c, human_token, tenant, Role.HUMAN, human)
            create_token_sync(c, agent_token, tenant, Role.AGENT, "default")
            return True

        return (human_token, agent_token) if await self._write(write) else None

    async def create_token(self, tenant: str, role: Role, name: str,
                           expires_at: float | None = None) -> str:
        token = new_token(role)
        await self._write(lambda c: create_token_sync(c, token, tenant, role, name, expires_at))
        return token

    async def principal(self, token: str, now: float) -> Principal | None:
        return await self.principal_by_hash(hash_token(token), now)

    async def principal_by_hash(self, token_hash: str, now: float) -> Principal | None:
        rows = await self._read(
            "SELECT tenant, role, name, expires_at, revoked_at FROM tokens WHERE hash=?",
            (token_hash,))
        if not rows:
            return None
        tenant, role, name, expires_at, revoked_at = rows[0]
        if revoked_at is not None or (expires_at is not None and expires_at <= now):
            return None
        return Principal(tenant, Role(role), name, token_hash, expires_at)

    async def revoke_token(self, token: str, now: float, tenant: str | None = None) -> bool:
        return bool(await self._write(lambda c: revoke_token_sync(c, token, now, tenant)))

    async def list_tokens(self, tenant: str) -> list[TokenInfo]:
        rows = await self._read(
            "SELECT hash, role, name, created_at, expires_at, revoked_at FROM tokens "
            "WHERE tenant=? ORDER BY created_at", (tenant,))
        return [TokenInfo(hash=h, role=role, name=name, created_at=created,
                          expires_at=expires, revoked_at=revoked)
                for h, role, name, created, expires, revoked in rows]

    async def revoked_since(self, since: float) -> list[str]:
        rows = await self._read("SELECT hash FROM tokens WHERE revoked_at >= ?", (since,))
        return [r[0] for r in rows]

    async def list_humans(self, tenant: str) -> list[str]:
        rows = await self._read("SELECT handle FROM humans WHERE tenant=? ORDER BY handle",
                                 (tenant,))
        return [r[0] for r in rows]

    async def create_session(self, token_hash: str, now: float, ttl: float) -> str:
        session = secrets.token_urlsafe(32)

        def write(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))
            c.execute("INSERT INTO sessions VALUES (?,?,?,?)",
                      (hash_token(session), token_hash, now, now + ttl))

        await self._write(write)
        return session

    async def session_principal(self, session: str, now: float) -> Principal | None:
        rows = await self._read(
            "SELECT token_hash, expires_at FROM sessions WHERE hash=?", (hash_token(session),))
        if not rows or rows[0][1] <= now:
            return None
        return await self.principal_by_hash(rows[0][0], now)

    async def end_session(self, session: str) -> None:
        await self._write(lambda c: c.execute("DELETE FROM sessions WHERE hash=?",
                                               (hash_token(session),)))

    # -- requests

    async def apply(self, ops: list[Op]) -> list[Request | None | bool]:
        if not ops:
            return []
        # ops=: lets the writer apply neighbouring jobs' ops in bulk
        return list(await self._writer.submit(partial(_apply_ops, ops), ops=ops))

    def apply_soon(self, batches: list[tuple[list[Op], Done]]) -> None:
        """:meth:`apply` for several callers at once, without a coroutine or a future:
        one hand-off to the writer for all, and each caller's ``done(ok, value)`` called
        in the loop's thread once its ops committed (``value``: what ``apply`` returns)
        or failed (``value``: the exception). The room host uses it to commit every room
        that decided in one loop iteration."""
        self._writer.submit_ops(batches)

    async def get_request(self, tenant: str, op_id: str) -> Request | None:
        rows = await self._read(f"SELECT {_COLUMNS} FROM requests WHERE tenant=? AND op_id=?",
                                 (tenant, op_id))
        return row_to_request(rows[0]) if rows else None

    async def load_room(self, tenant: str, conversation: str) -> list[Request]:
        rows = await self._read(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=? AND conversation=? "
            "AND status='pending'", (tenant, conversation), reader=self._room_reader)
        return [row_to_request(r) for r in rows]

    async def inbox(self, tenant: str, handle: str) -> list[Request]:
        rows = await self._read(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=? AND to_human=? "
            "AND status='pending' ORDER BY deadline", (tenant, handle))
        return [row_to_request(r) for r in rows]

    async def history(self, tenant: str, handle: str, limit: int) -> list[Request]:
        rows = await self._read(
            f"SELECT {_COLUMNS} FROM requests WHERE tenant=? AND to_human=? "
            "AND status!='pending' ORDER BY resolved_at DESC LIMIT ?", (tenant, handle, limit))
        return [row_to_request(r) for r in rows]

    async def due(self, now: float, limit: int) -> list[Due]:
        rows = await self._read(
            "SELECT tenant, conversation, op_id, deadline FROM requests "
            "WHERE status='pending' AND deadline <= ? ORDER BY deadline LIMIT ?", (now, limit))
        return [Due(*r) for r in rows]

    async def changed_since(self, since: float, limit: int = 10_000) -> list[Request]:
        # One node reads this only when it shares the file with another hub and runs a bus,
        # which SQLite deployments do not: resolutions come through the purge index,
        # creations by a scan.
        rows = await self._read(
            f"SELECT {_COLUMNS} FROM requests WHERE created_at >= ? UNION "
            f"SELECT {_COLUMNS} FROM requests WHERE status != 'pending' AND resolved_at >= ? "
            "LIMIT ?", (since, since, limit))
        return [row_to_request(r) for r in rows]

    async def counts(self) -> dict[str, int]:
        rows = await self._read("SELECT status, count(*) FROM requests GROUP BY status")
        return {s: n for s, n in rows}

    async def pending_usage(self, tenant: str) -> tuple[int, int]:
        rows = await self._read(
            "SELECT count(*), coalesce(sum(length(payload)), 0) FROM requests "
            "WHERE tenant=? AND status='pending'", (tenant,))
        return int(rows[0][0]), int(rows[0][1])

    # -- runs and their journal

    async def run_step(self, tenant: str, event: Event, now: float,
                       max_entries: int) -> Step:
        step: Step = await self._write(
            lambda c: step_and_enqueue(c, tenant, event, now, max_entries))
        return step

    async def list_runs(self, tenant: str, status: RunStatus | None = None,
                        limit: int = 100) -> list[RunSummary]:
        sql, params = list_runs_query(tenant, status, limit)
        return [row_to_summary(r) for r in await self._read(sql, params)]

    async def run_pending(self, tenant: str, sender: str, limit: int = 500) -> list[Request]:
        rows = await self._read(PENDING, (tenant, sender, tenant, limit))
        return [row_to_request(r) for r in rows]

    # -- notifications

    async def add_endpoint(self, endpoint: Endpoint) -> Endpoint:
        stored: Endpoint = await self._write(lambda c: add_endpoint_sync(c, endpoint))
        return stored

    async def list_endpoints(self, tenant: str | None = None, *, human: str | None = None,
                             channel: Channel | None = None) -> list[Endpoint]:
        sql, params = list_endpoints_query(tenant, human, channel)
        return [row_to_endpoint(r, int(r[12])) for r in await self._read(sql, params)]

    async def remove_endpoint(self, endpoint_id: str, tenant: str | None = None,
                              human: str | None = None) -> bool:
        return bool(await self._write(
            lambda c: remove_endpoint_sync(c, endpoint_id, tenant, human)))

    async def claim_deliveries(self, now: float, lease: float, limit: int) -> list[Delivery]:
        claimed: list[Delivery] = await self._write(lambda c: claim_sync(c, now, lease, limit))
        return claimed

    async def release_deliveries(self) -> None:
        await self._write(lambda c: c.execute(
            "UPDATE notify_deliveries SET leased_until=NULL WHERE leased_until IS NOT NULL"))

    async def settle_delivery(self, delivery: Delivery, now: float, outcome: DeliveryOutcome,
                              error: str | None = None, next_at: float | None = None) -> None:
        await self._write(lambda c: settle_sync(c, delivery, now, outcome, error, next_at))

    async def disable_endpoint(self, endpoint_id: str, now: float, reason: str) -> None:
        await self._write(lambda c: disable_sync(c, endpoint_id, now, reason))

    async def setting(self, name: str, default: str) -> str:
        value: str = await self._write(lambda c: setting_sync(c, name, default))
        return value

    # -- housekeeping

    async def purge(self, before: float) -> int:
        def write(c: sqlite3.Connection) -> tuple[int, int]:
            n = c.execute("DELETE FROM requests WHERE status!='pending' AND resolved_at < ?",
                          (before,)).rowcount
            n += purge_runs_sync(c, before)
            purge_deliveries_sync(c, before)
            sessions = c.execute("DELETE FROM sessions WHERE expires_at < ?", (before,)).rowcount
            return int(n), int(sessions)

        deleted, sessions = await self._write(write)
        free, before_job = (-1 if deleted or sessions else 0), None
        try:
            while free and free != before_job:  # until nothing is left, or nothing moves
                before_job, free = free, await self._writer.submit(_incremental_vacuum,
                                                                   outside=True)
        except StoreError as exc:  # the purge committed; a later one frees the space
            log.warning("incremental vacuum after a purge failed: %s", exc)
        return int(deleted)

    async def ping(self) -> bool:
        rows = await self._read("SELECT 1")
        return rows == [(1,)]

    def statistics(self) -> dict[str, float]:
        w = self._writer
        return {
            "commits": w.commits,
            "items": w.items,
            "max_batch": w.max_batch,
            "mean_batch": (w.items / w.commits) if w.commits else 0.0,
            "queued": w.queued - w.items,
            "failed_batches": w.failed_batches,
            "delayed_commits": w.delayed,
        }

    # -- operational limits (SQLite only; also how tests simulate a read-only or full disk)

    async def set_limits(self, *, read_only: bool = False, max_pages: int | None = None) -> None:
        """Make the writer refuse writes (``read_only``) or cap the database's size in pages
        (``max_pages``; None: SQLite's default, i.e. no cap short of the disk). Writes then
        fail with a retryable StoreError, and succeed again once the limits are lifted."""

        def apply(c: sqlite3.Connection) -> None:
            if self._default_max_pages is None:
                self._default_max_pages = int(c.execute("PRAGMA max_page_count").fetchone()[0])
            c.execute(f"PRAGMA query_only = {int(read_only)}")
            c.execute(f"PRAGMA max_page_count = {int(max_pages or self._default_max_pages)}")

        await self._writer.submit(apply, outside=True)


# ---------------------------------------------------------------------------- sync admin
# Used inside the writer thread (and by bench/, which seeds tokens into a database file
# whether or not a hub runs on it: WAL + busy_timeout make the two writers take turns).


def create_token_sync(conn: sqlite3.Connection, token: str, tenant: str, role: Role, name: str,
                      expires_at: float | None = None) -> None:
    now = time.time()
    conn.execute("INSERT OR IGNORE INTO tenants VALUES (?, ?)", (tenant, now))
    if role is Role.HUMAN:
        conn.execute("INSERT OR IGNORE INTO humans VALUES (?, ?, ?)", (tenant, name, now))
    conn.execute("INSERT INTO tokens VALUES (?,?,?,?,?,?,NULL)",
                 (hash_token(token), tenant, role.value, name, now, expires_at))


def revoke_token_sync(conn: sqlite3.Connection, token: str, now: float,
                      tenant: str | None = None) -> bool:
    """Revoke by the token itself or by its hash (64 hex digits), optionally only within
    ``tenant``; ends the token's browser sessions too."""
    h = token_hash_of(token)
    if tenant is None:
        cur = conn.execute("UPDATE tokens SET revoked_at=? WHERE hash=? AND revoked_at IS NULL",
                           (now, h))
    else:
        cur = conn.execute("UPDATE tokens SET revoked_at=? WHERE hash=? AND tenant=? "
                           "AND revoked_at IS NULL", (now, h, tenant))
    if cur.rowcount != 1:
        return False
    conn.execute("DELETE FROM sessions WHERE token_hash=?", (h,))
    return True
