"""The bench report's hub ÷ relay ratios pair each sweep's hub with the same sweep's relay.

A host that changes speed between sweeps moves both servers of one sweep; the ratio of the
two medians could pair the hub of a slow sweep with the relay of a fast one."""

from __future__ import annotations

from typing import Any

from bench.report import paired_ratios, targets
from bench.scenarios import summarize_cycles


def _run(label: str, n: int, rep: int, cps: float) -> dict[str, Any]:
    return {"server": label, "label": label, "n": n, "mode": "closed", "rep": rep,
            "cycles_per_s": cps, "answer_to_agent_ms": {"p50": 1.0, "p99": 2.0},
            "ask_to_inbox_ms": {"p50": 1.0, "p99": 2.0}}


def _doc(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"meta": {}, "scenarios": {"cycles": {"runs": runs,
                                                 "summary": summarize_cycles(runs)}}}


# Three sweeps whose speed differs: the hub's median (6,810) and the relay's (10,520) come
# from the first sweep, so their ratio is 0.65, while two sweeps of three measured ~0.52.
SWEEPS = [(6810.0, 10520.0), (8083.0, 15411.0), (4574.0, 8619.0)]


def test_the_ratio_is_the_median_of_each_sweeps_own_ratio() -> None:
    runs = [_run(lb, 100, rep, cps) for rep, pair in enumerate(SWEEPS)
            for lb, cps in zip(("hub", "relay"), pair)]
    ratio, sweeps = paired_ratios(_doc(runs), "relay", 100)
    assert sweeps == [0.65, 0.52, 0.53]
    assert ratio == 0.53
    row = next(t for t in targets(_doc(runs))
               if t["name"].startswith("hub ÷ bare relay, cycles/s (stretch"))
    assert row["status"] == "NOT met"
    assert "0.53 (N=100; sweeps 0.65 0.52 0.53)" in row["measured"]


def test_a_single_sweep_is_the_ratio_of_its_two_runs() -> None:
    runs = [_run("hub", 200, 0, 6000.0), _run("relay", 200, 0, 9000.0)]
    assert paired_ratios(_doc(runs), "relay", 200) == (0.67, [0.67])
    row = next(t for t in targets(_doc(runs)) if t["name"] == "hub ÷ bare relay, cycles/s")
    assert row["measured"] == "0.67 (N=200)"
    assert row["status"] == "met"


def test_runs_without_a_sweep_number_fall_back_to_the_summaries() -> None:
    runs = [{**_run("hub", 100, 0, 7000.0), "rep": None},
            {**_run("relay", 100, 0, 10000.0), "rep": None}]
    assert paired_ratios(_doc(runs), "relay", 100) == (0.7, [])


def test_a_sweep_that_failed_on_one_side_is_left_out() -> None:
    runs = [_run("hub", 100, 0, 6000.0), _run("relay", 100, 0, 10000.0),
            _run("hub", 100, 1, 7000.0), {**_run("relay", 100, 1, 0.0), "error": "boom"},
            _run("hub", 100, 2, 8000.0), _run("relay", 100, 2, 10000.0)]
    ratio, sweeps = paired_ratios(_doc(runs), "relay", 100)
    assert sweeps == [0.6, 0.8]
    assert ratio == 0.7
