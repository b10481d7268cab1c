"""House rules that a machine can check: mypy --strict on the packages, ruff everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_mypy_strict_on_the_packages() -> None:
    r = run("mypy", "--strict", "-p", "hub", "-p", "client_sdk")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff() -> None:
    r = run("ruff", "check", "hub", "client_sdk", "tests", "bench")
    assert r.returncode == 0, r.stdout + r.stderr


def test_records_are_read_only_to_mypy() -> None:
    """``hub.records.record`` drops ``frozen`` at run time (it costs a call per field), so
    the type checker is what keeps frames, events, ops and effects immutable: it must reject
    an assignment to any of their fields, as for a frozen dataclass."""
    code = "\n".join([
        "from hub.core import AlarmSet, Insert, Replied",
        "from hub.protocol import Ask",
        "def f(a: Ask, r: Replied, i: Insert, s: AlarmSet) -> None:",
        "    a.question = 'x'",
        "    r.attached = True",
        "    i.request = i.request",
        "    s.deadline = 0.0",
    ])
    r = run("mypy", "--strict", "--config-file", "", "-c", code)
    assert r.returncode == 1, r.stdout + r.stderr
    for name in ("question", "attached", "request", "deadline"):
        assert f'Property "{name}" defined in' in r.stdout and "is read-only" in r.stdout, \
            (name, r.stdout)
    assert r.stdout.count("is read-only") == 4, r.stdout


def test_records_compare_and_hash_by_value() -> None:
    from hub.bus import InboxChanged
    from hub.core import AlarmSet

    a, b = AlarmSet("t", "c", "o", 1.0), AlarmSet("t", "c", "o", 1.0)
    assert a == b and hash(a) == hash(b) and a != AlarmSet("t", "c", "o", 2.0)
    assert {InboxChanged("t", "h", "o"), InboxChanged("t", "h", "o")} == {InboxChanged("t", "h", "o")}
    assert repr(a) == "AlarmSet(tenant='t', conversation='c', op_id='o', deadline=1.0)"
