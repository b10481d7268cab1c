"""Fault injection for crash tests: die at a named point, only when a test asks for it.

A test starts ``a2h serve`` with ``A2H_CRASH_AT=<point>`` (and optionally
``A2H_CRASH_AFTER=<n>``: pass the point n times first). When the hub reaches that point it
exits at once with ``os._exit(CRASH_EXIT)``, like a SIGKILL: no cleanup, no flush, no
graceful shutdown. Without the variable every call is a dictionary lookup and returns.

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

CRASH_EXIT = 137
POINTS = ("room.after_commit", "room.after_push", "store.mid_commit", "journal.after_commit",
          "startup.recovery", "notify.before_send")


def crash_point(name: str) -> None:
    """Exit the process now if a test armed ``name`` (and its countdown ran out)."""
    armed = os.environ.get("A2H_CRASH_AT")
    if armed is None or armed != name:
        return
    left = int(os.environ.get("A2H_CRASH_AFTER", "0") or 0)
    if left > 0:
        # The countdown lives in the environment of this process only: no module state.
        os.environ["A2H_CRASH_AFTER"] = str(left - 1)
        return
    sys.stderr.write(f"a2h: crash point {name} reached; exiting {CRASH_EXIT}\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT)
