"""The cluster scenario (issue 11): 1, 2 and 3 hub nodes on PostgreSQL + NATS, beside the
single SQLite node, in one run.

    .venv/bin/python -m bench run --scenario cluster
    .venv/bin/python -m bench.cluster bench/results/STAMP.json     # its table, as Markdown

Every configuration runs the same load (``bench.loadgen`` ``cycles`` mode, the same client
as the ``cycles`` scenario): ``agents`` agents in all, spread evenly over the nodes, each
node with ``humans_per_node`` auto-answering people. Where there are several nodes, the
agents of node *i* ask the people of node *i+1*, so every ask and every answer crosses
nodes: node A commits the request and publishes a wake-up on NATS, node B reads the store
and pushes the inbox item; the answer goes the same way back. Each node gets two load
processes (its people, its agents), so one node looks exactly like the ``cycles`` scenario's
hub run.

Runs: closed loop (each agent asks again as soon as it is answered: the most the whole set
of processes does on this machine), then paced (every agent paced so that all of them offer
``paced_total`` asks/s: the latency of a load below capacity).

Measured per run, in the window (after a warm-up):

- cycles/s, answer -> agent and ask -> inbox percentiles (stamped across processes with the
  machine-wide monotonic clock, as in ``cycles``);
- CPU from ``/proc`` (:class:`bench._sys.CpuMeter`) of each hub node, each load process,
  our nats-server, and the PostgreSQL backends that serve *our* connections: each node's
  store URL carries ``application_name=a2hb_<schema>_n<i>`` (asyncpg passes unknown URL
  parameters as server settings), ``pg_stat_activity`` gives those backends' pids at the
  window's start and end, and their ``/proc/<pid>/stat`` is read like any other process
  (a backend that appears during the window is charged all its CPU; one that exits during
  it loses its last slice). PostgreSQL's shared background processes (walwriter,
  checkpointer, background writer, autovacuum) are reported apart: they serve every
  database on the server, other engineers' included;
- WAL bytes: ``pg_current_wal_lsn()`` before and after the window. WAL is cluster-wide, so
  the run also records ``sum(xact_commit)`` over ``pg_stat_database`` next to our nodes'
  own group commits (``/metrics``) and the other active client backends it saw: when the
  two commit counts agree, the WAL was ours.

Each PostgreSQL configuration gets a fresh schema ``b_<hex>`` (created, migrated by the
store, dropped at the end of the run, whatever happens) and its own ``nats-server`` on a
port it chose; the machine's NATS is never used. Only processes this module started are
stopped, by their own handles.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import _sys
from bench._servers import Server
from bench._sys import now_ns, percentiles, sleep_until_ns
from bench.natsd import NATS_BIN, NatsServer
from bench.scenarios import LoadProc, Plan, _close_all, _split, _thread_cpu, log

PG_URL = os.environ.get("A2H_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
APP_PREFIX = "a2hb_"
#: PostgreSQL processes shared by every database of the server.
PG_BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum launcher",
                 "autovacuum worker")
#: The targets of issue 11.
RATIO_TARGET = 0.6
P99_TARGET_MS = 20.0


@dataclass
class ClusterPlan:
    """Sizes of the cluster scenario; :meth:`for_plan` derives them from the suite's plan
    (its warm-up and window; ``--quick`` makes everything small)."""

    agents: int = 200
    humans_per_node: int = 2
    node_counts: list[int] = field(default_factory=lambda: [1, 2, 3])
    #: Offered asks/s across all nodes of the target's paced runs.
    paced_total: float = 1000.0
    #: Configurations run paced: (backend, nodes, offered asks/s across the nodes); the
    #: last one is a load two nodes carry on this machine (the cross-node latency itself).
    paced: list[tuple[str, int, float]] = field(
        default_factory=lambda: [("sqlite", 1, 1000.0), ("postgres", 1, 1000.0),
                                 ("postgres", 2, 1000.0), ("postgres", 2, 300.0)])
    warmup: float = 3.0
    duration: float = 10.0
    #: Wait up to this long for the shared machine to calm down before each run (short:
    #: the whole scenario must stay within ~5 minutes).
    quiet_wait: float = 5.0
    #: Seconds of CPU measured with every socket connected and nobody asking (0: skip).
    idle_window: float = 2.0

    @classmethod
    def for_plan(cls, plan: Plan) -> ClusterPlan:
        if plan.quick:
            return cls(agents=40, node_counts=[1, 2], paced_total=200.0,
                       paced=[("postgres", 2, 200.0)], warmup=0.5, duration=2.0, quiet_wait=0.0,
                       idle_window=0.5)
        return cls(warmup=plan.warmup, duration=plan.duration,
                   quiet_wait=min(plan.quiet_wait, 5.0))


# ---------------------------------------------------------------------------- PostgreSQL


def psql(sql: str) -> str:
    out = subprocess.run(["psql", PG_URL, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def pg_tokens(url: str, *, agents: list[str], humans: list[str],
              tenant: str = "default") -> dict[str, str]:
    """Tokens created through the store (which also migrates the fresh schema)."""
    from hub.store import Role
    from hub.store.postgres import PostgresStore

    async def make() -> dict[str, str]:
        store = PostgresStore(url)
        await store.open()
        try:
            out = {}
            for a in agents:
                out[f"agent:{a}"] = await store.create_token(tenant, Role.AGENT, a)
            for h in humans:
                out[f"human:{h}"] = await store.create_token(tenant, Role.HUMAN, h)
            return out
        finally:
            await store.close()

    return asyncio.run(make())


class PgMeter:
    """CPU of the PostgreSQL backends serving our connections, WAL written, table work."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.app = APP_PREFIX + schema
        self.wall = 0.0
        self.walinspect = _walinspect_schema(schema)

    def _snap(self) -> dict[str, Any]:
        bg = ",".join(f"'{b}'" for b in PG_BACKGROUND)
        row = psql(
            "SELECT pg_current_wal_lsn(), "
            "coalesce((SELECT string_agg(pid::text, ',') FROM pg_stat_activity "
            f"WHERE left(application_name, {len(self.app)}) = '{self.app}'), ''), "
            "coalesce((SELECT string_agg(pid::text, ',') FROM pg_stat_activity "
            f"WHERE backend_type IN ({bg})), ''), "
            "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            f"AND state = 'active' AND left(application_name, {len(APP_PREFIX)}) "
            f"<> '{APP_PREFIX}' AND pid <> pg_backend_pid()), "
            + ", ".join(f"(SELECT coalesce(sum({c}), 0) FROM pg_stat_user_tables "
                        f"WHERE schemaname = '{self.schema}')" for c in TABLE_COUNTERS))
        lsn, ours, bgs, others, *counters = row.split("|")
        ours_pids = [int(p) for p in ours.split(",") if p]
        bg_pids = [int(p) for p in bgs.split(",") if p]
        indexes = {}
        for line in psql("SELECT indexrelname, idx_scan, idx_tup_read FROM "
                         f"pg_stat_user_indexes WHERE schemaname = '{self.schema}'").splitlines():
            name, scans, read = line.split("|")
            indexes[name] = (int(scans), int(read))
        return {"t": now_ns(), "lsn_text": lsn, "lsn": _lsn(lsn), "indexes": indexes,
                "ours": {p: _cpu(p) for p in ours_pids}, "bg": {p: _cpu(p) for p in bg_pids},
                "others_active": int(others),
                "tables": dict(zip(TABLE_COUNTERS, (int(c) for c in counters)))}

    def start(self) -> None:
        self.s0 = self._snap()

    def stop(self, *, wal: bool = True) -> dict[str, Any]:
        s1 = self._snap()
        s0 = self.s0
        self.wall = (s1["t"] - s0["t"]) / 1e9

        def used(key: str) -> float:
            total = 0.0
            for pid, c1 in s1[key].items():
                total += c1 - s0[key].get(pid, 0.0)  # new in the window: all its CPU
            return total

        return {"backends": len(s1["ours"]), "backend_cpu_s": used("ours"),
                "background_cpu_s": used("bg"), "wal_bytes_all": s1["lsn"] - s0["lsn"],
                "wal_ours": self._wal_ours(s0["lsn_text"], s1["lsn_text"]) if wal else None,
                "tables": {k: s1["tables"][k] - s0["tables"][k] for k in TABLE_COUNTERS},
                # index -> (scans, index entries read) in the window: which queries ran.
                "indexes": {k: (v[0] - s0["indexes"].get(k, (0, 0))[0],
                                v[1] - s0["indexes"].get(k, (0, 0))[1])
                            for k, v in s1["indexes"].items()},
                "other_active_client_backends": max(s0["others_active"], s1["others_active"])}

    def _wal_ours(self, lsn0: str, lsn1: str) -> dict[str, int] | None:
        """Our share of the WAL between two LSNs (pg_walinspect): the records that touch
        a relation of our schema (its tables, indexes, TOAST), and every record of the
        transactions that wrote them (their commit records). Other engineers' databases
        write WAL on the same server at the same time: ``wal_bytes_all`` includes theirs."""
        if not self.walinspect:
            return None
        fn = f"{self.walinspect}.pg_get_wal_records_info('{lsn0}', '{lsn1}')"
        ns = f"'{self.schema}'::regnamespace"
        sql = rf"""
WITH rel AS (
  SELECT pg_relation_filenode(c.oid)::text AS fn FROM pg_class c WHERE c.relnamespace = {ns}
  UNION SELECT pg_relation_filenode(t.oid)::text FROM pg_class c
        JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.relnamespace = {ns}
  UNION SELECT pg_relation_filenode(i.indexrelid)::text FROM pg_class c
        JOIN pg_index i ON i.indrelid = c.reltoastrelid WHERE c.relnamespace = {ns}),
pat AS (SELECT 'rel \d+/' || oid || '/(\d+)' AS re FROM pg_database
        WHERE datname = current_database()),
w AS (SELECT xid::text AS x, record_length, fpi_length, coalesce(block_ref, '') AS b
      FROM {fn}),
hit AS (SELECT w.*, EXISTS (SELECT 1 FROM pat, regexp_matches(w.b, pat.re, 'g') m
                            WHERE m[1] IN (SELECT fn FROM rel)) AS touches FROM w),
xs AS (SELECT DISTINCT x FROM hit WHERE touches AND x <> '0')
SELECT count(*), coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0),
       (SELECT count(*) FROM xs), (SELECT coalesce(sum(record_length), 0) FROM w)
FROM hit WHERE touches OR x IN (SELECT x FROM xs)"""
        try:
            recs, size, fpi, xacts, size_all = (int(v) for v in psql(sql).split("|"))
        except (subprocess.SubprocessError, ValueError) as exc:
            log(f"cluster: WAL attribution failed: {exc!r}")
            return None
        return {"records": recs, "bytes": size, "fpi_bytes": fpi, "write_xacts": xacts,
                "record_bytes_all": size_all}


#: Counters of pg_stat_user_tables summed over our schema's tables.
TABLE_COUNTERS = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "n_tup_ins",
                  "n_tup_upd", "n_tup_hot_upd", "n_tup_del")


def _walinspect_schema(schema: str) -> str | None:
    """The schema of pg_walinspect in our database: an existing installation, or one
    created in our own schema (and dropped with it)."""
    try:
        found = psql("SELECT extnamespace::regnamespace FROM pg_extension "
                     "WHERE extname = 'pg_walinspect'")
        if found:
            return found
        psql(f"CREATE EXTENSION pg_walinspect SCHEMA {schema}")
        return schema
    except subprocess.SubprocessError as exc:
        log(f"cluster: no pg_walinspect, WAL is not attributed: {exc!r}")
        return None


def _cpu(pid: int) -> float:
    try:
        return _sys.cpu_seconds(pid)
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------- one run


def cluster_once(backend: str, nodes: int, cp: ClusterPlan, *,
                 total_rate: float = 0.0) -> dict[str, Any]:
    """``cp.agents`` agents over ``nodes`` hub nodes (``backend`` sqlite: one node)."""
    if backend == "sqlite" and nodes != 1:
        raise ValueError("SQLite serves one node")
    load_before = _sys.wait_quiet(cp.quiet_wait) if cp.quiet_wait else None
    n = cp.agents
    humans = [[f"h{i}x{j}" for j in range(cp.humans_per_node)] for i in range(nodes)]
    all_humans = [h for hs in humans for h in hs]
    agent_names = [f"a{i}" for i in range(n)]
    rate = total_rate / n if total_rate else 0.0
    servers: list[Server] = []
    procs: list[LoadProc] = []
    nats: NatsServer | None = None
    schema = ""
    pg: dict[str, Any] = {}
    try:
        if backend == "sqlite":
            servers = [Server("hub")]
            tokens = servers[0].tokens(agents=agent_names, humans=all_humans)
        else:
            schema = "b_" + secrets.token_hex(5)
            psql(f"CREATE SCHEMA {schema}")
            store = f"{PG_URL}?search_path={schema}"
            tokens = pg_tokens(store, agents=agent_names, humans=all_humans)
            nats = NatsServer().start()
            servers = [Server("hub", extra=[
                "--store", f"{store}&application_name={APP_PREFIX}{schema}_n{i}",
                "--bus", nats.url]) for i in range(nodes)]
        for s in servers:
            s.start()
        hprocs, aprocs = [], []
        for i, s in enumerate(servers):
            hprocs.append(LoadProc({"mode": "cycles", "base": s.url, "dialect": "a2h",
                                    "humans": [{"handle": h, "token": tokens[f"human:{h}"]}
                                               for h in humans[i]]}, f"humans{i}"))
        procs += hprocs
        for p in hprocs:
            p.expect("ready", 60)
        index0 = 0
        for i, (s, count) in enumerate(zip(servers, _split(n, nodes))):
            # The agents of node i ask the people of node i+1: every cycle crosses nodes.
            target = humans[(i + 1) % nodes]
            aprocs.append(LoadProc({
                "mode": "cycles", "base": s.url, "dialect": "a2h",
                "agents": {"count": count, "index0": index0,
                           "tokens": [tokens[f"agent:{a}"]
                                      for a in agent_names[index0:index0 + count]],
                           "humans": target, "prefix": "a", "rate": rate}}, f"agents{i}"))
            index0 += count
        procs += aprocs
        connected = sum(p.expect("ready", 60 + n / 50)["connected"] for p in aprocs)
        pids = {f"node{i}": s.pid for i, s in enumerate(servers)}
        pids |= {p.name: p.pid for p in procs}
        if nats is not None:
            pids["nats"] = nats.pid
        idle = _idle_cpu(pids, schema, cp.idle_window) if cp.idle_window else None
        t = now_ns() + int(0.2e9)
        m0 = t + int(cp.warmup * 1e9)
        m1 = m0 + int(cp.duration * 1e9)
        for p in procs:
            p.send({"cmd": "run", "m0": m0, "m1": m1, "stop": m1})
        meter = _sys.CpuMeter(pids)
        pg_meter = PgMeter(schema) if schema else None
        if schema:
            # A fresh schema has no planner statistics until autovacuum's first ANALYZE
            # (a minute or more): without them a room load scans every pending request
            # of the tenant. A deployment runs analyzed: analyze once the warm-up has
            # filled the tables, before the window.
            sleep_until_ns(m0 - int(min(1.0, cp.warmup / 2) * 1e9))
            psql(f"ANALYZE {schema}.requests, {schema}.tokens, {schema}.humans")
        sleep_until_ns(m0)
        if pg_meter is not None:
            pg_meter.start()
        meter.start()
        loop0 = {i: _thread_cpu(s.pid) for i, s in enumerate(servers)}
        m_before = [s.metrics() for s in servers]
        sleep_until_ns(m1)
        used = meter.stop()
        loops = {i: _thread_cpu(s.pid) - loop0[i] for i, s in enumerate(servers)}
        if pg_meter is not None:
            pg = pg_meter.stop()
        m_after = [s.metrics() for s in servers]
        time.sleep(0.5)  # in-flight cycles finish (outside the window anyway)
        for p in procs:
            p.send({"cmd": "finish"})
        results = {p.name: p.expect("result", 60) for p in procs}
        if schema:
            pg["size"] = _sizes(schema)
    finally:
        _close_all(procs)
        for s in servers:
            s.stop()
        if nats is not None:
            nats.stop()
        if schema:
            try:
                psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            except subprocess.SubprocessError as exc:
                log(f"cluster: could not drop schema {schema}: {exc!r}")
    wall = meter.wall
    ares = [results[p.name] for p in aprocs]
    hres = [results[p.name] for p in hprocs]
    cycles = sum(r["cycles"] for r in ares)
    lat_a = [x for r in hres for x in r["lat_a"]]
    lat_b = [x for r in ares for x in r["lat_b"]]
    rtt = [x for r in ares for x in r["rtt"]]
    errors: dict[str, int] = {}
    for r in results.values():
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v

    def per_cycle(cpu_s: float) -> float | None:
        return round(cpu_s / cycles * 1e6, 1) if cycles else None

    def delta(key: str) -> float:
        return sum(a.get(key, 0.0) - b.get(key, 0.0) for a, b in zip(m_after, m_before))

    hub_cpu = sum(used[f"node{i}"] for i in range(nodes))
    nats_cpu = used.get("nats", 0.0)
    pg_cpu = pg.get("backend_cpu_s", 0.0)
    pg_bg = pg.get("background_cpu_s", 0.0)
    client_cpu = sum(used[p.name] for p in procs)
    other = max(0.0, meter.other - pg_cpu - pg_bg)
    commits = delta("a2h_store_commits_total")
    out: dict[str, Any] = {
        "backend": backend, "nodes": nodes,
        "label": "SQLite, 1 node" if backend == "sqlite" else
        f"PostgreSQL + NATS, {nodes} node{'s' if nodes > 1 else ''}",
        "mode": "paced" if rate else "closed", "n": n, "connected": connected,
        "offered_per_s": total_rate or None, "rate_per_agent": rate,
        "window_s": round(wall, 3), "cycles": cycles,
        "cycles_per_s": round(cycles / wall, 1) if wall else None,
        "answer_to_agent_ms": percentiles(lat_b, 1e-3),
        "ask_to_inbox_ms": percentiles(lat_a, 1e-3),
        "ask_to_answer_ms": percentiles(rtt, 1e-3),
        "cpu_us_per_cycle": {
            "hub_nodes": per_cycle(hub_cpu),
            "per_node": [per_cycle(used[f"node{i}"]) for i in range(nodes)],
            "postgres_backends": per_cycle(pg_cpu) if schema else None,
            "postgres_background_shared": per_cycle(pg_bg) if schema else None,
            "nats": per_cycle(nats_cpu) if nats is not None else None,
            "server_total": per_cycle(hub_cpu + pg_cpu + nats_cpu),
            "clients": per_cycle(client_cpu),
        },
        "cpu_util": {
            "per_node": [round(used[f"node{i}"] / wall, 3) for i in range(nodes)],
            "per_node_loop": [round(loops[i] / wall, 3) for i in range(nodes)],
            "postgres_backends": round(pg_cpu / wall, 3),
            "nats": round(nats_cpu / wall, 3),
            "clients": {p.name: round(used[p.name] / wall, 3) for p in procs},
        },
        # Every socket connected, nobody asking: the fixed cost (reconcile, pollers).
        "idle_cpu_util": idle,
        "other_cpu_util": round(other / wall, 3) if wall else 0.0,
        "machine_load_before": load_before,
        "loadavg": _loadavg(),
        "store_commits": commits,
        "store_commits_per_cycle": round(commits / cycles, 3) if cycles else None,
        "store_mean_batch": round(delta("a2h_store_commit_items_total") / commits, 1)
        if commits else None,
        "bus": {k: delta(f"a2h_bus_{k}_total") for k in ("sent", "received", "dropped",
                                                           "errors")} if nats else None,
        "errors": errors,
    }
    if schema:
        wal = pg["wal_ours"] or {}
        ours = wal.get("bytes")
        out["postgres"] = {
            "schema": schema, "backends": pg["backends"],
            # Ours: the records touching our schema and their transactions (pg_walinspect).
            "wal_bytes": ours,
            "wal_bytes_per_cycle": round(ours / cycles, 1) if cycles and ours else None,
            "wal_fpi_bytes_per_cycle": round(wal["fpi_bytes"] / cycles, 1)
            if cycles and wal else None,
            "wal_records_per_cycle": round(wal["records"] / cycles, 2) if cycles and wal else None,
            "write_xacts_per_cycle": round(wal["write_xacts"] / cycles, 3)
            if cycles and wal else None,
            "wal_mib_per_s": round(ours / wall / 2**20, 2) if wall and ours else None,
            # The whole server's WAL in the window (other databases' included).
            "wal_bytes_all": pg["wal_bytes_all"],
            "wal_share_ours": round(ours / wal["record_bytes_all"], 3)
            if ours and wal.get("record_bytes_all") else None,
            "table_counters_per_cycle": {k: round(v / cycles, 2) if cycles else None
                                         for k, v in pg["tables"].items()},
            "index_scans_reads_per_cycle": {
                k: [round(a / cycles, 3), round(b / cycles, 2)] for k, (a, b)
                in sorted(pg["indexes"].items()) if a and cycles},
            "other_active_client_backends": pg["other_active_client_backends"],
            # Everything the run stored (warm-up included), heap + indexes + TOAST.
            "requests_rows": pg["size"]["rows"],
            "bytes_per_request_row": pg["size"]["bytes_per_row"],
            "bytes_per_request_row_heap": pg["size"]["heap_bytes_per_row"],
        }
    out["answer_to_agent_cdf"] = _sys.cdf_points(lat_b, 1e-3)
    return out


def _idle_cpu(pids: dict[str, int], schema: str, seconds: float) -> dict[str, Any]:
    """Cores used while every socket is connected and nobody asks."""
    meter = _sys.CpuMeter(pids)
    pg_meter = PgMeter(schema) if schema else None
    if pg_meter is not None:
        pg_meter.start()
    meter.start()
    time.sleep(seconds)
    used = meter.stop()
    pg = pg_meter.stop(wal=False) if pg_meter is not None else {}
    nodes = [round(v / meter.wall, 4) for k, v in used.items() if k.startswith("node")]
    return {"window_s": round(meter.wall, 2), "per_node": nodes,
            "postgres_backends": round(pg.get("backend_cpu_s", 0.0) / meter.wall, 4),
            "nats": round(used.get("nats", 0.0) / meter.wall, 4),
            "other": meter.other_util}


def _sizes(schema: str) -> dict[str, Any]:
    """Bytes on disk per stored request (table ``requests`` with its indexes and TOAST)."""
    rows, total, heap = (int(v) for v in psql(
        f"SELECT count(*), pg_total_relation_size('{schema}.requests'), "
        f"pg_relation_size('{schema}.requests') FROM {schema}.requests").split("|"))
    return {"rows": rows, "bytes_per_row": round(total / rows, 1) if rows else None,
            "heap_bytes_per_row": round(heap / rows, 1) if rows else None}


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _available() -> str | None:
    """Why the scenario cannot run here, or None."""
    if not shutil.which("psql"):
        return "psql is not installed"
    if not os.path.exists(NATS_BIN):
        return "nats-server is not installed"
    try:
        psql("SELECT 1")
    except (subprocess.SubprocessError, OSError) as exc:
        return f"PostgreSQL at {PG_URL} does not answer: {exc!r}"
    try:
        import asyncpg  # noqa: F401
        import nats  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[postgres]')"
    return None


# ---------------------------------------------------------------------------- the scenario


def scenario_cluster(plan: Plan) -> dict[str, Any]:
    cp = ClusterPlan.for_plan(plan)
    why = _available()
    if why:
        log(f"cluster: skipped: {why}")
        return {"skipped": why, "plan": asdict(cp)}
    configs = [("sqlite", 1, 0.0)] + [("postgres", k, 0.0) for k in cp.node_counts]
    configs += list(cp.paced)
    runs: list[dict[str, Any]] = []
    for backend, k, total in configs:
        mode = f"paced {total:.0f}/s" if total else "closed loop"
        log(f"cluster: {backend} x{k}, {cp.agents} agents, {mode}")
        try:
            r = cluster_once(backend, k, cp, total_rate=total)
        except Exception as exc:  # noqa: BLE001 - one failed run must not sink the others
            log(f"cluster: {backend} x{k} {mode} failed: {exc!r}")
            runs.append({"backend": backend, "nodes": k,
                         "mode": "paced" if total else "closed", "error": repr(exc)})
            continue
        runs.append(r)
        c = r["cpu_us_per_cycle"]
        wal = (r.get("postgres") or {}).get("wal_bytes_per_cycle")
        log(f"  {r['cycles_per_s']:.0f} cycles/s, answer->agent p50/p99 "
            f"{r['answer_to_agent_ms']['p50']}/{r['answer_to_agent_ms']['p99']} ms; µs/cycle "
            f"hub {c['hub_nodes']} pg {c['postgres_backends']} nats {c['nats']}; "
            f"WAL {wal} B/cycle; other {r['other_cpu_util']}; errors {r['errors']}")
    out = {"plan": asdict(cp), "runs": runs, "targets": targets(runs, cp.paced_total)}
    for line in markdown(out).splitlines():
        log(line)
    return out


def _find(runs: list[dict[str, Any]], backend: str, nodes: int, mode: str,
          offered: float | None = None) -> dict[str, Any] | None:
    for r in runs:
        if (r.get("backend"), r.get("nodes"), r.get("mode")) == (backend, nodes, mode) \
                and "error" not in r and (offered is None or r["offered_per_s"] == offered):
            return r
    return None


def targets(runs: list[dict[str, Any]], offered: float) -> list[dict[str, Any]]:
    out = []
    lite, pg1 = _find(runs, "sqlite", 1, "closed"), _find(runs, "postgres", 1, "closed")
    if lite and pg1 and lite["cycles_per_s"]:
        ratio = round(pg1["cycles_per_s"] / lite["cycles_per_s"], 2)
        out.append({"issue": 11, "name": "one PostgreSQL node / SQLite node, cycles/s",
                    "target": f">= {RATIO_TARGET}", "measured": ratio,
                    "where": f"N={pg1['n']}, closed loop",
                    "status": "met" if ratio >= RATIO_TARGET else "NOT met"})
    pg2 = _find(runs, "postgres", 2, "paced", offered)
    if pg2 and pg2["answer_to_agent_ms"]["p99"] is not None:
        p99 = pg2["answer_to_agent_ms"]["p99"]
        out.append({"issue": 11, "name": "answer -> agent p99, two PostgreSQL nodes",
                    "target": f"< {P99_TARGET_MS:.0f} ms", "measured": p99,
                    "where": f"{pg2['offered_per_s']:.0f} cycles/s offered, "
                             f"N={pg2['n']}, answers cross nodes",
                    "status": "met" if p99 < P99_TARGET_MS else "NOT met"})
    return out


def _f(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def markdown(result: dict[str, Any]) -> str:
    """The scenario's figures as a Markdown table (one row per run) and its targets."""
    if "skipped" in result:
        return f"cluster: skipped ({result['skipped']})"
    head = ("| configuration | load | cycles/s | answer→agent p50 / p99 ms | "
            "ask→inbox p50 / p99 ms | hub nodes µs/cycle | postgres µs/cycle | "
            "nats µs/cycle | server total µs/cycle | WAL B/cycle | other cores |")
    lines = [head, "|" + "---|" * 11]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['backend']} x{r['nodes']} | {r['mode']} | failed: "
                         f"{r['error'][:60]} |" + " |" * 8)
            continue
        load = f"paced {r['offered_per_s']:,.0f}/s" if r["mode"] == "paced" else "closed loop"
        a, b, c = r["answer_to_agent_ms"], r["ask_to_inbox_ms"], r["cpu_us_per_cycle"]
        wal = (r.get("postgres") or {}).get("wal_bytes_per_cycle")
        lines.append(
            f"| {r['label']} | {load}, {r['n']} agents | {_f(r['cycles_per_s'])} | "
            f"{_f(a['p50'], 2)} / {_f(a['p99'], 2)} | {_f(b['p50'], 2)} / {_f(b['p99'], 2)} | "
            f"{_f(c['hub_nodes'])} | {_f(c['postgres_backends'])} | {_f(c['nats'])} | "
            f"{_f(c['server_total'])} | {_f(wal)} | {_f(r['other_cpu_util'], 2)} |")
    for t in result.get("targets", []):
        lines.append("")
        lines.append(f"target (issue {t['issue']}) {t['name']}: {t['measured']} "
                     f"({t['target']}; {t['where']}) -> {t['status']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import orjson

    if len(argv) != 1:
        print("usage: python -m bench.cluster RESULTS.json", file=sys.stderr)
        return 2
    with open(argv[0], "rb") as f:
        doc = orjson.loads(f.read())
    result = doc.get("scenarios", {}).get("cluster", doc)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
