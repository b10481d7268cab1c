"""Several real ``a2h serve`` nodes on one PostgreSQL schema and one NATS server.

- :func:`pg_schema`: a fresh schema on the machine's PostgreSQL (127.0.0.1:5432, database
  ``test``) for one test, dropped after; the store URL selects it with ``search_path``.
- :class:`NatsServer`: a private ``nats-server`` on a port of its own choosing, which a
  test may stop and start again on the same port (the machine's own NATS is never touched).
- :class:`Cluster`: N hub nodes (``HubProcess``) on that store and that bus.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from e2e_util import UNIT, HubProcess, a2h

from bench.natsd import NatsServer as _NatsServer

PG = os.environ.get("A2H_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def psql(sql: str, url: str = PG) -> str:
    out = subprocess.run(["psql", url.split("?")[0], "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A store URL on a fresh, empty schema."""
    name = "t_" + secrets.token_hex(6)
    psql(f"CREATE SCHEMA {name}")
    try:
        yield f"{PG}?search_path={name}"
    finally:
        psql(f"DROP SCHEMA {name} CASCADE")


class NatsServer(_NatsServer):
    """A nats-server of the test's own (bench/natsd.py), with the tests' time scale."""

    def __init__(self) -> None:
        super().__init__(timeout=20 * UNIT)


class Cluster:
    """``n`` hub nodes on one store URL and one bus URL (``bus=""``: no bus)."""

    def __init__(self, tmp: Path, store: str, bus: str, n: int, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        self.store = store
        self.bus = bus
        args = ["--store", store, "--log-level", "info", *extra]
        if bus:
            args += ["--bus", bus]
        self.nodes = [HubProcess(tmp / f"unused-{i}.db", *args, env=env) for i in range(n)]

    def token(self, *, agent: str | None = None, human: str | None = None,
              tenant: str = "default") -> str:
        args = ["token", "create", "--store", self.store, "--tenant", tenant]
        args += ["--agent", agent] if agent else ["--human", str(human)]
        return a2h(*args).stdout.strip()

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def output(self) -> str:
        return "".join(line for node in self.nodes for line in node.output)

    def __enter__(self) -> Cluster:
        for node in self.nodes:
            node.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.stop()



PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb in a temporary directory, run as the
    ``postgres`` user), so a test may restart it without touching the machine's server."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="a2h-pg-"))
        self.port = 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True,
                              text=True, timeout=120, check=check)

    def init(self) -> PrivatePostgres:
        shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-A", "trust",
                          "-U", "postgres", "--no-sync")
        return self

    def start(self) -> PrivatePostgres:
        rng = random.Random()
        for _ in range(20):  # a port nobody uses: PostgreSQL cannot pick one itself
            port = self.port or rng.randrange(20000, 60000)
            out = self._as_postgres(
                str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-w", "-t", "60",
                "-l", str(self.dir / "log"), "-o",
                f"-p {port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off",
                "start", check=False)
            if out.returncode == 0:
                self.port = port
                return self
            if self.port:
                break
        raise RuntimeError("private postgres did not start:\n" + out.stdout + out.stderr
                           + (self.dir / "log").read_text())

    def stop(self) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-w",
                          "-m", "fast", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
