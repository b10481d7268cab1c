"""``python -m bench flood``: the issue-15 flood measurement, against a real ``a2h serve``.

Two floods, one hub, run with the limits a user gets by default (``Settings()``: message
rate, connections per address, header timeout) except the two this run needs small: the
per-tenant pending bytes cap and the retention of resolved requests.

1. **Asks.** One agent floods one person with large asks (context near the 48 KiB limit),
   over ``conns`` sockets with ``window`` asks in flight on each, every ask with a short
   ``expires_in`` and its own conversation (a room each). Then the asks expire, the
   resolved rows are purged after ``--retention``, and the rooms go idle. A sampler
   thread reads, every ``sample`` seconds: the hub's VmRSS (``/proc/PID/status``), the
   database file and its ``-wal``, the hub's open descriptors, and the pending count and
   bytes straight from the database (the caps must hold: pending never exceeds them).
   Reported: before / peak / after for each, asks accepted and refused by code, and the
   share of the peak's memory and disk the hub gave back.
2. **Partial headers.** ``conn_flood`` sockets from 127.0.0.1 each send half a request
   line and nothing more. Reported: how many the hub answered ``503`` at once
   (``--max-conns-per-ip``), how many it held, how many it still holds after its header
   timeout (``--header-timeout``), and whether ``/healthz`` from another address
   (127.0.0.2) still answered during the flood.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import _sys
from bench._servers import Server, wait_healthy
from bench.scenarios import LoadProc, log


@dataclass
class FloodConfig:
    asks: int = 6000
    conns: int = 16
    window: int = 32
    context_bytes: int = 48 * 1024 - 64   # JSON-encoded [context, default] stays under 48 KiB
    expires_in: float = 8.0
    pending_bytes_cap: int = 64 * 1024 * 1024
    retention: float = 10.0
    #: After the purge, also wait for the hub to drop the flood's idle rooms
    #: (``--room-idle``, default 30 s) before the "after" figures.
    wait_rooms: bool = True
    conn_flood: int = 5000
    sample: float = 0.25


def _file_kib(path: Path) -> int:
    try:
        return path.stat().st_size // 1024
    except OSError:
        return 0


class Sampler:
    """Samples the hub and its database every ``interval`` seconds in a thread."""

    def __init__(self, server: Server, interval: float) -> None:
        self.server = server
        self.interval = interval
        self.series: list[dict[str, Any]] = []
        self.t0 = _sys.now_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()  # one connection, read from two threads
        self._db = sqlite3.connect(f"file:{server.db}?mode=ro", uri=True, timeout=10,
                                   check_same_thread=False)

    def one(self) -> dict[str, Any]:
        pid, db = self.server.pid, self.server.db
        # Autocommit reads: never hold a read transaction that would block a checkpoint.
        with self._lock:
            count, size = self._db.execute(
                "SELECT count(*), coalesce(sum(length(payload)), 0) FROM requests "
                "WHERE status='pending'").fetchone()
            rows = self._db.execute("SELECT count(*) FROM requests").fetchone()[0]
        return {"t": round((_sys.now_ns() - self.t0) / 1e9, 2), "rss_kib": _sys.rss_kib(pid),
                "anon_kib": _sys.anon_kib(pid), "fds": _sys.open_fds(pid),
                "db_kib": _file_kib(db), "wal_kib": _file_kib(Path(f"{db}-wal")),
                "pending": count, "pending_bytes": size, "rows": rows}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.series.append(self.one())
            except (OSError, sqlite3.Error, RuntimeError):
                pass

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def close(self) -> None:
        self._db.close()

    def peak(self, key: str, since: float = 0.0) -> int:
        return max((s[key] for s in self.series if s["t"] >= since and s[key] is not None),
                   default=0)

    def wait_for(self, pred: Any, timeout: float) -> float | None:
        """Poll until ``pred(sample)``; return seconds waited, None on timeout."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if pred(self.one()):
                return round(time.monotonic() - t0, 2)
            time.sleep(0.2)
        return None


def _point(s: dict[str, Any]) -> dict[str, Any]:
    return {"rss_mib": round(s["rss_kib"] / 1024, 1),
            "anon_mib": round(s["anon_kib"] / 1024, 1) if s["anon_kib"] is not None else None,
            "db_mib": round(s["db_kib"] / 1024, 1), "wal_mib": round(s["wal_kib"] / 1024, 1),
            "db_plus_wal_mib": round((s["db_kib"] + s["wal_kib"]) / 1024, 1),
            "fds": s["fds"], "pending": s["pending"], "rows": s["rows"]}


def _returned(before: float, peak: float, after: float) -> float | None:
    """The share of the growth the hub gave back (1.0: all of it, 0: none)."""
    grown = peak - before
    return round((peak - after) / grown, 3) if grown > 0 else None


def _freelist_mib(db: Path) -> float | None:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            return round(free * page / 2**20, 1)
        finally:
            conn.close()
    except sqlite3.Error:
        return None


# ---------------------------------------------------------------------------- asks


def ask_flood(server: Server, tokens: dict[str, str], cfg: FloodConfig,
              sampler: Sampler) -> dict[str, Any]:
    before = sampler.one()
    context = {"blob": "x" * cfg.context_bytes}
    log(f"flood: {cfg.asks} asks of ~{cfg.context_bytes // 1024} KiB context over "
        f"{cfg.conns} sockets x {cfg.window} in flight, expires_in {cfg.expires_in} s")
    bp = LoadProc({"mode": "burst", "base": server.url, "dialect": "a2h",
                   "token": tokens["agent:flood"], "human": "target", "total": cfg.asks,
                   "conns": cfg.conns, "window": cfg.window, "expires_in": cfg.expires_in,
                   "prefix": "f", "context": context}, "flooder")
    try:
        ready = bp.expect("ready", 60)
        t_start = sampler.one()["t"]
        bp.send({"cmd": "run"})
        done = bp.expect("done", 300)
    finally:
        bp.close()
    t_sent = sampler.one()["t"]
    log(f"  {done['acked']} accepted, refused {done['errors']} in {done['elapsed_s']:.1f} s")
    expired_s = sampler.wait_for(lambda s: s["pending"] == 0, cfg.expires_in + 60)
    purged_s = sampler.wait_for(lambda s: s["rows"] == 0, cfg.retention + 60)
    log(f"  all expired {expired_s} s after the flood, purged {purged_s} s after that")
    at_purge = sampler.one()
    rooms_s = None
    if cfg.wait_rooms:
        idle = server.command()
        room_idle = float(idle[idle.index("--room-idle") + 1]) if "--room-idle" in idle \
            else 30.0
        # The last room was touched when its request expired; give the hub its idle time
        # plus a few of its sweeps to drop them all.
        t_wait = room_idle + 5.0
        log(f"  waiting {t_wait:.0f} s for the idle rooms to be dropped (--room-idle)")
        time.sleep(t_wait)
        rooms_s = t_wait
    after = sampler.one()
    time.sleep(cfg.sample * 2)
    peak = {k: sampler.peak(k, t_start) for k in
            ("rss_kib", "anon_kib", "db_kib", "wal_kib", "fds", "pending", "pending_bytes")}
    peak_disk = max((s["db_kib"] + s["wal_kib"] for s in sampler.series if s["t"] >= t_start),
                    default=0)
    refused = done["errors"].get("too_many_pending", 0)
    # The cap is on what the hub weighs (hub.service.payload_bytes); the stored payload
    # holds a little more (the question's envelope), so judge the cap by the hub's measure
    # of these identical asks, and report the stored bytes beside it.
    from bench.loadgen import QUESTION
    from hub.service import payload_bytes

    weight = payload_bytes(QUESTION, None, context, None, None, None)
    return {
        "connected": ready.get("connected"),
        "asked": cfg.asks, "accepted": done["acked"], "refused_too_many_pending": refused,
        "errors": done["errors"], "flood_s": round(done["elapsed_s"], 2),
        "asks_per_s": round(cfg.asks / done["elapsed_s"], 1) if done["elapsed_s"] else None,
        "flood_window_s": [t_start, t_sent],
        "expired_after_s": expired_s, "purged_after_s": purged_s, "rooms_wait_s": rooms_s,
        "before": _point(before), "at_purge": _point(at_purge), "after": _point(after),
        "peak": {"rss_mib": round(peak["rss_kib"] / 1024, 1),
                 "anon_mib": round(peak["anon_kib"] / 1024, 1),
                 "db_mib": round(peak["db_kib"] / 1024, 1),
                 "wal_mib": round(peak["wal_kib"] / 1024, 1),
                 "db_plus_wal_mib": round(peak_disk / 1024, 1), "fds": peak["fds"],
                 "pending": peak["pending"],
                 "pending_weight_mib": round(peak["pending"] * weight / 2**20, 2),
                 "pending_stored_mib": round(peak["pending_bytes"] / 2**20, 2)},
        "ask_weight_bytes": weight,
        "pending_bytes_cap_mib": round(cfg.pending_bytes_cap / 2**20, 2),
        "cap_held": peak["pending"] * weight <= cfg.pending_bytes_cap,
        "cap_room_asks": cfg.pending_bytes_cap // weight,
        "rss_growth_mib": round((peak["rss_kib"] - before["rss_kib"]) / 1024, 1),
        "rss_returned": _returned(before["rss_kib"], peak["rss_kib"], after["rss_kib"]),
        "rss_returned_at_purge": _returned(before["rss_kib"], peak["rss_kib"],
                                           at_purge["rss_kib"]),
        "disk_returned": _returned(before["db_kib"] + before["wal_kib"], peak_disk,
                                   after["db_kib"] + after["wal_kib"]),
        "db_freelist_mib_after": _freelist_mib(server.db),
    }


# ---------------------------------------------------------------------------- partial headers


class _Slow(asyncio.Protocol):
    """One slowloris socket: records a 503 and when the hub closed it."""

    def __init__(self) -> None:
        self.t: asyncio.Transport | None = None
        self.data = b""
        self.closed_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data += data[:64]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_ns = _sys.now_ns()


def _healthz_from(host: str, port: int, src: str, timeout: float = 5.0) -> float | None:
    """GET /healthz from source address ``src``; ms, or None if it failed."""
    t0 = _sys.now_ns()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout, (src, 0)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
        return round((_sys.now_ns() - t0) / 1e6, 2) if head.startswith(b"HTTP/1.1 200") \
            else None
    except OSError:
        return None


async def _conn_flood(port: int, n: int, header_timeout: float, server: Server
                      ) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(256)
    socks: list[_Slow] = []
    failed = 0
    fds0 = _sys.open_fds(server.pid)

    async def one() -> None:
        nonlocal failed
        async with sem:
            try:
                _, p = await asyncio.wait_for(
                    loop.create_connection(_Slow, "127.0.0.1", port), 10)
            except (OSError, TimeoutError):
                failed += 1
                return
            assert p.t is not None
            p.t.write(b"GET /heal")  # half a request line, and then nothing
            socks.append(p)

    t0 = _sys.now_ns()
    await asyncio.gather(*(one() for _ in range(n)))
    opened_s = (_sys.now_ns() - t0) / 1e9
    await asyncio.sleep(1.0)
    refused = sum(1 for p in socks if p.data.startswith(b"HTTP/1.1 503"))
    held_fds = _sys.open_fds(server.pid) - fds0
    open_now = sum(1 for p in socks if not p.closed_ns)
    healthz_other = await asyncio.to_thread(_healthz_from, "127.0.0.1", port, "127.0.0.2")
    healthz_same = await asyncio.to_thread(_healthz_from, "127.0.0.1", port, "127.0.0.1", 3.0)
    log(f"  {len(socks)} sockets open ({failed} failed to connect) in {opened_s:.1f} s: "
        f"{refused} answered 503, {open_now} held, hub fds +{held_fds}; /healthz from "
        f"127.0.0.2 {healthz_other} ms, from 127.0.0.1 {healthz_same}")
    # Every held socket was opened at most opened_s ago: the header timeout has passed for
    # all of them once header_timeout (plus a margin) has passed since the last one.
    await asyncio.sleep(max(0.0, header_timeout + 2.0 - 1.0))
    still = sum(1 for p in socks if not p.closed_ns)
    held_fds_after = _sys.open_fds(server.pid) - fds0
    lifetimes = [(p.closed_ns - t0) / 1e9 for p in socks
                 if p.closed_ns and not p.data.startswith(b"HTTP/1.1 503")]
    healthz_after = await asyncio.to_thread(_healthz_from, "127.0.0.1", port, "127.0.0.1")
    for p in socks:
        if p.t is not None:
            p.t.abort()
    return {
        "sockets": n, "connected": len(socks), "connect_failed": failed,
        "open_s": round(opened_s, 2),
        "refused_503": refused, "held": open_now, "hub_fds_held": held_fds,
        "healthz_other_address_ms": healthz_other, "healthz_same_address_ms": healthz_same,
        "header_timeout_s": header_timeout,
        "still_open_after_timeout": still, "hub_fds_held_after_timeout": held_fds_after,
        "closed_by_hub_after_s": _sys.percentiles(lifetimes),
        "healthz_after_ms": healthz_after,
    }


# ---------------------------------------------------------------------------- the run


def run_flood(cfg: FloodConfig) -> dict[str, Any]:
    from hub.config import Settings

    _sys.raise_nofile()
    d = Settings()
    # After bench/_servers.py's HUB_FLAGS (which lift the limits for load runs): the
    # user's defaults again, and the two small settings of this run.
    extra = ["--rate", str(d.rate), "--burst", str(d.burst),
             "--max-conns-per-ip", str(d.max_conns_per_ip),
             "--header-timeout", str(d.header_timeout),
             "--max-pending-bytes-per-tenant", str(cfg.pending_bytes_cap),
             "--retention", str(cfg.retention)]
    server = Server("hub", extra=extra, workdir=Path(tempfile.mkdtemp(prefix="a2h-flood-")))
    tokens = server.tokens(agents=["flood"], humans=["target"])
    log(f"flood: hub with {' '.join(extra)}; database {server.db}")
    server.start()
    out: dict[str, Any] = {"config": asdict(cfg), "hub_flags": server.command()[3:],
                           "defaults": {"max_conns_per_ip": d.max_conns_per_ip,
                                        "header_timeout": d.header_timeout,
                                        "rate": d.rate, "burst": d.burst,
                                        "max_context_bytes": d.max_context_bytes}}
    sampler = Sampler(server, cfg.sample)
    try:
        wait_healthy(server)
        time.sleep(1.0)
        sampler.start()
        out["asks"] = ask_flood(server, tokens, cfg, sampler)
        a = out["asks"]
        log(f"  RSS {a['before']['rss_mib']} -> {a['peak']['rss_mib']} -> "
            f"{a['after']['rss_mib']} MiB; db+wal {a['before']['db_plus_wal_mib']} -> "
            f"{a['peak']['db_plus_wal_mib']} -> {a['after']['db_plus_wal_mib']} MiB; pending "
            f"peak {a['peak']['pending']} ({a['peak']['pending_weight_mib']} MiB, cap "
            f"{a['pending_bytes_cap_mib']})")
        if cfg.conn_flood:
            log(f"flood: {cfg.conn_flood} sockets with half a request line each")
            out["connections"] = asyncio.run(
                _conn_flood(server.port, cfg.conn_flood, d.header_timeout, server))
        out["hub_alive"] = server.proc is not None and server.proc.poll() is None
    finally:
        sampler.stop()
        sampler.close()
        out["series"] = sampler.series
        server.stop()
    return out


def summary(doc: dict[str, Any]) -> str:
    a = doc["asks"]
    lines = [
        f"flood: {a['asked']} asks ({doc['config']['context_bytes'] // 1024} KiB context, "
        f"expires_in {doc['config']['expires_in']} s) in {a['flood_s']} s: {a['accepted']} "
        f"accepted, {a['refused_too_many_pending']} refused too_many_pending, other "
        f"{ {k: v for k, v in a['errors'].items() if k != 'too_many_pending'} }",
        f"  pending peak {a['peak']['pending']} asks = {a['peak']['pending_weight_mib']} MiB by "
        f"the hub's measure ({a['peak']['pending_stored_mib']} MiB stored; cap "
        f"{a['pending_bytes_cap_mib']} MiB = {a['cap_room_asks']} such asks): "
        f"{'held' if a['cap_held'] else 'EXCEEDED'}",
        f"  RSS MiB before / peak / at purge / after: {a['before']['rss_mib']} / "
        f"{a['peak']['rss_mib']} / {a['at_purge']['rss_mib']} / {a['after']['rss_mib']} "
        f"(returned {a['rss_returned']})",
        f"  db+wal MiB before / peak / after: {a['before']['db_plus_wal_mib']} / "
        f"{a['peak']['db_plus_wal_mib']} / {a['after']['db_plus_wal_mib']} (returned "
        f"{a['disk_returned']}; free pages after {a['db_freelist_mib_after']} MiB)",
    ]
    c = doc.get("connections")
    if c:
        lines.append(
            f"  partial headers: {c['connected']} sockets, {c['refused_503']} refused 503 "
            f"(--max-conns-per-ip {doc['defaults']['max_conns_per_ip']}), {c['held']} held; "
            f"after the {c['header_timeout_s']} s header timeout {c['still_open_after_timeout']}"
            f" still open; /healthz from another address during: "
            f"{c['healthz_other_address_ms']} ms")
    return "\n".join(lines)
