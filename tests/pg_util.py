"""PostgreSQL for tests: each test gets its own fresh schema in the test database, dropped
after it, so tests never see each other's rows (and can run beside other users of the
server). ``scripts/test`` starts PostgreSQL when it is not running; a test never skips for
want of it.

``A2H_TEST_PG`` names the server and database (default: this machine's, trust auth).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

PG_URL = os.environ.get("A2H_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a private loop in a thread (a sync fixture may run where a loop is
    already running: the browser tests' sync Playwright keeps one in the main thread)."""
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return out[0]


async def admin(sql: str, *args: Any) -> Any:
    """Run one statement on the test database (outside any test's schema)."""
    conn = await asyncpg.connect(PG_URL, timeout=10)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


def with_schema(url: str, schema: str) -> str:
    """``url`` with its tables in ``schema`` (a server setting asyncpg passes on)."""
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}"


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh schema for one test; yields the store URL that uses it."""
    name = "t_" + secrets.token_hex(6)
    run_sync(admin(f"CREATE SCHEMA {name}"))
    try:
        yield with_schema(PG_URL, name)
    finally:
        run_sync(admin(f"DROP SCHEMA {name} CASCADE"))
