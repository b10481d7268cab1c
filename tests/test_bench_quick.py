"""Smoke test of the bench suite: ``python -m bench run --quick`` runs against real
subprocesses and writes a valid results file. It asserts shapes, never timings: the
figures belong to the benchmark report, not to the test suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e

SCENARIOS = ("cycles", "idle", "rooms", "recovery", "overload", "journal")
PERCENTILES = {"count", "p50", "p90", "p99", "max"}


def test_bench_quick_writes_results(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = list(tmp_path.glob("*.json"))
    assert len(results) == 1
    doc = json.loads(results[0].read_text())

    assert {"meta", "scenarios", "targets", "headline"} <= set(doc)
    assert doc["meta"]["quick"] is True
    for name in SCENARIOS:
        assert name in doc["scenarios"], name
        assert "error" not in doc["scenarios"][name], doc["scenarios"][name]

    runs = doc["scenarios"]["cycles"]["runs"]
    kinds = {r["server"] for r in runs}
    assert {"hub", "relay"} <= kinds
    for r in runs:
        assert "error" not in r, r
        assert r["cycles"] > 0
        assert PERCENTILES <= set(r["answer_to_agent_ms"])
        assert PERCENTILES <= set(r["ask_to_inbox_ms"])
        assert {"server_cpu_util", "client_cpu_util", "bottleneck"} <= set(r)

    idle = {r["server"]: r for r in doc["scenarios"]["idle"]["runs"]}
    assert idle["hub"]["connected"] == idle["hub"]["agents"] + idle["hub"]["inbox"]
    assert idle["hub"]["asked"] == idle["hub"]["agents"]
    assert "kib_per_waiting_agent" in idle["hub"]

    rooms = doc["scenarios"]["rooms"]
    assert rooms["all_evicted"] is True
    assert rooms["rebuild"]["rebuilds_seen"] >= rooms["rebuild"]["requests"]

    rec = doc["scenarios"]["recovery"]
    assert rec["pending_at_kill"] == rec["pending"]
    assert rec["expired_after"] == rec["pending"]
    assert rec["serving_s"] is not None and rec["all_fired_s"] is not None

    ov = doc["scenarios"]["overload"]
    assert ov["flood"]["codes"].get("overloaded", 0) > 0
    assert ov["flood"]["overloaded_not_retryable"] == ov["flood"]["codes"]["overloaded"]
    assert not ov["others_errors_flooded"]

    journal = doc["scenarios"]["journal"]
    assert PERCENTILES <= set(journal["journal_call_ms"])
    # the floor: two durable commits alone, on the same disk, measured in the same run
    assert journal["floor_two_commits_ms"]["count"] > 0
    assert journal["floor_p50_ms"] == round(journal["floor_two_commits_ms"]["p50"]
                                            + journal["baseline_two_pings_ms"]["p50"], 3)
    assert "floor here" in (tmp_path / "report.md").read_text()

    names = {t["name"] for t in doc["targets"]}
    assert any("cycles/s" in n for n in names)
    assert (tmp_path / "report.md").read_text().startswith("# Performance")


def test_instructions_per_cycle_under_callgrind() -> None:
    """``python -m bench.instructions``: valgrind counts the instructions of one ask → answer
    cycle of the hub's own work (start-up and warm-up cancelled by two cycle counts). The
    bounds are a sanity range around the ~660,000 it counts on this code, not a target."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--agents", "20", "--cycles", "200", "600",
         "--warmup", "50", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (row,) = json.loads(proc.stdout)
    assert row["tree"] == str(ROOT)
    assert row["ratio"] == 1.0
    assert 100_000 < row["instructions_per_cycle"] < 5_000_000, row
