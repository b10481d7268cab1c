"""Servers under test, each a real subprocess on 127.0.0.1 (port 0), and their tokens.

- ``hub``: ``python -m hub.cli serve --port 0 --db FILE --log-level warning ...``, the same
  command a user runs (``a2h serve``).
- ``relay`` / ``socketio``: ``python -m bench.relay --kind ...`` (see ``bench/relay.py``).

A :class:`Server` knows its pid (for ``/proc`` CPU and RSS), its URL, the dialect its
clients speak, and how to mint tokens for it.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import _sys

ROOT = Path(__file__).resolve().parents[1]
_SERVING = re.compile(r"(?:a2h|relay): serving on (http://\S+)")

KINDS = ("hub", "relay", "socketio")

#: Flags every benchmarked hub gets. The load client concentrates many humans on a few
#: sockets, so the per-connection message rate limit (200/s by default, a guard against
#: abuse) and the per-address connection limit (all load comes from 127.0.0.1) are lifted,
#: and /metrics is served without a token (the runner reads it); every other setting is the
#: default a user gets (``--sync full``).
HUB_FLAGS = ["--rate", "1000000", "--burst", "1000000", "--max-conns-per-ip", "0",
             "--metrics-public", "true"]
LABELS = {"hub": "A2H hub", "relay": "bare Starlette relay", "socketio": "python-socketio relay"}


class Server:
    def __init__(self, kind: str, *, extra: list[str] | None = None,
                 db: Path | None = None, workdir: Path | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(kind)
        self.kind = kind
        self.extra = list(extra or [])
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="a2h-bench-"))
        self.db = db or (self.workdir / "bench.db")
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []
        self.started_ns = 0
        self.serving_ns = 0
        #: 0 on the first start; then the port it got, so a restart keeps its URL.
        self.fixed_port = 0

    @property
    def dialect(self) -> str:
        return "sio" if self.kind == "socketio" else "a2h"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def command(self) -> list[str]:
        if self.kind == "hub":
            return [sys.executable, "-m", "hub.cli", "serve", "--host", "127.0.0.1",
                    "--port", str(self.fixed_port), "--db", str(self.db), "--log-level", "warning", *HUB_FLAGS,
                    *self.extra]
        kind = "starlette" if self.kind == "relay" else "socketio"
        return [sys.executable, "-m", "bench.relay", "--kind", kind, "--port", str(self.fixed_port), *self.extra]

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> Server:
        """Spawn the server; with ``wait`` return once it printed its URL. ``wait=False``
        (a restart on the known port) returns at once: poll :func:`wait_healthy`."""
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.output = []
        self.url = ""
        self.started_ns = _sys.now_ns()
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        found = threading.Event()

        def serving(m: re.Match[str]) -> None:
            if not found.is_set():
                self.serving_ns = _sys.now_ns()
                self.url = m.group(1)
                found.set()

        _sys.watch_output(self.proc, self.output, _SERVING, serving)
        if not wait:
            if not self.fixed_port:
                raise ValueError("start(wait=False) needs a known port (start once first)")
            self.url = f"http://127.0.0.1:{self.fixed_port}"
            return self
        deadline = time.monotonic() + timeout
        while not found.wait(0.01):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.kind} did not start:\n" + "".join(self.output[-50:]))
        self.fixed_port = self.port
        return self

    def kill(self) -> None:
        """SIGKILL: nothing of the hub's shutdown runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        _sys.stop_process(self.proc, 20)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- measurements

    def rss_kib(self) -> int:
        return _sys.rss_kib(self.pid)

    def cpu(self) -> float:
        return _sys.cpu_seconds(self.pid)

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        """The hub's /metrics as {'name{labels}': value}."""
        status, body = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return parse_metrics(body)

    # -- tokens

    def tokens(self, *, agents: list[str] = (), humans: list[str] = ()) -> dict[str, str]:  # type: ignore[assignment]
        """Tokens by name (``agent:NAME`` / ``human:HANDLE``) valid on this server."""
        if self.kind != "hub":
            return {f"agent:{a}": f"agent:{a}" for a in agents} | \
                {f"human:{h}": f"human:{h}" for h in humans}
        return hub_tokens(self.db, agents=list(agents), humans=list(humans))


def hub_tokens(db: Path, *, agents: list[str], humans: list[str],
               tenant: str = "default") -> dict[str, str]:
    """Create tokens directly in the hub's database, in one transaction (fast for
    thousands of humans; works whether or not the hub runs: WAL + busy_timeout)."""
    from hub.store import Role
    from hub.store.sqlite import connect_sync, create_token_sync, new_token

    out: dict[str, str] = {}
    conn = connect_sync(db)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for a in agents:
            tok = new_token(Role.AGENT)
            create_token_sync(conn, tok, tenant, Role.AGENT, a)
            out[f"agent:{a}"] = tok
        for h in humans:
            tok = new_token(Role.HUMAN)
            create_token_sync(conn, tok, tenant, Role.HUMAN, h)
            out[f"human:{h}"] = tok
        conn.execute("COMMIT")
    finally:
        conn.close()
    return out


def parse_metrics(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def wait_healthy(server: Server, timeout: float = 30.0, interval: float = 0.002) -> int:
    """Poll /healthz until 200; return the monotonic ns when it first answered 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc is not None and server.proc.poll() is not None:
            raise RuntimeError("server exited:\n" + "".join(server.output[-50:]))
        try:
            status, _ = server.get("/healthz", timeout=1.0)
            if status == 200:
                return _sys.now_ns()
        except (OSError, http.client.HTTPException, ValueError, IndexError):
            pass
        time.sleep(interval)
    raise TimeoutError("/healthz never answered 200")
