"""A nats-server of our own on 127.0.0.1, for the cluster bench and the cluster tests.

The first start lets the server choose a free port (``-p -1``); a restart keeps that port,
so clients reconnect to the same URL (the tests restart NATS under load).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

NATS_BIN = shutil.which("nats-server") or "/usr/sbin/nats-server"
_LISTENING = re.compile(r"Listening for client connections on [\d.]+:(\d+)")


class NatsServer:
    def __init__(self, *, timeout: float = 20.0) -> None:
        self.port = -1
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> NatsServer:
        self.proc = subprocess.Popen([NATS_BIN, "-a", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        ready = threading.Event()

        def pump(proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if len(self.output) < 2000:
                    self.output.append(line)
                m = _LISTENING.search(line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()

        threading.Thread(target=pump, args=(self.proc,), daemon=True).start()
        if not ready.wait(self.timeout):
            self.stop()
            raise RuntimeError("nats-server did not start:\n" + "".join(self.output))
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
