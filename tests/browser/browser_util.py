"""Helpers for the browser tests: find Chromium, run the async SDK beside Playwright's sync API.

Playwright's sync API owns the test thread, so the SDK (asyncio) runs on a private event loop
in a background thread; ``AsyncRunner.submit`` hands back a ``concurrent.futures.Future``, which
lets a test start an ``ask`` that blocks on the agent side while it clicks in the page.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import shutil
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from e2e_util import UNIT

T = TypeVar("T")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"


def chromium_executable() -> str | None:
    """$A2H_CHROMIUM when set, else Debian's chromium; None when it is not installed."""
    forced = os.environ.get("A2H_CHROMIUM")
    candidates = [forced] if forced else [shutil.which("chromium"), "/usr/bin/chromium",
                                          shutil.which("chromium-browser")]
    for cand in candidates:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def playwright_expect() -> Any:
    """Playwright's ``expect``; without the package the module is skipped (failed in CI)."""
    try:
        from playwright.sync_api import expect
    except ImportError:
        import pytest

        reason = "the playwright Python package is not installed (pip install playwright)"
        if os.environ.get("CI", "").lower() == "true":
            raise RuntimeError(f"browser tests must run in CI, but {reason}") from None
        pytest.skip(reason, allow_module_level=True)
    return expect


def ms(seconds: float) -> float:
    """A Playwright timeout in milliseconds, scaled by A2H_TEST_UNIT."""
    return seconds * 1000.0 * UNIT


class AsyncRunner:
    """An asyncio loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="sdk loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return self.submit(coro).result(timeout * UNIT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class SdkClient:
    """A ``client_sdk.Hub`` living on the runner's loop; methods return futures or results."""

    def __init__(self, runner: AsyncRunner, url: str, token: str) -> None:
        from client_sdk import Hub

        self.runner = runner
        self.hub = Hub(url, token=token)
        runner.run(self.hub.connect())

    def ask(self, to: str, question: str, **kw: Any) -> concurrent.futures.Future[Any]:
        """Start an ask; ``.result(timeout)`` is the SDK's Answer."""
        kw.setdefault("conversation", "browser-tests")
        return self.runner.submit(self.hub.ask(to, question, **kw))

    def create(self, to: str, question: str, **kw: Any) -> Any:
        """Ask without waiting (wait=0): returns the pending Answer with its request view."""
        kw.setdefault("wait", 0)
        return self.ask(to, question, **kw).result(30 * UNIT)

    def wait(self, op_id: str, wait: float = 5.0) -> Any:
        return self.runner.run(self.hub.wait(op_id, wait=wait * UNIT), timeout=wait + 30)

    def respond(self, op_id: str, value: Any, status: str = "answered") -> Any:
        return self.runner.run(self.hub.respond(op_id, value, status=status))

    def close(self) -> None:
        # Teardown: a hub that is already gone (killed by the test) is fine.
        with contextlib.suppress(OSError, TimeoutError, concurrent.futures.TimeoutError,
                                 ConnectionError):
            self.runner.run(self.hub.close(), timeout=10)


@dataclass
class Human:
    handle: str
    token: str
    db: Path


_SAFE = re.compile(r"[^a-z0-9]+")


def handle_for(name: str, n: int) -> str:
    """A short human handle unique per test."""
    return f"u{n}-{_SAFE.sub('-', name.lower()).strip('-')[:24]}"
