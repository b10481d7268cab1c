"""Run a real ``a2h serve`` subprocess on port 0 for end-to-end tests.

``HubProcess`` owns one database file across restarts, so a test can SIGKILL the hub and
start it again on the same store.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: One scalable time unit for tests over real sockets (A2H_TEST_UNIT=2 doubles every timeout).
UNIT = float(os.environ.get("A2H_TEST_UNIT", "1"))

async def until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Poll a real condition (never a sleep standing in for one), bounded by
    ``timeout`` × UNIT seconds, and return its first truthy value. ``cond`` may return an
    awaitable."""
    end = time.monotonic() + timeout * UNIT
    while True:
        res = cond()
        if inspect.isawaitable(res):
            res = await res
        if res:
            return res
        if time.monotonic() > end:
            raise AssertionError(f"condition not reached in time: {what or cond}")
        await asyncio.sleep(0.01)


_SERVING = re.compile(r"a2h: serving on (http://\S+)")


def a2h(*args: str, db: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the ``a2h`` CLI in a subprocess (``python -m hub.cli``)."""
    env = dict(os.environ)
    if db is not None:
        env["A2H_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "-m", "hub.cli", *args],
        capture_output=True, text=True, env=env, check=check, timeout=60 * UNIT,
    )


def create_token(db: Path, *, agent: str | None = None, human: str | None = None,
                 tenant: str = "default", admin: bool = False) -> str:
    args = ["token", "create", "--tenant", tenant]
    if agent:
        args += ["--agent", agent]
    elif human:
        args += ["--human", human]
    elif admin:
        args += ["--admin"]
    return a2h(*args, db=db).stdout.strip()


class HubProcess:
    """A real hub on 127.0.0.1, port 0. Use as a context manager."""

    def __init__(self, db: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.db = db
        self.extra = list(extra)
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []
        self._port = 0

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def start(self, timeout: float = 30.0) -> HubProcess:
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        # Reuse the same port across restarts so clients can reconnect to the same URL.
        cmd = [sys.executable, "-m", "hub.cli", "serve", "--host", "127.0.0.1",
               "--port", str(self._port), "--db", str(self.db), *self.extra]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        found = threading.Event()

        def pump(proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line)
                m = _SERVING.search(line)
                if m:
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=pump, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + timeout * UNIT
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("a2h serve did not start:\n" + "".join(self.output))
        self._port = int(self.url.rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10 * UNIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode if self.proc else None

    def restart(self) -> HubProcess:
        self.kill()
        return self.start()

    def __enter__(self) -> HubProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
