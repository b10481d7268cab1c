"""Process measurements from ``/proc`` (Linux), statistics, and small helpers.

No third-party imports: the quick suite must run in the plain test environment.

Clocks: every process stamps events with ``time.monotonic_ns()``. On Linux that is
``CLOCK_MONOTONIC``, one clock for the whole machine, so a timestamp taken in one process
can be subtracted from one taken in another (``perf_counter_ns`` is the same clock on
Linux, but only ``monotonic`` is documented as system-wide there).
"""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def stop_process(proc: subprocess.Popen[Any] | None, grace: float) -> None:
    """SIGTERM, up to ``grace`` seconds to exit, then SIGKILL (a process we started)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def watch_output(proc: subprocess.Popen[str], output: list[str], pattern: re.Pattern[str],
                 on_match: Callable[[re.Match[str]], None], keep: int = 2000) -> None:
    """Read a server's output in a daemon thread: keep its first ``keep`` lines in
    ``output`` and call ``on_match`` for each line ``pattern`` finds something in."""

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if len(output) < keep:
                output.append(line)
            m = pattern.search(line)
            if m:
                on_match(m)

    threading.Thread(target=pump, daemon=True).start()


def now_ns() -> int:
    return time.monotonic_ns()


def sleep_until_ns(t_ns: int) -> None:
    delay = (t_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLK_TCK


def rss_kib(pid: int) -> int:
    """Resident set size (VmRSS) in KiB."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def anon_kib(pid: int) -> int | None:
    """Anonymous resident memory (heap, stacks) in KiB, from smaps_rollup; None if absent."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Anonymous:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy in processes (all cores, /proc/stat).

    Interrupt and softirq time are left out: loopback traffic is delivered in softirq
    context, which /proc/stat does not charge to the processes that caused it, so counting
    it would make the benchmark's own packets look like another job's load."""
    with open("/proc/stat", "rb") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + steal) / CLK_TCK


class CpuMeter:
    """CPU used by a set of processes between ``start()`` and ``stop()``, and by everything
    else on the machine (``other``: another job on a shared machine skews a run)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._t0 = 0
        self._c0: dict[str, float] = {}
        self._m0 = 0.0
        self.wall = 0.0
        self.used: dict[str, float] = {}
        self.other = 0.0

    def start(self) -> None:
        self._t0 = now_ns()
        self._m0 = machine_busy()
        self._c0 = {k: _safe_cpu(p) for k, p in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.wall = (now_ns() - self._t0) / 1e9
        self.used = {k: _safe_cpu(p) - self._c0[k] for k, p in self.pids.items()}
        self.other = max(0.0, machine_busy() - self._m0 - sum(self.used.values()))
        return self.used

    def util(self, key: str) -> float:
        return self.used.get(key, 0.0) / self.wall if self.wall else 0.0

    @property
    def other_util(self) -> float:
        """Cores used by processes outside the benchmark during the window."""
        return round(self.other / self.wall, 3) if self.wall else 0.0


def wait_quiet(max_wait: float, threshold: float = 0.25, sample: float = 1.0) -> float:
    """Wait (up to ``max_wait`` s) until the machine is nearly idle; return the load seen."""
    deadline = time.monotonic() + max_wait
    while True:
        b0 = machine_busy()
        time.sleep(sample)
        load = (machine_busy() - b0) / sample
        if load <= threshold or time.monotonic() >= deadline:
            return round(load, 3)


def _safe_cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------- statistics


def percentiles(values: list[int] | list[float], scale: float = 1.0) -> dict[str, Any]:
    """Nearest-rank p50/p90/p99/p99.9/max (and count) of ``values`` times ``scale``."""
    n = len(values)
    if n == 0:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "p999": None, "max": None}
    s = sorted(values)

    def rank(q: float) -> float:
        i = max(0, min(n - 1, int(-(-q * n // 1)) - 1))  # ceil(q*n) - 1
        return round(s[i] * scale, 3)

    return {"count": n, "p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99),
            "p999": rank(0.999), "max": round(s[-1] * scale, 3)}


def median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def cdf_points(values: list[int] | list[float], scale: float = 1.0,
               points: int = 200) -> list[tuple[float, float]]:
    """A down-sampled CDF for plots: (value, fraction) pairs, always keeping the tail."""
    n = len(values)
    if n == 0:
        return []
    s = sorted(values)
    idx = sorted(set([int(i * (n - 1) / (points - 1)) for i in range(points)]
                     + [max(0, n - k) for k in (1, 2, 5, 10, 20, 50, 100)]))
    return [(round(s[i] * scale, 3), round((i + 1) / n, 6)) for i in idx if 0 <= i < n]


# ---------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
                    break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(), "cpu_model": model, "mem_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(), "python": platform.python_version(),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def versions() -> dict[str, str]:
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in ("a2h-hub", "starlette", "uvicorn", "uvloop", "websockets", "orjson", "aiosqlite",
                 "httptools", "python-socketio", "python-engineio", "aiohttp", "matplotlib",
                 "pytest-benchmark"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    # The hub's build, as the servers this process starts decide it (same tree, same
    # environment): its hot modules compiled or interpreted (hub/_native.py).
    import hub

    out["hub_build"] = hub.BUILD.describe()
    return out
