"""Journal overhead: what ``run.call`` costs per call (issue 6).

    .venv/bin/python -m bench.bench_journal [--runs 100] [--calls 100] [--think-ms 100]
                                            [--sync full] [--out FILE]

A real hub (``a2h serve`` on SQLite, ``--sync full`` by default, as users get it) in a
subprocess; in this process, ``--runs`` durable runs at once, each on its own WebSocket
(one agent process each, in effect), each calling a trivial function ``--calls`` times with
a think time of about ``--think-ms`` between calls (uniform 0.5x..1.5x), as agents do.

Every ``run.call`` is two round trips: ``run.call`` (the hub commits ``running`` before the
function may start) and ``run.result`` (the hub commits ``done``). Measured per call, on
the client, from before the first frame to after the second reply.

Baseline, side by side on the same sockets and in the same iterations: two ``ping`` round
trips (the WebSocket floor of two frames, no store). ``overhead_p50_ms`` is the difference
of the medians: what the journal adds to two bare round trips.

``--switch-interval S`` starts the hub with ``sys.setswitchinterval(S)`` (default: Python's
5 ms): a diagnostic. The store's writer thread needs the GIL for every statement of a group
commit; while the event loop is busy, each hand-over can wait up to the switch interval. (On
the development machine it helped only when the machine was overloaded, load > 5.)

The floor, measured after the runs, on the disk of the hub's database: two SQLite commits
in a row, each durable as ``--sync`` makes it, through a connection opened as the hub's
writer opens one (``durable_floor``). A call is two such commits in sequence plus two round
trips, so ``floor_p50_ms`` (their p50 plus the two pings' p50) is what no SQLite-backed
server on this machine can beat while ``done`` is durable before ``run.call`` returns.

Prints one JSON object (and writes it to ``--out`` if given). The target of issue 12 is
``journal_call_ms`` p50 < 1 ms and p99 < 3 ms with 100 concurrent runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from typing import Any

import orjson

from bench import _sys
from bench._servers import Server
from hub.store.sqlite import connect_sync

WARMUP = 5


class _Hub(Server):
    """The benchmarked hub, optionally with another GIL switch interval."""

    def __init__(self, switch_interval: float | None, **kw: Any) -> None:
        super().__init__("hub", **kw)
        self.switch_interval = switch_interval

    def command(self) -> list[str]:
        cmd = super().command()
        if self.switch_interval is None:
            return cmd
        assert cmd[1:3] == ["-m", "hub.cli"], cmd
        boot = (f"import sys; sys.setswitchinterval({self.switch_interval!r}); "
                "from hub.cli import main; sys.exit(main(sys.argv[1:]))")
        return [cmd[0], "-c", boot, *cmd[3:]]


def noop(i: int) -> dict[str, int]:
    return {"i": i}


async def one_run(url: str, token: str, idx: int, calls: int, think: float,
                  journal: list[int], ping2: list[int], start: asyncio.Event) -> None:
    from client_sdk import Hub

    async with Hub(url, token=token) as hub:
        await start.wait()
        await asyncio.sleep(random.uniform(0, think))  # spread the runs' phases
        async with hub.run(f"bench-{idx}-{time.monotonic_ns()}", conversation="bench",
                           version="1") as run:
            for i in range(calls + WARMUP):
                t0 = time.perf_counter_ns()
                await run.call(noop, i)
                t1 = time.perf_counter_ns()
                await hub.ping()
                await hub.ping()
                t2 = time.perf_counter_ns()
                if i >= WARMUP:
                    journal.append(t1 - t0)
                    ping2.append(t2 - t1)
                if think:
                    await asyncio.sleep(think * random.uniform(0.5, 1.5))


async def measure(url: str, token: str, runs: int, calls: int,
                  think: float) -> dict[str, Any]:
    journal: list[int] = []
    ping2: list[int] = []
    start = asyncio.Event()
    tasks = [asyncio.create_task(one_run(url, token, i, calls, think, journal, ping2, start))
             for i in range(runs)]
    await asyncio.sleep(0.5)  # let every socket connect before the clock starts
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    j = _sys.percentiles(journal, 1e-6)
    p = _sys.percentiles(ping2, 1e-6)
    return {
        "journal_call_ms": j,
        "baseline_two_pings_ms": p,
        "overhead_p50_ms": round(j["p50"] - p["p50"], 3) if j["count"] else None,
        "calls_per_s": round(len(journal) / wall, 1),
        "wall_s": round(wall, 2),
    }


def durable_floor(directory: str, sync: str, pairs: int = 300,
                  gap: float = 0.001) -> dict[str, Any]:
    """Two commits in a row, ``pairs`` times with ``gap`` seconds between pairs (the load's
    pace keeps the disk busy, as ~2,000 steps/s do): each ``BEGIN IMMEDIATE``, one row of a
    journal entry's size, ``COMMIT``. Milliseconds per pair."""
    path = os.path.join(directory, "floor.db")
    conn = connect_sync(path, sync.upper())
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS floor (k INTEGER PRIMARY KEY, v BLOB)")
        blob = b"x" * 200
        times: list[int] = []
        for i in range(pairs):
            t0 = time.perf_counter_ns()
            for step in (0, 1):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO floor (k, v) VALUES (?, ?)",
                             (2 * i + step, blob))
                conn.execute("COMMIT")
            times.append(time.perf_counter_ns() - t0)
            time.sleep(gap)
        return _sys.percentiles(times, 1e-6)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--calls", type=int, default=100, help="measured calls per run")
    ap.add_argument("--think-ms", type=float, default=100.0)
    ap.add_argument("--sync", default="full", choices=["full", "normal"])
    ap.add_argument("--switch-interval", type=float, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    server = _Hub(args.switch_interval, extra=["--sync", args.sync])
    with server:
        token = server.tokens(agents=["bench"])["agent:bench"]
        cpu0 = server.cpu()
        own0 = time.process_time()
        m0 = server.metrics()
        result = asyncio.run(measure(server.url, token, args.runs, args.calls,
                                     args.think_ms / 1000))
        cpu = server.cpu() - cpu0
        own = time.process_time() - own0
        m1 = server.metrics()
        floor = durable_floor(os.path.dirname(str(server.db)), args.sync)
    commits = m1["a2h_store_commits_total"] - m0["a2h_store_commits_total"]
    items = m1["a2h_store_commit_items_total"] - m0["a2h_store_commit_items_total"]
    result["commits"] = int(commits)
    result["mean_batch"] = round(items / commits, 2) if commits else None
    result["floor_two_commits_ms"] = floor
    result["floor_p50_ms"] = round(floor["p50"] + result["baseline_two_pings_ms"]["p50"], 3)
    result["hub_cpu_s"] = round(cpu, 2)
    result["client_cpu_s"] = round(own, 2)
    with open("/proc/loadavg") as f:
        result["loadavg_1min_after"] = float(f.read().split()[0])
    out = {
        "bench": "journal",
        "command": "python -m bench.bench_journal " + " ".join(sys.argv[1:]),
        "runs": args.runs, "calls_per_run": args.calls, "think_ms": args.think_ms,
        "sync": args.sync, "switch_interval_s": args.switch_interval, "target_p50_ms": 1.0,
        "meets_target": result["journal_call_ms"]["p50"] is not None
        and result["journal_call_ms"]["p50"] < 1.0,
        **result,
        "machine": _sys.machine(),
    }
    text = orjson.dumps(out, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
