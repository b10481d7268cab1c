"""A small local HTTP API standing in for an issue tracker and a notifier.

It counts every request by its ``Idempotency-Key`` header and applies the usual rule for
keyed writes: a key seen before gets the stored response, not a second effect. ``notify``
ignores keys on purpose (like a card charge or an SMS gateway): every request is an effect.

``hold(path)`` makes the next request to ``path`` take effect, signal ``arrived``, and then
wait for ``release`` before answering: the test kills the client in between.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Hold:
    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()


class MockAPI:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()  # (route, key) -> requests seen
        self.effects: Counter[tuple[str, str]] = Counter()   # (route, key) -> effects applied
        self._responses: dict[tuple[str, str], dict[str, Any]] = {}
        self._holds: dict[str, Hold] = {}
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api._serve(self, "GET")

            def do_POST(self) -> None:
                api._serve(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> MockAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._holds.values():
            h.release.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self, route: str) -> Hold:
        h = self._holds[route] = Hold()
        return h

    def count(self, route: str, key: str | None = None) -> int:
        """Effects on ``route`` (for one key, or all)."""
        with self._lock:
            return sum(n for (r, k), n in self.effects.items()
                       if r == route and (key is None or k == key))

    def seen(self, route: str, key: str | None = None) -> int:
        """Requests to ``route`` (for one key, or all), effects or not."""
        with self._lock:
            return sum(n for (r, k), n in self.requests.items()
                       if r == route and (key is None or k == key))

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        key = h.headers.get("Idempotency-Key", "")
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"null") if length else None
        parts = h.path.strip("/").split("/")
        if method == "GET" and parts[0] == "issues" and len(parts) == 2:
            route = "read_issue"
            make = lambda: {"number": int(parts[1]), "title": "Crash on start"}  # noqa: E731
            keyed = True
        elif method == "POST" and parts[0] == "issues" and parts[2:] == ["comments"]:
            route = "post_comment"
            make = lambda: {"id": next(self._ids), "body": body["body"]}  # noqa: E731
            keyed = True
        elif method == "POST" and parts == ["notify"]:
            route = "notify"
            make = lambda: {"sent": True, "comment_id": body["comment_id"]}  # noqa: E731
            keyed = False
        else:
            h.send_response(404)
            h.end_headers()
            return
        with self._lock:
            self.requests[(route, key)] += 1
            stored = self._responses.get((route, key)) if keyed and key else None
            if stored is None:
                stored = make()
                self.effects[(route, key)] += 1
                if keyed and key:
                    self._responses[(route, key)] = stored
            hold = self._holds.pop(route, None)
        if hold is not None:
            hold.arrived.set()
            hold.release.wait(30)
        data = json.dumps(stored).encode()
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the client was killed meanwhile
