"""SQL for durable runs and their journal (schema: migration 2 in ``hub.store.sqlite``).

``SQLiteStore.run_step`` runs ``step_sync`` in the writer thread, in its own savepoint of
the next group commit. It reads the run and the journal entry the event is about, lets the
sans-I/O core (``hub.journal.handle``) decide, and upserts what the core returned, all in
that one transaction. The writer is the only one, so the read
and the write cannot interleave with another writer: every step is a compare-and-set
(invariant 2). A multi-node backend would take the same steps under ``SELECT ... FOR
UPDATE`` of the run's row.

Listings (``list_runs_query``, ``PENDING``) run on ``SQLiteStore``'s reader connection.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from hub.journal import (
    CallReached,
    Entry,
    EntryKind,
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
from hub.protocol import RunStatus
from hub.store.base import PriorRun, RunSummary
from hub.store.rows import REQUEST_COLUMNS

RUN_COLUMNS = ("tenant, run_id, conversation, version, agent, status, reason, secret, exec_id, "
               "escalate_to, created_at, updated_at, finished_at")
ENTRY_COLUMNS = ("tenant, run_id, position, kind, name, args_hash, args, unsafe, status, "
                 "result, error, op_id, to_human, settle_round, attempts, exec_id, decided_by, "
                 "started_at, finished_at")


def _dump(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def _load(blob: bytes | None) -> Any:
    return None if blob is None else orjson.loads(blob)


def row_to_run(row: tuple[Any, ...]) -> Run:
    (tenant, run_id, conversation, version, agent, status, reason, secret, exec_id,
     escalate_to, created_at, updated_at, finished_at) = row[:13]
    return Run(tenant=tenant, run_id=run_id, conversation=conversation, version=version,
               agent=agent, status=RunStatus(status), reason=reason, secret=secret,
               exec_id=exec_id, escalate_to=escalate_to, created_at=created_at,
               updated_at=updated_at, finished_at=finished_at)


def row_to_entry(row: tuple[Any, ...]) -> Entry:
    (tenant, run_id, position, kind, name, args_hash, args, unsafe, status, result, error,
     op_id, to_human, settle_round, attempts, exec_id, decided_by, started_at,
     finished_at) = row
    return Entry(tenant=tenant, run_id=run_id, position=position, kind=EntryKind(kind),
                 name=name, args_hash=args_hash, args=_load(args), unsafe=bool(unsafe),
                 status=EntryStatus(status), exec_id=exec_id, started_at=started_at,
                 attempts=attempts, result=_load(result), error=_load(error), op_id=op_id,
                 to=to_human, settle_round=settle_round, decided_by=decided_by,
                 finished_at=finished_at)


# ---------------------------------------------------------------------------- writer thread


def load_run(conn: sqlite3.Connection, tenant: str, run_id: str) -> Run | None:
    row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE tenant=? AND run_id=?",
                       (tenant, run_id)).fetchone()
    return row_to_run(row) if row else None


def load_entry(conn: sqlite3.Connection, tenant: str, run_id: str,
               position: int) -> Entry | None:
    row = conn.execute(
        f"SELECT {ENTRY_COLUMNS} FROM journal WHERE tenant=? AND run_id=? AND position=?",
        (tenant, run_id, position)).fetchone()
    return row_to_entry(row) if row else None


_RUN_AND_ENTRY = (
    "SELECT " + ", ".join("r." + c.strip() for c in RUN_COLUMNS.split(",")) + ", "
    + ", ".join("j." + c.strip() for c in ENTRY_COLUMNS.split(","))
    + " FROM runs r LEFT JOIN journal j ON j.tenant=r.tenant AND j.run_id=r.run_id "
    "AND j.position=? WHERE r.tenant=? AND r.run_id=?")


def load_run_and_entry(conn: sqlite3.Connection, tenant: str, run_id: str,
                       position: int) -> tuple[Run | None, Entry | None]:
    """Both in one statement: each statement of the writer is one hand-over of the GIL
    between the writer thread and the event loop, so fewer is faster under load."""
    row = conn.execute(_RUN_AND_ENTRY, (position, tenant, run_id)).fetchone()
    if row is None:
        return None, None
    run = row_to_run(row[:13])
    return run, (row_to_entry(row[13:]) if row[13] is not None else None)


def _has_later(conn: sqlite3.Connection, tenant: str, run_id: str, position: int) -> bool:
    return conn.execute(
        "SELECT 1 FROM journal WHERE tenant=? AND run_id=? AND position>? LIMIT 1",
        (tenant, run_id, position)).fetchone() is not None


def _settlement(conn: sqlite3.Connection, tenant: str, op_id: str) -> SettlementRequest | None:
    row = conn.execute("SELECT status, value, actor FROM requests WHERE tenant=? AND op_id=?",
                       (tenant, op_id)).fetchone()
    if row is None:
        return None
    return SettlementRequest(status=row[0], value=_load(row[1]), actor=row[2])


def _fallback_human(conn: sqlite3.Connection, tenant: str, run_id: str) -> str | None:
    row = conn.execute(
        "SELECT to_human FROM journal WHERE tenant=? AND run_id=? AND kind='interrupt' "
        "ORDER BY position DESC LIMIT 1", (tenant, run_id)).fetchone()
    if row is not None and row[0]:
        return str(row[0])
    rows = conn.execute("SELECT handle FROM humans WHERE tenant=? LIMIT 2",
                        (tenant,)).fetchall()
    return str(rows[0][0]) if len(rows) == 1 else None


def save_run(conn: sqlite3.Connection, run: Run) -> None:
    # An upsert, never INSERT OR REPLACE: a replace deletes the row first, and the delete
    # would cascade to the run's journal.
    conn.execute(
        f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT (tenant, run_id) DO UPDATE SET status=excluded.status, "
        "reason=excluded.reason, exec_id=excluded.exec_id, escalate_to=excluded.escalate_to, "
        "updated_at=excluded.updated_at, finished_at=excluded.finished_at",
        (run.tenant, run.run_id, run.conversation, run.version, run.agent, run.status.value,
         run.reason, run.secret, run.exec_id, run.escalate_to, run.created_at, run.updated_at,
         run.finished_at))


def save_entry(conn: sqlite3.Connection, e: Entry) -> None:
    conn.execute(
        f"INSERT INTO journal ({ENTRY_COLUMNS}) VALUES "
        "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT (tenant, run_id, position) DO UPDATE SET status=excluded.status, "
        "result=excluded.result, error=excluded.error, op_id=excluded.op_id, "
        "settle_round=excluded.settle_round, attempts=excluded.attempts, "
        "exec_id=excluded.exec_id, decided_by=excluded.decided_by, "
        "started_at=excluded.started_at, finished_at=excluded.finished_at",
        (e.tenant, e.run_id, e.position, e.kind.value, e.name, e.args_hash, _dump(e.args),
         int(e.unsafe), e.status.value, _dump(e.result), _dump(e.error), e.op_id, e.to,
         e.settle_round, e.attempts, e.exec_id, e.decided_by, e.started_at, e.finished_at))


def step_sync(conn: sqlite3.Connection, tenant: str, event: Event, now: float,
              max_entries: int = 10_000) -> tuple[Step, PriorRun]:
    """Read, decide, write: one journal step inside the writer's transaction. Returns the
    step and the run's status and reason before it (None: no run yet), read anyway, so
    callers need not read them again. (The core moves the run it was given in place.)"""
    if isinstance(event, RunStarted):
        snap = Snapshot(load_run(conn, tenant, event.run_id), max_entries=max_entries)
    elif isinstance(event, RunEnded):
        length = conn.execute("SELECT count(*) FROM journal WHERE tenant=? AND run_id=?",
                              (tenant, event.run_id)).fetchone()[0]
        snap = Snapshot(load_run(conn, tenant, event.run_id), journal_length=int(length))
    else:
        run, entry = load_run_and_entry(conn, tenant, event.run_id, event.position)
        later = False
        settlement = None
        fallback = None
        if run is not None:
            if isinstance(event, CallReached):
                if entry is not None and entry.status is EntryStatus.FAILED:
                    later = _has_later(conn, tenant, event.run_id, event.position)
                elif entry is not None and entry.status is EntryStatus.UNKNOWN and entry.op_id:
                    settlement = _settlement(conn, tenant, entry.op_id)
                elif entry is None and event.unsafe and run.escalate_to is None:
                    fallback = _fallback_human(conn, tenant, event.run_id)
        snap = Snapshot(run, entry, later, settlement, fallback, max_entries)
    was = None if snap.run is None else (snap.run.status, snap.run.reason)
    step = handle(event, snap, now)
    if step.write_run is not None:
        save_run(conn, step.write_run)
    if step.write_entry is not None:
        save_entry(conn, step.write_entry)
    return step, was


def purge_runs_sync(conn: sqlite3.Connection, finished_before: float) -> int:
    """Delete runs that completed or failed before ``finished_before`` (their journals go
    with them: ON DELETE CASCADE). Runs that are active or need attention are kept, like
    pending requests."""
    cur = conn.execute("DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?",
                       (finished_before,))
    return int(cur.rowcount)


# ---------------------------------------------------------------------------- reads


def list_runs_query(tenant: str, status: RunStatus | None,
                    limit: int) -> tuple[str, tuple[Any, ...]]:
    """Runs of one tenant, most recently changed first, with their journal length."""
    where = "r.tenant=?"
    params: tuple[Any, ...] = (tenant,)
    if status is not None:
        where += " AND r.status=?"
        params += (status.value,)
    cols = ", ".join("r." + c.strip() for c in RUN_COLUMNS.split(","))
    sql = (f"SELECT {cols}, (SELECT count(*) FROM journal j WHERE j.tenant=r.tenant "
           f"AND j.run_id=r.run_id) FROM runs r WHERE {where} "
           "ORDER BY r.updated_at DESC LIMIT ?")
    return sql, params + (limit,)


def row_to_summary(row: tuple[Any, ...]) -> RunSummary:
    return RunSummary(row_to_run(row[:13]), int(row[13]))


#: Open requests an agent is waiting on: the ones it sent, and every open interrupt or
#: unknown-outcome settlement of a run in its tenant. Parameters: tenant, sender, tenant,
#: limit.
PENDING = (
    f"SELECT {REQUEST_COLUMNS} FROM requests WHERE tenant=? AND status='pending' AND "
    "(sender=? OR op_id IN (SELECT op_id FROM journal WHERE tenant=? AND "
    "op_id IS NOT NULL AND status IN ('running', 'unknown'))) "
    "ORDER BY deadline LIMIT ?")
