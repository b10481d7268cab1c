"""Fault injection for crash tests: die at a named point, only when a test asks for it.

A test starts ``a2h serve`` with ``A2H_CRASH_AT=<point>`` (and optionally
``A2H_CRASH_AFTER=<n>``: pass the point n times first). When the hub reaches that point it
exits at once with ``os._exit(CRASH_EXIT)``, like a SIGKILL: no cleanup, no flush, no
graceful shutdown. The variables are read once, when this module is imported (the
process's environment at start); without them every call is one string comparison —
these calls sit on the hot path of every commit.

The points (each a boundary where dying matters; tests/test_crash_points.py):

==========================  =========================================================
point                       where
==========================  =========================================================
``room.after_commit``       a room's batch committed, before any push or reply
``room.after_push``         pushes released, before the caller's reply
``store.mid_commit``        inside a group commit, other callers in the same batch
``journal.after_commit``    a journal step committed, before its reply
``startup.recovery``        during start-up, while overdue deadlines are being fired
``notify.before_send``      a notification's delivery row committed and claimed, before
                            it is sent (webhook, ntfy or push)
==========================  =========================================================
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

CRASH_EXIT = 137
POINTS = ("room.after_commit", "room.after_push", "store.mid_commit", "journal.after_commit",
          "startup.recovery", "notify.before_send")


class _Armed:
    """The crash point this process was started with, and its countdown."""

    __slots__ = ("point", "left")

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.point: str | None = environ.get("A2H_CRASH_AT") or None
        self.left = int(environ.get("A2H_CRASH_AFTER", "0") or 0)


ARMED = _Armed(os.environ)


def crash_point(name: str) -> None:
    """Exit the process now if a test armed ``name`` (and its countdown ran out)."""
    armed = ARMED
    if armed.point != name:
        return
    if armed.left > 0:
        armed.left -= 1
        return
    sys.stderr.write(f"a2h: crash point {name} reached; exiting {CRASH_EXIT}\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT)
