"""Fixtures for the inbox tests in headless Chromium (Debian's package, driven by Playwright).

Without chromium or the playwright package the browser tests are skipped, and the reason is
printed in the summary; with CI=true that is a failure instead: CI must run them.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from browser_util import (
    CHROMIUM_ARGS,
    AsyncRunner,
    Human,
    SdkClient,
    chromium_executable,
    handle_for,
    ms,
)
from e2e_util import HubProcess, create_token

_unavailable: list[str] = []
_counter = itertools.count(1)


def _browser_problem() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install playwright)"
    if chromium_executable() is None:
        return "chromium is not installed (apt-get install chromium)"
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unavailable:
        terminalreporter.write_line(f"browser tests skipped: {_unavailable[0]}", yellow=True)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    problem = _browser_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests must run in CI, but {problem}", pytrace=False)
        if not _unavailable:
            _unavailable.append(problem)
            print(f"\nskipping browser tests: {problem}")
        pytest.skip(problem)
    path = chromium_executable()
    assert path is not None
    return path


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=ms(5))
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def runner() -> Iterator[AsyncRunner]:
    r = AsyncRunner()
    yield r
    r.close()


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[HubProcess]:
    """One hub for the session; every test talks as its own human, so tests do not mix."""
    db = tmp_path_factory.mktemp("hub") / "hub.db"
    with HubProcess(db) as h:
        yield h


@pytest.fixture(scope="session")
def agent(hub: HubProcess, runner: AsyncRunner) -> Iterator[SdkClient]:
    client = SdkClient(runner, hub.url, create_token(hub.db, agent="ci"))
    yield client
    client.close()


@pytest.fixture
def human(hub: HubProcess, request: pytest.FixtureRequest) -> Human:
    handle = handle_for(request.node.name, next(_counter))
    return Human(handle, create_token(hub.db, human=handle), hub.db)


@dataclass
class PageErrors:
    """JavaScript exceptions and CSP violations seen by the pages of one test."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> Any:
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._console)
        return page

    def _console(self, msg: Any) -> None:
        if msg.type == "error" and re.search(r"Content Security Policy|Uncaught", msg.text):
            self.errors.append(f"console: {msg.text}")


@pytest.fixture
def page_errors() -> Iterator[PageErrors]:
    pe = PageErrors()
    yield pe
    assert not pe.errors, "the page reported errors:\n" + "\n".join(pe.errors)


@pytest.fixture
def context(browser: Any, page_errors: PageErrors) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1000, "height": 900})
    ctx.on("page", page_errors.watch)
    yield ctx
    ctx.close()
