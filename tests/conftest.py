"""Shared fixtures. ``async def`` tests run on a fresh event loop (no plugin needed)."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))  # bench/ (its nats-server helper)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run every test but the browser ones in a worker thread: the browser tests' sync
    Playwright keeps an event loop running in the main thread, where ``asyncio.run()`` (an
    ``async def`` test, or code under test such as the CLI) refuses to start another.
    ``async def`` tests run on a fresh event loop there, bounded by A2H_TEST_TIMEOUT."""
    if pyfuncitem.get_closest_marker("browser") is not None:
        return None
    funcargs = pyfuncitem.funcargs
    args = {name: funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    timeout = float(os.environ.get("A2H_TEST_TIMEOUT", "120"))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            if inspect.iscoroutinefunction(pyfuncitem.obj):
                asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), timeout))
            else:
                pyfuncitem.obj(**args)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, name=f"test {pyfuncitem.name}")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return True
