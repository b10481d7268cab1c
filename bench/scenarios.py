"""The five scenarios, each against real server subprocesses, bounded in count and time.

Every scenario starts its own server(s) and load-generator processes (``bench.loadgen``),
measures, stops everything and returns a JSON-ready dict. CPU and memory come from
``/proc`` (server: the whole process and its event-loop thread; clients: each process), so
a run says whether the server or the load client was the bottleneck.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bench import _sys
from bench._servers import ROOT, Server, wait_healthy
from bench._sys import now_ns, percentiles, sleep_until_ns


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    """Sizes and durations. ``Plan.full()`` is the documented suite, ``Plan.quick()`` the
    CI smoke run (under 2 minutes)."""

    quick: bool = False
    scenarios: list[str] = field(default_factory=lambda: [s for s in SCENARIOS if s not in OPT_IN])
    # cycles
    cycles_ns: list[int] = field(default_factory=lambda: [100, 200, 1000, 5000])
    servers: list[str] = field(default_factory=lambda: ["hub", "relay", "socketio"])
    humans: int = 4
    #: Latency is measured a second time with every agent paced so that all of them together
    #: offer this many asks/s (closed-loop latency is N / throughput by Little's law, so it
    #: says little about the hub); 0 skips the paced runs.
    paced_total: float = 2000.0
    warmup: float = 3.0
    duration: float = 10.0
    repeats: int = 1
    agent_procs: int = 1
    #: Before each measured run, wait up to this long for other jobs on the machine to calm
    #: down (the development machine is shared); what was seen is recorded either way.
    quiet_wait: float = 30.0
    #: A cycles run during which other jobs used >= 0.3 cores is run again (up to this many
    #: times); the run kept says how disturbed it was (``other_cpu_util``).
    retry_disturbed: int = 2
    #: Extra hub configurations run next to the default one in the cycles scenario:
    #: (label, extra ``a2h serve`` flags).
    hub_variants: list[tuple[str, list[str]]] = field(
        default_factory=lambda: [("hub --sync normal", ["--sync", "normal"])])
    #: N values at which python-socketio's own AsyncClient also drives the socket.io relay.
    sio_client_ns: list[int] = field(default_factory=lambda: [200])
    # idle capacity
    idle_agents: int = 10_000
    idle_inbox: int = 1_000
    idle_procs: int = 4
    idle_settle: float = 3.0
    idle_window: float = 25.0  # > the 20 s heartbeat, so the window sees one ping round
    # rooms
    rooms_total: int = 100_000
    rooms_agents: int = 200
    room_idle: float = 1.0
    rebuild_probes: int = 2_000
    #: Also measure RSS once the deadlines of the answered requests have passed (the alarm
    #: heap keeps an entry per request until its deadline; asks use ``wait`` 5 s, so that is
    #: 15 s after the last ask).
    rooms_after_deadlines: bool = True
    # recovery
    recovery_pending: int = 10_000
    recovery_expires: float = 6.0
    # overload
    overload_agents: int = 100
    overload_rate: float = 10.0     # asks/s per agent: 1,000 cycles/s in all
    overload_duration: float = 10.0
    #: calm and flooded phases alternate this many times; the figures pool every round
    overload_rounds: int = 3
    overload_mailbox: int = 100
    flood_burst: int = 500
    flood_interval_ms: float = 100.0
    # journal (issue 12: ``running`` + ``done`` with 100 concurrent runs)
    journal_runs: int = 100
    journal_calls: int = 100
    journal_think_ms: float = 100.0

    @classmethod
    def full(cls) -> Plan:
        return cls()

    @classmethod
    def quick_plan(cls) -> Plan:
        return cls(quick=True, cycles_ns=[50], paced_total=500.0, warmup=0.5, duration=2.0,
                   sio_client_ns=[], quiet_wait=0.0, retry_disturbed=0, hub_variants=[],
                   idle_agents=300, idle_inbox=30, idle_procs=1, idle_settle=0.5,
                   idle_window=2.0, rooms_total=2_000, rooms_agents=50, room_idle=0.5,
                   rebuild_probes=100, rooms_after_deadlines=False, recovery_pending=500,
                   recovery_expires=4.0, overload_agents=20, overload_rate=10.0,
                   overload_duration=2.0, overload_rounds=1, flood_burst=300, journal_runs=10,
                   journal_calls=10)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------- load processes


class LoadProc:
    """A ``bench.loadgen`` subprocess, driven by JSON lines."""

    def __init__(self, cfg: dict[str, Any], name: str) -> None:
        self.name = name
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.loadgen"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=ROOT, env=env)
        self.q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()
        self.send(cfg)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.q.put(orjson.loads(line))
            except orjson.JSONDecodeError:
                self.err.append(line.decode(errors="replace"))
        self.q.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if len(self.err) < 200:
                self.err.append(line.decode(errors="replace"))

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(obj) + b"\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name}: no {event!r} in {timeout:.0f} s\n"
                                   + "".join(self.err[-30:]))
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise RuntimeError(f"{self.name} exited before {event!r}:\n"
                                   + "".join(self.err[-30:]))
            if msg.get("event") == "log":
                log(f"{self.name}: {msg.get('msg')}")
                continue
            if msg.get("event") == event:
                return msg

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "exit"})
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _close_all(procs: list[LoadProc]) -> None:
    for p in procs:
        try:
            p.close()
        except Exception as exc:  # noqa: BLE001 - cleanup must go on
            log(f"closing {p.name}: {exc!r}")


def _split(n: int, parts: int) -> list[int]:
    parts = max(1, min(parts, n)) if n else 1
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _agent_tokens(tokens: dict[str, str], names: list[str], start: int, count: int) -> list[str]:
    return [tokens[f"agent:{name}"] for name in names[start:start + count]]


def _cpu_meter(server: Server, procs: list[LoadProc]) -> _sys.CpuMeter:
    pids = {"server": server.pid}
    pids |= {p.name: p.pid for p in procs}
    return _sys.CpuMeter(pids)


def _thread_cpu(pid: int) -> float:
    """CPU of a process's main thread (the server's event loop)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _sys.CLK_TCK
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------- 1. cycles


def cycles_once(kind: str, n: int, plan: Plan, *, dialect: str | None = None,
                rate: float = 0.0, extra: list[str] | None = None,
                label: str | None = None, on_window: Any = None) -> dict[str, Any]:
    """N agents in a closed loop against one server, auto-answering humans."""
    load_before = _sys.wait_quiet(plan.quiet_wait) if plan.quiet_wait else None
    server = Server(kind, extra=extra)
    humans = [f"h{i}" for i in range(plan.humans)]
    procs_n = _split(n, plan.agent_procs)
    agent_names = [f"a{i}" for i in range(n)]  # one token per agent
    tokens = server.tokens(agents=agent_names, humans=humans)
    server.start()
    d = dialect or server.dialect
    procs: list[LoadProc] = []
    try:
        procs.append(LoadProc({"mode": "cycles", "base": server.url, "dialect": d,
                               "humans": [{"handle": h, "token": tokens[f"human:{h}"]}
                                          for h in humans]}, "humans"))
        procs[0].expect("ready", 60)
        index0 = 0
        for p, count in enumerate(procs_n):
            procs.append(LoadProc({"mode": "cycles", "base": server.url, "dialect": d,
                                   "agents": {"count": count, "index0": index0,
                                              "tokens": _agent_tokens(tokens, agent_names,
                                                                      index0, count),
                                              "humans": humans, "prefix": "a", "rate": rate}},
                                  f"agents{p}"))
            index0 += count
        connected = sum(p.expect("ready", 60 + n / 50)["connected"] for p in procs[1:])
        t = now_ns() + int(0.2e9)
        m0 = t + int(plan.warmup * 1e9)
        m1 = m0 + int(plan.duration * 1e9)
        for p in procs:
            p.send({"cmd": "run", "m0": m0, "m1": m1, "stop": m1})
        meter = _cpu_meter(server, procs)
        sleep_until_ns(m0)
        # The writer's counters at both ends of the window (read outside the CPU meter):
        # commits and batch sizes of the measured cycles, not of the warm-up.
        store0 = server.metrics() if kind == "hub" else {}
        meter.start()
        loop0 = _thread_cpu(server.pid)
        rss0 = server.rss_kib()
        if on_window is not None:
            on_window(server)
        sleep_until_ns(m1)
        used = meter.stop()
        loop_used = _thread_cpu(server.pid) - loop0
        rss1 = server.rss_kib()
        store1 = server.metrics() if kind == "hub" else {}
        time.sleep(0.5)  # let in-flight cycles finish (they are outside the window anyway)
        results = []
        for p in procs:
            p.send({"cmd": "finish"})
        for p in procs:
            results.append(p.expect("result", 60))
        metrics = server.metrics() if kind == "hub" else {}
    finally:
        _close_all(procs)
        server.stop()
    agents_res = results[1:]
    cycles = sum(r["cycles"] for r in agents_res)
    lat_a = results[0]["lat_a"]
    lat_b = [x for r in agents_res for x in r["lat_b"]]
    rtt = [x for r in agents_res for x in r["rtt"]]
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    wall = meter.wall
    server_util = used["server"] / wall
    loop_util = loop_used / wall
    client_utils = {p.name: round(used[p.name] / wall, 3) for p in procs}
    out = {
        "server": kind, "label": label or kind, "dialect": d, "n": n, "connected": connected,
        "window_s": round(wall, 3), "cycles": cycles,
        "cycles_per_s": round(cycles / wall, 1),
        "ask_to_inbox_ms": percentiles(lat_a, 1e-3),
        "answer_to_agent_ms": percentiles(lat_b, 1e-3),
        "ask_to_answer_ms": percentiles(rtt, 1e-3),
        "server_cpu_util": round(server_util, 3),
        "server_loop_util": round(loop_util, 3),
        "server_cpu_us_per_cycle": round(used["server"] / cycles * 1e6, 1) if cycles else None,
        "server_loop_us_per_cycle": round(loop_used / cycles * 1e6, 1) if cycles else None,
        "client_cpu_util": client_utils,
        "client_cpu_us_per_cycle": round(sum(used[p.name] for p in procs) / cycles * 1e6, 1)
        if cycles else None,
        "server_rss_mib": round(rss1 / 1024, 1), "server_rss_growth_mib": round((rss1 - rss0) / 1024, 1),
        "bottleneck": _bottleneck(loop_util, client_utils, meter.other_util, paced=bool(rate)),
        "other_cpu_util": meter.other_util, "machine_load_before": load_before,
        "errors": errors,
        "rate_per_agent": rate,
        "mode": "paced" if rate else "closed",
        "offered_per_s": round(rate * n, 1) if rate else None,
    }
    if metrics:
        commits = store1.get("a2h_store_commits_total", 0) - store0.get("a2h_store_commits_total", 0)
        items = (store1.get("a2h_store_commit_items_total", 0)
                 - store0.get("a2h_store_commit_items_total", 0))
        out["store_commits"] = commits  # in the window
        out["store_commits_per_cycle"] = round(commits / cycles, 3) if cycles else None
        out["store_mean_batch"] = round(items / commits, 1) if commits else None
        out["store_max_batch"] = metrics.get("a2h_store_commit_batch_max")  # since start
    out["answer_to_agent_cdf"] = _sys.cdf_points(lat_b, 1e-3)
    return out


def _bottleneck(loop_util: float, client_utils: dict[str, float], other: float = 0.0,
                paced: bool = False) -> str:
    if other >= 0.3:
        return f"shared machine: other jobs used {other:.2f} cores"
    busy = [k for k, v in client_utils.items() if v >= 0.9]
    if loop_util >= 0.9 and not busy:
        return "server event loop"
    if busy and loop_util < 0.9:
        return "client (" + ", ".join(busy) + ")"
    if busy:
        return "both (2 cores shared)"
    if paced:
        return "none (load below capacity)"
    return "neither CPU: waits (commits, pauses)"


def _cycles_retrying(kind: str, n: int, plan: Plan, **kw: Any) -> dict[str, Any]:
    for attempt in range(plan.retry_disturbed + 1):
        r = cycles_once(kind, n, plan, **kw)
        r["attempts"] = attempt + 1
        if r["other_cpu_util"] < 0.3 or attempt == plan.retry_disturbed:
            break
        log(f"  disturbed: other jobs used {r['other_cpu_util']} cores; running again")
    return r


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def scenario_cycles(plan: Plan) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    skipped = []
    servers = list(plan.servers)
    if "socketio" in servers and not _has("socketio"):
        servers.remove("socketio")
        skipped.append("socketio: python-socketio is not installed (pip install -e '.[bench]')")
        log("cycles: " + skipped[-1])
    configs: list[tuple[str, str, dict[str, Any]]] = [(k, k, {}) for k in servers]
    if "hub" in servers:
        configs += [("hub", label, {"extra": extra}) for label, extra in plan.hub_variants]
    modes = [0.0] + ([plan.paced_total] if plan.paced_total else [])

    def one(kind: str, label: str, n: int, total: float, rep: int, **kw: Any) -> None:
        mode = f"paced {total:.0f}/s" if total else "closed loop"
        log(f"cycles: {label} N={n} {mode} (repeat {rep + 1}/{plan.repeats})")
        try:
            r = _cycles_retrying(kind, n, plan, rate=total / n if total else 0.0, label=label,
                                 **kw)
        except Exception as exc:  # noqa: BLE001 - one failed run must not sink the suite
            log(f"cycles: {label} N={n} failed: {exc!r}")
            runs.append({"server": kind, "label": label, "n": n, "rep": rep,
                         "mode": "paced" if total else "closed", "error": repr(exc)})
            return
        r["rep"] = rep
        runs.append(r)
        log(f"  {r['cycles_per_s']:.0f} cycles/s, answer->agent p50/p99 "
            f"{r['answer_to_agent_ms']['p50']}/{r['answer_to_agent_ms']['p99']} ms, "
            f"server loop {r['server_loop_util']:.2f}, clients {r['client_cpu_util']}, "
            f"other {r['other_cpu_util']}")

    for rep in range(plan.repeats):
        for n in plan.cycles_ns:
            for total in modes:
                for kind, label, kw in configs:
                    one(kind, label, n, total, rep, **kw)
            if "socketio" in servers and n in plan.sio_client_ns and _has("aiohttp"):
                one("socketio", "socketio (AsyncClient)", n, 0.0, rep, dialect="sio-client")
    return {"runs": runs, "summary": summarize_cycles(runs), "skipped": skipped}


def summarize_cycles(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """summary[label][mode][N]: the median over repeats of cycles/s and of each percentile."""
    out: dict[str, Any] = {}
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if "error" in r:
            continue
        groups.setdefault((r["label"], r.get("mode", "closed"), r["n"]), []).append(r)
    for (label, mode, n), rs in sorted(groups.items()):
        def med(path: tuple[str, ...], rs: list[dict[str, Any]] = rs) -> float | None:
            vals = []
            for r in rs:
                v: Any = r
                for k in path:
                    v = v.get(k) if isinstance(v, dict) else None
                if isinstance(v, (int, float)):
                    vals.append(float(v))
            return _sys.median(vals)

        out.setdefault(label, {}).setdefault(mode, {})[str(n)] = {
            "repeats": len(rs),
            "offered_per_s": med(("offered_per_s",)),
            "cycles_per_s": med(("cycles_per_s",)),
            "answer_to_agent_p50_ms": med(("answer_to_agent_ms", "p50")),
            "answer_to_agent_p99_ms": med(("answer_to_agent_ms", "p99")),
            "ask_to_inbox_p50_ms": med(("ask_to_inbox_ms", "p50")),
            "ask_to_inbox_p99_ms": med(("ask_to_inbox_ms", "p99")),
            "server_cpu_us_per_cycle": med(("server_cpu_us_per_cycle",)),
            "server_loop_util": med(("server_loop_util",)),
            "other_cpu_util": med(("other_cpu_util",)),
        }
    return out


# ---------------------------------------------------------------------------- 2. idle


def idle_once(kind: str, plan: Plan) -> dict[str, Any]:
    if plan.quiet_wait:
        _sys.wait_quiet(plan.quiet_wait)
    server = Server(kind)
    humans = [f"i{i}" for i in range(plan.idle_inbox)]
    parts = _split(plan.idle_agents, plan.idle_procs)
    agent_names = [f"w{i}" for i in range(plan.idle_agents)]
    tokens = server.tokens(agents=agent_names + ["warm"], humans=humans)
    server.start()
    procs: list[LoadProc] = []
    stages: dict[str, Any] = {}

    def snap(name: str) -> dict[str, Any]:
        s = {"rss_kib": server.rss_kib(), "anon_kib": _sys.anon_kib(server.pid),
             "fds": _sys.open_fds(server.pid)}
        stages[name] = s
        return s

    try:
        # Warm up: a few sockets ask and leave, so lazy imports and first-use caches are in
        # the baseline, not in the per-connection figure.
        warm = LoadProc({"mode": "idle", "base": server.url, "dialect": server.dialect,
                         "agents": {"count": 20, "token": tokens["agent:warm"],
                                    "humans": humans[:1], "prefix": "warm"},
                         "humans": [{"token": tokens[f"human:{humans[0]}"]}]}, "warm")
        warm.expect("ready", 60)
        warm.send({"cmd": "ask"})
        warm.expect("asked", 60)
        warm.close()
        time.sleep(plan.idle_settle)
        base = snap("baseline")
        t0 = now_ns()
        hp = LoadProc({"mode": "idle", "base": server.url, "dialect": server.dialect,
                       "humans": [{"token": tokens[f"human:{h}"]} for h in humans],
                       "concurrency": 64}, "inbox")
        procs.append(hp)
        h_ready = hp.expect("ready", 120)
        time.sleep(plan.idle_settle)
        s_inbox = snap("inbox_connected")
        index0 = 0
        aps = []
        for p, count in enumerate(parts):
            ap = LoadProc({"mode": "idle", "base": server.url, "dialect": server.dialect,
                           "agents": {"count": count, "index0": index0,
                                      "tokens": _agent_tokens(tokens, agent_names, index0, count),
                                      "humans": humans, "prefix": "w"},
                           "concurrency": 64}, f"agents{p}")
            index0 += count
            aps.append(ap)
            procs.append(ap)
        a_ready = [ap.expect("ready", 300) for ap in aps]
        connect_s = (now_ns() - t0) / 1e9
        time.sleep(plan.idle_settle)
        s_agents = snap("agents_connected")
        t1 = now_ns()
        for ap in aps:
            ap.send({"cmd": "ask", "window": 256, "expires_in": 600})
        asked = [ap.expect("asked", 300) for ap in aps]
        ask_s = (now_ns() - t1) / 1e9
        time.sleep(plan.idle_settle)
        s_wait = snap("agents_waiting")
        metrics = server.metrics() if kind == "hub" else {}
        meter = _cpu_meter(server, procs)
        meter.start()
        loop0 = _thread_cpu(server.pid)
        time.sleep(plan.idle_window)
        meter.stop()
        idle_loop = _thread_cpu(server.pid) - loop0
        s_after = snap("after_idle_window")
    finally:
        _close_all(procs)
        server.stop()
    connected = h_ready["connected"] + sum(r["connected"] for r in a_ready)
    acked = sum(r["acked"] for r in asked)
    errors: dict[str, int] = {}
    for r in asked:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v

    def per(a: dict[str, Any], b: dict[str, Any], n: int, key: str = "rss_kib") -> float | None:
        if not n or a.get(key) is None or b.get(key) is None:
            return None
        return round((b[key] - a[key]) / n, 2)

    return {
        "server": kind, "agents": plan.idle_agents, "inbox": plan.idle_inbox,
        "connected": connected, "asked": acked, "errors": errors,
        "connect_s": round(connect_s, 2), "ask_s": round(ask_s, 2),
        "stages": stages,
        "kib_per_inbox_conn": per(base, s_inbox, h_ready["connected"]),
        "kib_per_idle_agent_conn": per(s_inbox, s_agents, connected - h_ready["connected"]),
        "kib_per_waiting_agent": per(s_inbox, s_wait, acked),
        "kib_per_conn_all": per(base, s_wait, connected),
        "anon_kib_per_conn_all": per(base, s_wait, connected, "anon_kib"),
        "rss_mib_waiting": round(s_wait["rss_kib"] / 1024, 1),
        "idle_window_s": round(meter.wall, 2),
        "other_cpu_util": meter.other_util,
        "idle_server_cpu_util": round(meter.util("server"), 4),
        "idle_server_loop_util": round(idle_loop / meter.wall, 4) if meter.wall else None,
        "idle_cpu_us_per_conn_per_s": round(meter.used["server"] / meter.wall / connected * 1e6, 3)
        if connected else None,
        "rss_after_window_mib": round(s_after["rss_kib"] / 1024, 1),
        "metrics": {k: v for k, v in metrics.items() if k.startswith(("a2h_connections",
                                                                     "a2h_rooms_live",
                                                                     "a2h_requests"))},
    }


def scenario_idle(plan: Plan) -> dict[str, Any]:
    runs = []
    for kind in [k for k in plan.servers if k in ("hub", "relay")]:
        log(f"idle: {kind}, {plan.idle_agents} waiting agents + {plan.idle_inbox} inbox sockets")
        try:
            r = idle_once(kind, plan)
        except Exception as exc:  # noqa: BLE001
            log(f"idle: {kind} failed: {exc!r}")
            runs.append({"server": kind, "error": repr(exc)})
            continue
        log(f"  {r['kib_per_idle_agent_conn']} KiB/conn idle, {r['kib_per_waiting_agent']} KiB per "
            f"waiting agent, idle CPU {r['idle_server_cpu_util']:.3f}")
        runs.append(r)
    return {"runs": runs}


# ---------------------------------------------------------------------------- 3. rooms


def _wait_metric(server: Server, key: str, pred: Any, timeout: float,
                 interval: float = 0.1) -> tuple[bool, float]:
    deadline = time.monotonic() + timeout
    val = float("nan")
    while time.monotonic() < deadline:
        val = server.metrics().get(key, 0.0)
        if pred(val):
            return True, val
        time.sleep(interval)
    return False, val


def scenario_rooms(plan: Plan) -> dict[str, Any]:
    log(f"rooms: {plan.rooms_total} conversations created, answered, evicted "
        f"(--room-idle {plan.room_idle})")
    server = Server("hub", extra=["--room-idle", str(plan.room_idle)])
    humans = [f"h{i}" for i in range(plan.humans)]
    agent_names = [f"r{i}" for i in range(plan.rooms_agents)]
    tokens = server.tokens(agents=agent_names + ["probe"], humans=humans)
    server.start()
    procs: list[LoadProc] = []
    out: dict[str, Any] = {"total": plan.rooms_total, "room_idle_s": plan.room_idle}
    try:
        hp = LoadProc({"mode": "cycles", "base": server.url, "dialect": "a2h",
                       "humans": [{"handle": h, "token": tokens[f"human:{h}"]} for h in humans]},
                      "humans")
        ap = LoadProc({"mode": "cycles", "base": server.url, "dialect": "a2h",
                       "agents": {"count": plan.rooms_agents,
                                  "tokens": _agent_tokens(tokens, agent_names, 0,
                                                          plan.rooms_agents),
                                  "humans": humans, "prefix": "r", "new_conv": True,
                                  "wait": 5.0}}, "agents")
        procs += [hp, ap]
        hp.expect("ready", 60)
        ap.expect("ready", 120)
        far = now_ns() + int(3600e9)

        def run(limit: int) -> float:
            t = now_ns()
            for p in (hp, ap):
                p.send({"cmd": "run", "m0": t, "m1": far, "stop": far, "limit": limit})
            ap.expect("done", 600)
            return (now_ns() - t) / 1e9

        run(5)  # warm-up: 5 conversations per agent
        ok, _ = _wait_metric(server, "a2h_rooms_live", lambda v: v == 0, 30 + plan.room_idle * 4)
        time.sleep(0.5)
        base = server.rss_kib()
        m_base = server.metrics()
        per_agent = max(1, plan.rooms_total // plan.rooms_agents)
        samples: list[tuple[float, float, float]] = []  # (s since start, rss MiB, live rooms)
        stop_sampling = threading.Event()
        t_start = now_ns()

        def sample() -> None:
            while not stop_sampling.is_set():
                try:
                    live = server.metrics().get("a2h_rooms_live", 0.0)
                    samples.append((round((now_ns() - t_start) / 1e9, 2),
                                    round(server.rss_kib() / 1024, 2), live))
                except Exception:  # noqa: BLE001 - sampling is best effort
                    pass
                stop_sampling.wait(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        elapsed = run(per_agent)
        t_last_ask = now_ns()
        peak = max((s[1] for s in samples), default=server.rss_kib() / 1024)
        ok, live = _wait_metric(server, "a2h_rooms_live", lambda v: v == 0,
                                30 + plan.room_idle * 4)
        time.sleep(1.0)
        after = server.rss_kib()
        m_after = server.metrics()
        after_deadlines = None
        if plan.rooms_after_deadlines:
            sleep_until_ns(t_last_ask + int(17e9))
            after_deadlines = server.rss_kib()
        stop_sampling.set()
        sampler.join(2)
        hp.send({"cmd": "finish"})
        res = hp.expect("result", 60)
        created = per_agent * plan.rooms_agents
        out.update({
            "conversations": created,
            "elapsed_s": round(elapsed, 2),
            "cycles_per_s": round(created / elapsed, 1),
            "answered": res["answered"],
            "rss_baseline_mib": round(base / 1024, 1),
            "rss_peak_mib": round(peak, 1),
            "rss_after_eviction_mib": round(after / 1024, 1),
            "rss_growth_after_eviction_mib": round((after - base) / 1024, 1),
            "bytes_left_per_conversation": round((after - base) * 1024 / created, 1),
            "rss_after_deadlines_mib": round(after_deadlines / 1024, 1)
            if after_deadlines is not None else None,
            "all_evicted": ok, "live_rooms_after": live,
            "evictions": m_after.get("a2h_room_evictions_total", 0)
            - m_base.get("a2h_room_evictions_total", 0),
            "samples": samples,
        })
        log(f"  {created} conversations in {elapsed:.1f} s; RSS {base / 1024:.0f} -> peak "
            f"{peak:.0f} -> {after / 1024:.0f} MiB after eviction")
        # Rebuild on touch: pending requests in rooms that are then evicted.
        pp = LoadProc({"mode": "probe", "base": server.url, "dialect": "a2h",
                       "token": tokens["agent:probe"], "human": humans[0]}, "probe")
        procs.append(pp)
        pp.expect("ready", 60)
        pp.send({"cmd": "ask", "count": plan.rebuild_probes, "prefix": "p", "expires_in": 600})
        asked = pp.expect("asked", 120)
        ok, _ = _wait_metric(server, "a2h_rooms_live", lambda v: v == 0, 30 + plan.room_idle * 4)
        r0 = server.metrics().get("a2h_room_rebuilds_total", 0)
        pp.send({"cmd": "probe"})
        probed = pp.expect("probed", 300)
        r1 = server.metrics().get("a2h_room_rebuilds_total", 0)
        first = percentiles(probed["first"], 1e-3)
        second = percentiles(probed["second"], 1e-3)
        out["rebuild"] = {
            "requests": asked["acked"], "evicted_before_probe": ok,
            "rebuilds_seen": r1 - r0,
            "wait_rtt_evicted_ms": first, "wait_rtt_live_ms": second,
            "rebuild_cost_p50_ms": round(first["p50"] - second["p50"], 3) if first["count"] else None,
            "errors": probed["errors"],
        }
        log(f"  rebuild: wait RTT evicted p50/p99 {first['p50']}/{first['p99']} ms, live "
            f"{second['p50']}/{second['p99']} ms ({r1 - r0:.0f} rebuilds)")
    finally:
        _close_all(procs)
        server.stop()
    return out


# ---------------------------------------------------------------------------- 4. recovery


def scenario_recovery(plan: Plan) -> dict[str, Any]:
    n = plan.recovery_pending
    log(f"recovery: {n} pending requests, kill -9, restart")
    server = Server("hub")
    tokens = server.tokens(agents=["burst"], humans=["h0"])
    server.start()
    procs: list[LoadProc] = []
    out: dict[str, Any] = {"pending": n, "expires_in_s": plan.recovery_expires}
    try:
        bp = LoadProc({"mode": "burst", "base": server.url, "dialect": "a2h",
                       "token": tokens["agent:burst"], "human": "h0", "total": n,
                       "conns": 10, "window": 64, "expires_in": plan.recovery_expires},
                      "burst")
        procs.append(bp)
        bp.expect("ready", 60)
        bp.send({"cmd": "run"})
        done = bp.expect("done", 300)
        pending_before = server.metrics().get('a2h_requests{state="pending"}', 0.0)
        out.update({"acked": done["acked"], "create_s": round(done["elapsed_s"], 2),
                    "create_per_s": round(done["acked"] / done["elapsed_s"], 1),
                    "pending_at_kill": pending_before, "errors": done["errors"]})
        if pending_before < n:
            log(f"  only {pending_before:.0f} of {n} still pending at kill time; "
                "raise recovery_expires")
        server.kill()
        _close_all(procs)
        procs = []
        # Every deadline must be overdue when the hub comes back.
        while time.time() < done["max_deadline"] + 0.5:
            time.sleep(0.05)
        t_spawn = now_ns()
        server.start(wait=False)
        t_health = wait_healthy(server, 60)
        series: list[tuple[float, float]] = []
        deadline = time.monotonic() + 120
        t_drained = None
        while time.monotonic() < deadline:
            try:
                m = server.metrics()
            except Exception:  # noqa: BLE001
                time.sleep(0.01)
                continue
            pend = m.get('a2h_requests{state="pending"}', 0.0)
            series.append((round((now_ns() - t_spawn) / 1e9, 3), pend))
            if pend == 0:
                t_drained = now_ns()
                break
            # /metrics counts the requests table: polled every 10 ms it took a good part
            # of the store's reader from the recovery it measures
            time.sleep(0.1)
        m = server.metrics()
        out.update({
            "serving_s": round((t_health - t_spawn) / 1e9, 3),
            "serving_line_s": round((server.serving_ns - t_spawn) / 1e9, 3)
            if server.serving_ns else None,
            "all_fired_s": round((t_drained - t_spawn) / 1e9, 3) if t_drained else None,
            "fired_after_serving_s": round((t_drained - t_health) / 1e9, 3) if t_drained else None,
            "expired_after": m.get('a2h_requests{state="expired"}', 0.0),
            "alarms_fired": m.get("a2h_alarms_fired_total", 0.0),
            "rebuilds": m.get("a2h_room_rebuilds_total", 0.0),
            "series": series,
        })
        log(f"  serving after {out['serving_s']} s, every overdue deadline fired after "
            f"{out['all_fired_s']} s ({out['expired_after']:.0f} expired)")
    finally:
        _close_all(procs)
        server.stop()
    return out


# ---------------------------------------------------------------------------- 5. overload


def _overload_phase(plan: Plan, server: Server, procs: list[LoadProc], hp: LoadProc,
                    ap: LoadProc, fp: LoadProc, phase: str) -> dict[str, Any]:
    """One calm or flooded window: the others' raw latencies and the CPU it took."""
    t = now_ns() + int(0.2e9)
    m0 = t + int(plan.warmup * 1e9)
    m1 = m0 + int(plan.overload_duration * 1e9)
    for p in (hp, ap):
        p.send({"cmd": "run", "m0": m0, "m1": m1, "stop": m1})
    if phase == "flooded":
        fp.send({"cmd": "run", "stop": m1, "burst": plan.flood_burst,
                 "interval_ms": plan.flood_interval_ms})
    meter = _cpu_meter(server, procs)
    sleep_until_ns(m0)
    meter.start()
    loop0 = _thread_cpu(server.pid)
    sleep_until_ns(m1)
    meter.stop()
    loop_util = (_thread_cpu(server.pid) - loop0) / meter.wall
    time.sleep(0.5)
    hp.send({"cmd": "finish"})
    ap.send({"cmd": "finish"})
    h = hp.expect("result", 60)
    a = ap.expect("result", 60)
    return {"lat_a": h["lat_a"], "lat_b": a["lat_b"], "rtt": a["rtt"], "cycles": a["cycles"],
            "wall": meter.wall, "errors": a["errors"], "server": meter.util("server"),
            "loop": loop_util, "other": meter.other_util}


def scenario_overload(plan: Plan) -> dict[str, Any]:
    log(f"overload: {plan.overload_agents} agents at {plan.overload_rate}/s each; one room "
        f"flooded with {plan.flood_burst} asks every {plan.flood_interval_ms:.0f} ms "
        f"(--room-mailbox {plan.overload_mailbox})")
    server = Server("hub", extra=["--room-mailbox", str(plan.overload_mailbox)])
    humans = [f"h{i}" for i in range(plan.humans)]
    agent_names = [f"o{i}" for i in range(plan.overload_agents)]
    tokens = server.tokens(agents=agent_names + ["flood"], humans=humans + ["hot"])
    server.start()
    procs: list[LoadProc] = []
    phases: dict[str, Any] = {}
    try:
        hp = LoadProc({"mode": "cycles", "base": server.url, "dialect": "a2h",
                       "humans": [{"handle": h, "token": tokens[f"human:{h}"]} for h in humans]},
                      "humans")
        ap = LoadProc({"mode": "cycles", "base": server.url, "dialect": "a2h",
                       "agents": {"count": plan.overload_agents,
                                  "tokens": _agent_tokens(tokens, agent_names, 0,
                                                          plan.overload_agents),
                                  "humans": humans, "prefix": "o",
                                  "rate": plan.overload_rate}}, "agents")
        fp = LoadProc({"mode": "flood", "base": server.url, "dialect": "a2h",
                       "token": tokens["agent:flood"], "human": "hot",
                       "conversation": "hot-room"}, "flooder")
        procs += [hp, ap, fp]
        for p in procs:
            p.expect("ready", 60)
        # Calm and flooded alternate (rounds): on a small shared machine one phase can
        # be unlucky; every sample of every round is pooled, and each round's own ratio is
        # kept beside the pooled one.
        pooled: dict[str, dict[str, Any]] = {}
        rounds: list[dict[str, Any]] = []
        for _ in range(plan.overload_rounds):
            one: dict[str, Any] = {}
            for phase in ("calm", "flooded"):
                one[phase] = _overload_phase(plan, server, procs, hp, ap, fp, phase)
                acc = pooled.setdefault(phase, {"lat_a": [], "lat_b": [], "rtt": [],
                                                "cycles": 0, "wall": 0.0, "errors": {},
                                                "server": [], "loop": [], "other": []})
                for key in ("lat_a", "lat_b", "rtt"):
                    acc[key].extend(one[phase][key])
                acc["cycles"] += one[phase]["cycles"]
                acc["wall"] += one[phase]["wall"]
                for code, n in one[phase]["errors"].items():
                    acc["errors"][code] = acc["errors"].get(code, 0) + n
                acc["server"].append(one[phase]["server"])
                acc["loop"].append(one[phase]["loop"])
                acc["other"].append(one[phase]["other"])
            calm_b = percentiles(one["calm"]["lat_b"], 1e-3)["p99"]
            hot_b = percentiles(one["flooded"]["lat_b"], 1e-3)["p99"]
            rounds.append({"calm_p99_ms": calm_b, "flooded_p99_ms": hot_b,
                           "ratio": round(hot_b / calm_b, 2) if calm_b and hot_b else None})
        for phase, acc in pooled.items():
            phases[phase] = {
                "cycles_per_s": round(acc["cycles"] / acc["wall"], 1),
                "ask_to_inbox_ms": percentiles(acc["lat_a"], 1e-3),
                "answer_to_agent_ms": percentiles(acc["lat_b"], 1e-3),
                "ask_to_answer_ms": percentiles(acc["rtt"], 1e-3),
                "errors": acc["errors"],
                "server_cpu_util": round(sum(acc["server"]) / len(acc["server"]), 3),
                "server_loop_util": round(sum(acc["loop"]) / len(acc["loop"]), 3),
                "other_cpu_util": max((o for o in acc["other"] if o is not None), default=None),
            }
        fp.send({"cmd": "finish"})
        flood = fp.expect("result", 60)
        metrics = server.metrics()
    finally:
        _close_all(procs)
        server.stop()
    calm, hot = phases["calm"], phases["flooded"]

    def ratio(key: str, q: str = "p99") -> float | None:
        a, b = calm[key][q], hot[key][q]
        return round(b / a, 2) if a and b else None

    out = {
        "phases": phases, "flood": flood,
        "flood_offered_per_s": round(plan.flood_burst * 1000 / plan.flood_interval_ms, 1),
        "overloaded_total": metrics.get("a2h_overloaded_total", 0.0),
        "others_p99_ratio_answer_to_agent": ratio("answer_to_agent_ms"),
        "others_p99_ratio_ask_to_answer": ratio("ask_to_answer_ms"),
        "others_p50_ratio_ask_to_answer": ratio("ask_to_answer_ms", "p50"),
        "others_errors_flooded": hot["errors"],
        "rounds": rounds,
    }
    log(f"  others p99 answer->agent {calm['answer_to_agent_ms']['p99']} -> "
        f"{hot['answer_to_agent_ms']['p99']} ms (x{out['others_p99_ratio_answer_to_agent']}); "
        f"hot room: {flood['codes']}; rounds (p99 ratio): {[r['ratio'] for r in rounds]}")
    return out


def scenario_cluster(plan: Plan) -> dict[str, Any]:
    from bench.cluster import scenario_cluster  # bench.cluster imports this module

    return scenario_cluster(plan)


# ---------------------------------------------------------------------------- 6. journal


def scenario_journal(plan: Plan) -> dict[str, Any]:
    """``bench/bench_journal.py`` in its own process (it runs its clients on its own loop):
    ``journal_runs`` runs at once, each calling a function ``journal_calls`` times; every
    call is ``run.call`` (``running`` committed before the function may start) then
    ``run.result`` (``done`` committed), against ``a2h serve --sync full``."""
    import tempfile

    if plan.quiet_wait:
        _sys.wait_quiet(plan.quiet_wait)
    log(f"journal: {plan.journal_runs} runs x {plan.journal_calls} calls, think "
        f"{plan.journal_think_ms:g} ms, --sync full")
    with tempfile.TemporaryDirectory(prefix="a2h-journal-") as tmp:
        out = os.path.join(tmp, "journal.json")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        busy0 = _sys.machine_busy()
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "bench.bench_journal",
                        "--runs", str(plan.journal_runs), "--calls", str(plan.journal_calls),
                        "--think-ms", str(plan.journal_think_ms), "--sync", "full",
                        "--out", out], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        wall = time.monotonic() - t0
        busy = (_sys.machine_busy() - busy0) / wall if wall else 0.0
        with open(out, "rb") as f:
            res: dict[str, Any] = orjson.loads(f.read())
    res.pop("machine", None)
    res["machine_busy_cores"] = round(busy, 2)
    j = res["journal_call_ms"]
    log(f"  running + done p50/p99 {j['p50']}/{j['p99']} ms; two pings "
        f"{res['baseline_two_pings_ms']['p50']} ms; floor {res.get('floor_p50_ms')} ms; "
        f"{res['calls_per_s']} calls/s")
    return res


SCENARIOS = {
    "cycles": scenario_cycles,
    "idle": scenario_idle,
    "rooms": scenario_rooms,
    "recovery": scenario_recovery,
    "overload": scenario_overload,
    "cluster": scenario_cluster,
    "journal": scenario_journal,
}
#: Run only when named (``--scenario cluster``): it needs PostgreSQL and nats-server.
OPT_IN = ("cluster",)


def run_plan(plan: Plan) -> dict[str, Any]:
    _sys.raise_nofile()
    results: dict[str, Any] = {}
    for name in plan.scenarios:
        t0 = time.monotonic()
        try:
            results[name] = SCENARIOS[name](plan)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next scenario
            log(f"{name} failed: {exc!r}")
            results[name] = {"error": repr(exc)}
        results[name]["seconds"] = round(time.monotonic() - t0, 1)
    return results

