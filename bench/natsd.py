"""A nats-server of our own on 127.0.0.1, for the cluster bench and the cluster tests.

The first start lets the server choose a free port (``-p -1``); a restart keeps that port,
so clients reconnect to the same URL (the tests restart NATS under load).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

from bench import _sys

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

        def listening(m: re.Match[str]) -> None:
            self.port = int(m.group(1))
            ready.set()

        _sys.watch_output(self.proc, self.output, _LISTENING, listening)
        if not ready.wait(self.timeout):
            self.stop()
            raise RuntimeError("nats-server did not start:\n" + "".join(self.output))
        return self

    def stop(self) -> None:
        _sys.stop_process(self.proc, 10)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
