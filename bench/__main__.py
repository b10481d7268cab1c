"""``python -m bench``: run the suite, render its report, profile the hub, soak and flood it,
compare two runs.

    .venv/bin/python -m bench run [--quick] [--scenario NAME ...] [--n N ...] [--publish]
    .venv/bin/python -m bench report bench/results/RESULT.json [--publish]
    .venv/bin/python -m bench profile [--n 1000] [--duration 20]
    .venv/bin/python -m bench soak [--seconds 60] [--kills 4] [--agents 20] [--seed 1515]
    .venv/bin/python -m bench flood [--asks 6000] [--pending-mib 64] [--retention 10] [--sockets 5000]
    .venv/bin/python -m bench compare A.json B.json [--changed PCT] [--match TEXT ...]

``run`` writes ``bench/results/<timestamp>.json`` and ``bench/results/report.md`` with PNG
plots next to it; ``--publish`` also writes ``docs/performance.md`` and ``docs/perf/*.png``.
``soak`` (``bench/soak.py``) SIGKILLs the hub at seeded random moments under SDK agents and
humans and checks the books (lost, duplicated, wrong, inboxes left): exit 1 if any is not 0.
``flood`` (``bench/flood.py``) floods a hub run with the user's default limits with large
asks and partial headers: RSS, database size, caps, memory given back. Both write
``bench/results/{soak,flood}-<timestamp>.json``. ``compare`` (``bench/compare.py``) prints
each figure of two result files side by side with B/A.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from bench import _sys
from bench._servers import ROOT
from bench.scenarios import SCENARIOS, Plan, cycles_once, log, run_plan

RESULTS = ROOT / "bench" / "results"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hub", "client_sdk"],
                               cwd=ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def disk_probe(path: Path, n: int = 200) -> dict[str, Any]:
    """fdatasync latency of 8 KiB appends on the results disk: how noisy the disk is today."""
    f = path / ".fsync-probe"
    fd = os.open(f, os.O_CREAT | os.O_RDWR | os.O_TRUNC)
    times = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 8192)
            t = time.perf_counter_ns()
            os.fdatasync(fd)
            times.append(time.perf_counter_ns() - t)
    finally:
        os.close(fd)
        f.unlink()
    return _sys.percentiles(times, 1e-6)


def machine_probe(n: int = 2000) -> dict[str, float]:
    """How fast this machine is at what the hub does most, so runs on different machines
    can be compared: a fixed pure-Python loop (ms; the interpreter's speed), and a
    round trip between two threads over a socket pair (µs, median; a system call and a
    wake-up each way, what every hand-off and every loopback frame pays)."""
    t = time.perf_counter()
    acc = 0
    for i in range(1_000_000):
        acc += i & 7
    loop_ms = (time.perf_counter() - t) * 1000
    a, b = socket.socketpair()

    def echo() -> None:
        while data := b.recv(64):
            b.sendall(data)

    th = threading.Thread(target=echo, daemon=True)
    th.start()
    rtts = []
    try:
        for _ in range(n):
            t0 = time.perf_counter_ns()
            a.sendall(b"x")
            a.recv(64)
            rtts.append(time.perf_counter_ns() - t0)
    finally:
        a.close()
        th.join(5)
        b.close()
    rtt = _sys.median([float(x) for x in rtts])
    return {"python_loop_ms": round(loop_ms, 1),
            "thread_rtt_us": round(rtt / 1000, 1) if rtt is not None else -1.0}


def cmd_run(args: argparse.Namespace) -> int:
    plan = Plan.quick_plan() if args.quick else Plan.full()
    if args.scenario:
        plan.scenarios = args.scenario
    if args.n:
        plan.cycles_ns = args.n
    if args.servers:
        plan.servers = args.servers
    if args.duration is not None:
        plan.duration = args.duration
    if args.repeats is not None:
        plan.repeats = args.repeats
    if args.quiet_wait is not None:
        plan.quiet_wait = args.quiet_wait
    if args.retries is not None:
        plan.retry_disturbed = args.retries
    if args.no_variants:
        plan.hub_variants = []
    out_dir = Path(args.out) if args.out else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(t0))
    log(f"suite: {'quick' if plan.quick else 'full'}; scenarios {plan.scenarios}; "
        f"results in {out_dir}")
    meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t0)),
        "quick": plan.quick,
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "git": _git_commit(),
        "machine": _sys.machine(),
        "versions": _sys.versions(),
        "disk_fdatasync_ms": disk_probe(out_dir),
        "machine_probe": machine_probe(),
        "plan": plan.to_json(),
    }
    scenarios = run_plan(plan)
    meta["seconds"] = round(time.time() - t0, 1)
    from bench import report

    doc = {"meta": meta, "scenarios": scenarios}
    doc["targets"] = report.targets(doc)
    doc["headline"] = report.headline(doc)
    path = out_dir / f"{stamp}.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    log(f"wrote {path}")
    md = report.render(doc, out_dir, plots=not args.no_plots)
    log(f"wrote {md}")
    if args.publish:
        report.publish(doc, plots=not args.no_plots)
    for t in doc["targets"]:
        log(f"target {t['name']}: {t['measured']} ({t['target']}) -> {t['status']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from bench import report

    doc = orjson.loads(Path(args.results).read_bytes())
    doc["targets"] = report.targets(doc)
    doc["headline"] = report.headline(doc)
    out_dir = Path(args.results).parent
    print(report.render(doc, out_dir, plots=not args.no_plots))
    if args.publish:
        report.publish(doc, plots=not args.no_plots)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Run the cycles load against the hub and record it with py-spy during the window."""
    import shutil

    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    plan = Plan.full()
    plan.duration = args.duration
    RESULTS.mkdir(parents=True, exist_ok=True)
    outs = []

    def attach(server: Any) -> None:
        for fmt, name in (("raw", "profile.txt"), ("flamegraph", "profile.svg")):
            if fmt == "flamegraph" and not args.svg:
                continue
            out = RESULTS / name
            outs.append(out)
            cmd = [py_spy, "record", "--pid", str(server.pid), "--duration",
                   str(int(args.duration) - 1), "--rate", str(args.rate), "--threads",
                   "--format", fmt, "-o", str(out)]
            if args.idle:
                cmd.append("--idle")
            if args.gil:
                cmd.append("--gil")
            # --native cannot sample without pausing the process; otherwise do not pause it.
            cmd.append("--native" if args.native else "--nonblocking")
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    r = cycles_once("hub", args.n, plan, on_window=attach, rate=args.rate_per_agent)
    time.sleep(2)
    print(f"{r['cycles_per_s']:.0f} cycles/s; answer->agent {r['answer_to_agent_ms']}; "
          f"server CPU {r['server_cpu_us_per_cycle']} µs/cycle; server loop util "
          f"{r['server_loop_util']}; clients {r['client_cpu_util']}; other jobs "
          f"{r['other_cpu_util']} cores; commits {r.get('store_commits')} (mean batch "
          f"{r.get('store_mean_batch')})")
    from bench._budget import render
    from bench._collapse import summarize

    if (RESULTS / "profile.txt").exists():
        print(summarize(str(RESULTS / "profile.txt"), 40))
        if not args.gil:  # the budget needs every thread's samples
            print()
            print(render(str(RESULTS / "profile.txt"), r["server_cpu_us_per_cycle"]))
    return 0


def _write(kind: str, doc: dict[str, Any], out: str | None) -> Path:
    out_dir = Path(out) if out else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    doc.setdefault("meta", {}).update({
        "command": "python -m bench " + " ".join(sys.argv[1:]), "git": _git_commit(),
        "machine": _sys.machine(), "versions": _sys.versions()})
    path = out_dir / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    log(f"wrote {path}")
    return path


def cmd_soak(args: argparse.Namespace) -> int:
    from bench.soak import SoakConfig, run_soak, summary

    cfg = SoakConfig(seconds=args.seconds, kills=args.kills, agents=args.agents,
                     humans=args.humans, seed=args.seed, drain=args.drain)
    doc = run_soak(cfg)
    _write("soak", doc, args.out)
    print(summary(doc))
    return 0 if doc["ok"] else 1


def cmd_flood(args: argparse.Namespace) -> int:
    from bench.flood import FloodConfig, run_flood, summary

    cfg = FloodConfig(asks=args.asks, conns=args.conns, window=args.window,
                      expires_in=args.expires_in,
                      pending_bytes_cap=int(args.pending_mib * 2**20),
                      retention=args.retention, wait_rooms=not args.no_room_wait,
                      conn_flood=args.sockets)
    doc = run_flood(cfg)
    _write("flood", doc, args.out)
    print(summary(doc))
    ok = doc["asks"]["cap_held"] and doc.get("hub_alive", False)
    return 0 if ok else 1


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.compare import compare

    print(compare(args.a, args.b, changed=args.changed / 100, match=args.match,
                  everything=args.all))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite")
    run.add_argument("--quick", action="store_true", help="the CI smoke run (< 2 minutes)")
    run.add_argument("--scenario", nargs="+", choices=list(SCENARIOS), help="only these")
    run.add_argument("--n", nargs="+", type=int, help="agent counts for the cycles scenario")
    run.add_argument("--servers", nargs="+", choices=["hub", "relay", "socketio"])
    run.add_argument("--duration", type=float, help="measured seconds per cycles run")
    run.add_argument("--repeats", type=int, help="repeat each cycles run (medians reported)")
    run.add_argument("--quiet-wait", type=float,
                     help="seconds to wait for a quiet machine before each run (default 30)")
    run.add_argument("--retries", type=int,
                     help="re-runs of a cycles run disturbed by other jobs (default 2)")
    run.add_argument("--no-variants", action="store_true",
                     help="skip the extra hub configurations (hub --sync normal)")
    run.add_argument("--out", help="results directory (default bench/results)")
    run.add_argument("--publish", action="store_true",
                     help="also write docs/performance.md and docs/perf/*.png")
    run.add_argument("--no-plots", action="store_true")
    run.set_defaults(fn=cmd_run)
    rep = sub.add_parser("report", help="render the report of a results file")
    rep.add_argument("results")
    rep.add_argument("--publish", action="store_true")
    rep.add_argument("--no-plots", action="store_true")
    rep.set_defaults(fn=cmd_report)
    prof = sub.add_parser("profile", help="py-spy the hub under the cycles load")
    prof.add_argument("--n", type=int, default=1000)
    prof.add_argument("--duration", type=float, default=20.0)
    prof.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    prof.add_argument("--idle", action="store_true", help="include idle samples")
    prof.add_argument("--svg", action="store_true", help="also write a flame graph")
    prof.add_argument("--gil", action="store_true",
                      help="only sample the thread holding the GIL (where Python CPU goes)")
    prof.add_argument("--native", action="store_true",
                      help="include C frames (shows the cyclic GC, syscalls)")
    prof.add_argument("--rate-per-agent", type=float, default=0.0,
                      help="pace each agent (asks/s); 0: closed loop")
    prof.set_defaults(fn=cmd_profile)
    soak = sub.add_parser("soak", help="agents and humans over a hub SIGKILLed at random moments")
    soak.add_argument("--seconds", type=float, default=60.0, help="the asking window")
    soak.add_argument("--kills", type=int, default=4, help="SIGKILLs inside the window")
    soak.add_argument("--agents", type=int, default=20)
    soak.add_argument("--humans", type=int, default=2)
    soak.add_argument("--seed", type=int, default=1515)
    soak.add_argument("--drain", type=float, default=60.0,
                      help="seconds in-flight asks may take to settle after the window")
    soak.add_argument("--out", help="results directory (default bench/results)")
    soak.set_defaults(fn=cmd_soak)
    flood = sub.add_parser("flood", help="large asks and partial headers against the limits")
    flood.add_argument("--asks", type=int, default=6000, help="large asks in the flood")
    flood.add_argument("--conns", type=int, default=16, help="agent sockets of the flood")
    flood.add_argument("--window", type=int, default=32, help="asks in flight per socket")
    flood.add_argument("--expires-in", type=float, default=8.0)
    flood.add_argument("--pending-mib", type=float, default=64.0,
                       help="--max-pending-bytes-per-tenant of the hub, MiB")
    flood.add_argument("--retention", type=float, default=10.0,
                       help="--retention of the hub, seconds")
    flood.add_argument("--sockets", type=int, default=5000,
                       help="partial-header sockets (0: skip that flood)")
    flood.add_argument("--no-room-wait", action="store_true",
                       help="measure 'after' at the purge, not once the rooms went idle")
    flood.add_argument("--out", help="results directory (default bench/results)")
    flood.set_defaults(fn=cmd_flood)
    cmp_ = sub.add_parser("compare", help="two result files side by side, with B/A")
    cmp_.add_argument("a", metavar="A.json")
    cmp_.add_argument("b", metavar="B.json")
    cmp_.add_argument("--changed", type=float, default=0.0, metavar="PCT",
                      help="only figures that moved by more than PCT %%")
    cmp_.add_argument("--match", nargs="+", metavar="TEXT",
                      help="only figures whose path contains one of these")
    cmp_.add_argument("--all", action="store_true",
                      help="also the meta block, configurations and data series")
    cmp_.set_defaults(fn=cmd_compare)
    args = ap.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
