"""The writer's work per item (hub/store/sqlite.py apply_op), without the disk: an
in-memory database, so this is the SQL + Python cost the writer thread pays per request."""

from __future__ import annotations

import itertools
import sqlite3
import time

from bench.micro.conftest import make_ask
from hub.core import AnswerSubmitted, RoomCore
from hub.protocol import OpId, Status
from hub.store.sqlite import apply_op, migrate


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, ":memory:")
    return conn


def test_apply_insert_and_resolve(benchmark):  # type: ignore[no-untyped-def]
    conn = _db()
    core = RoomCore("default", "deploys")
    counter = itertools.count()
    now = time.time()

    def cycle() -> None:
        i = next(counter)
        ins = core.handle(make_ask(i), now).ops
        res = core.handle(AnswerSubmitted(OpId(f"{i:032x}"), "me", Status.ANSWERED, "yes"),
                          now).ops
        for op in ins + res:
            apply_op(conn, op)
        if len(core.requests) > 256:
            core.forget_terminal()

    conn.execute("BEGIN")
    benchmark(cycle)
    conn.execute("COMMIT")


def test_savepoint_pair(benchmark):  # type: ignore[no-untyped-def]
    """The per-item SAVEPOINT/RELEASE the writer wraps around every item."""
    conn = _db()
    conn.execute("BEGIN")

    def sp() -> None:
        conn.execute("SAVEPOINT item")
        conn.execute("RELEASE item")

    benchmark(sp)
    conn.execute("COMMIT")
