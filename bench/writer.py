"""CPU of the SQLite writer's group commit, without the hub around it (issue 12).

    .venv/bin/python -m bench.writer [--cycles-per-commit 1 3 10] [--sync full] [--commits 1500]

One connection as the writer thread opens it (``hub.store.sqlite.connect_sync``: WAL, the
schema, ``synchronous``), a table of 20,000 requests (19,000 resolved, as retention keeps
them), then ``--commits`` transactions, each as the writer commits a batch of room writes:
``BEGIN IMMEDIATE``, ``_bulk`` (K new requests and K resolutions of earlier ones), ``COMMIT``.
Prints the thread CPU per commit and per cycle (one insert + one resolution) for each K,
and the write-ahead log frames (pages) a commit writes, counted over 100 more commits with
the automatic checkpoint off.

``--op-ids``: how the new requests' op_ids are made. ``random`` (128 random bits, as
``client_sdk`` made them before issue 12's fifth pass) puts every insert on its own page of
the primary key's index; ``ordered`` (a time prefix, then the random bits, as
``client_sdk.new_op_id`` makes them now) appends them at its end.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Any

from hub.core import Insert, Op, Request, Resolve
from hub.protocol import Kind, OpId, Status, fresh_op_id
from hub.store import sqlite as S


def _op_id(kind: str) -> OpId:
    random_hex = os.urandom(16).hex()
    return OpId(random_hex if kind == "random" else fresh_op_id(time.time(), random_hex))


def _request(i: int, kind: str = "ordered") -> Request:
    now = time.time()
    return Request(tenant="bench", op_id=_op_id(kind),
                   conversation=f"c{i % 1000}", to=f"human{i % 4}", sender=f"agent{i % 1000}",
                   kind=Kind.QUESTION, question=f"Approve the deploy of build {i}?",
                   choices=("yes", "no"), context={"build": i, "note": "x" * 60}, default=None,
                   schema=None, tools=None, payload_hash="h" * 16, status=Status.PENDING,
                   value=None, actor=None, created_at=now, deadline=now + 600,
                   fixed_deadline=False)


def _answered(r: Request) -> Request:
    return dataclasses.replace(r, status=Status.ANSWERED, value="yes", actor="human0",
                               resolved_at=time.time(), human_seconds=1.0)


def _commit(conn: Any, k: int, i: int, pending: list[Request], kind: str) -> int:
    """One batch as the writer commits it: k new requests, k resolutions of earlier ones."""
    ops: list[Op] = []
    for _ in range(k):
        r = _request(i, kind)
        i += 1
        ops.append(Insert(r))
        pending.append(r)
    while len(pending) > 2 * k:
        ops.append(Resolve(_answered(pending.pop(0))))
    conn.execute("BEGIN IMMEDIATE")
    if not S._bulk(conn, ops, savepoint=False):
        raise RuntimeError("a bulk write did not apply")
    conn.execute("COMMIT")
    return i


def measure(k: int, sync: str, commits: int, kind: str = "ordered") -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="a2h-writer-")
    try:
        conn = S.connect_sync(os.path.join(tmp, "hub.db"), sync)
        conn.execute("BEGIN")
        for i in range(20_000):
            r = _request(i, kind)
            S.apply_op(conn, Insert(r))
            if i % 20:
                S.apply_op(conn, Resolve(_answered(r)))
        conn.execute("COMMIT")
        pending: list[Request] = []
        i = 100_000
        cpu = 0.0
        wall0 = time.perf_counter()
        for _ in range(commits):
            t = time.thread_time()
            i = _commit(conn, k, i, pending, kind)
            cpu += time.thread_time() - t
        wall = time.perf_counter() - wall0
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(100):
            i = _commit(conn, k, i, pending, kind)
        frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        conn.close()
        return {"op_ids": kind, "cycles_per_commit": k,
                "cpu_us_per_commit": round(cpu / commits * 1e6),
                "cpu_us_per_cycle": round(cpu / commits / k * 1e6),
                "wall_us_per_commit": round(wall / commits * 1e6),
                "wal_frames_per_commit": round(frames / 100, 1)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles-per-commit", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL", "full", "normal"])
    ap.add_argument("--commits", type=int, default=1500)
    ap.add_argument("--op-ids", nargs="+", default=["ordered"], choices=["ordered", "random"])
    args = ap.parse_args()
    for k in args.cycles_per_commit:
        for kind in args.op_ids:
            print(measure(k, args.sync.upper(), args.commits, kind))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
