"""A blocking facade over :class:`client_sdk.Hub`, for scripts and notebooks.

    with SyncHub("http://127.0.0.1:8000", token=AGENT_TOKEN) as hub:
        answer = hub.ask("me", "Deploy now?", conversation="deploys", choices=["yes", "no"])

Theory of operation: a :class:`SyncHub` owns a private event loop running in a daemon
thread, started in ``__init__`` and stopped and joined by :meth:`SyncHub.close`. Every
method submits the matching coroutine of the one async :class:`~client_sdk.Hub` to that
loop and blocks its caller until the result is there. The caller needs no event loop, and
one already running in the calling thread (Jupyter's) is never touched, so nothing ever
reports "this event loop is already running". Interrupting a blocked call (Ctrl-C, a
notebook's stop button) cancels the coroutine on the private loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from client_sdk.client import Hub, Schema, SchemaModel
from client_sdk.models import Answer, Item
from client_sdk.runs import _CALL_ID, Run, RunInfo
from hub.protocol import MAX_WAIT_SECONDS, Kind, Status

_R = TypeVar("_R")


class SyncHub:
    """:class:`client_sdk.Hub`, blocking: the same arguments, methods and errors.

    Connects in the constructor (raises :class:`~client_sdk.AccessDenied` or
    :class:`~client_sdk.ConnectionLost` like ``Hub.connect``). Use it as a context manager,
    or call :meth:`close` when done.
    """

    def __init__(self, url: str | Sequence[str], token: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve_loop, name="a2h sync hub",
                                        daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._hub = self._run(self._make(url, token, options))
        except BaseException:
            self._stop()
            raise

    @staticmethod
    async def _make(url: str | Sequence[str], token: str, options: dict[str, Any]) -> Hub:
        hub = Hub(url, token, **options)  # made on the private loop, like all it awaits
        await hub.connect()
        return hub

    def _serve_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _run(self, coro: Coroutine[Any, Any, _R]) -> _R:
        if threading.get_ident() == self._thread.ident:
            coro.close()
            raise RuntimeError("a SyncHub method was called from its own event loop's "
                               "thread; use the async client_sdk.Hub there")
        if self._closed:
            coro.close()
            raise RuntimeError("this SyncHub is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # interrupted (KeyboardInterrupt...): stop the coroutine too
            raise

    def _stop(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(_drain(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._closed = True
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        """Close the connection, stop the private loop and join its thread."""
        if self._closed:
            return
        try:
            self._run(self._hub.close())
        finally:
            self._stop()

    def __enter__(self) -> SyncHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def hub(self) -> Hub:
        """The async :class:`~client_sdk.Hub` underneath (it lives on the private loop)."""
        return self._hub

    @property
    def reconnects(self) -> int:
        return self._hub.reconnects

    # -- agents

    def ask(self, to: str, question: str, *, conversation: str,
            choices: list[str] | None = None, wait: float = MAX_WAIT_SECONDS,
            expires_in: float | None = None, op_id: str | None = None,
            default: Any = None, context: Any = None, kind: str = Kind.QUESTION,
            schema: Schema | None = None) -> Answer:
        """:meth:`client_sdk.Hub.ask`, blocking."""
        return self._run(self._hub.ask(to, question, conversation=conversation,
                                       choices=choices, wait=wait, expires_in=expires_in,
                                       op_id=op_id, default=default, context=context,
                                       kind=kind, schema=schema))

    def approve_request(self, to: str, action: Any, *, conversation: str,
                        wait: float = MAX_WAIT_SECONDS, expires_in: float | None = None,
                        op_id: str | None = None, context: Any = None) -> Answer:
        """:meth:`client_sdk.Hub.approve_request`, blocking."""
        return self._run(self._hub.approve_request(to, action, conversation=conversation,
                                                   wait=wait, expires_in=expires_in,
                                                   op_id=op_id, context=context))

    def wait(self, op_id: str, wait: float = MAX_WAIT_SECONDS, *,
             schema: type[SchemaModel] | None = None) -> Answer:
        """:meth:`client_sdk.Hub.wait`, blocking."""
        return self._run(self._hub.wait(op_id, wait, schema=schema))

    def cancel(self, op_id: str) -> Answer:
        """:meth:`client_sdk.Hub.cancel`, blocking."""
        return self._run(self._hub.cancel(op_id))

    # -- humans

    def inbox(self) -> list[Item]:
        """:meth:`client_sdk.Hub.inbox`, blocking."""
        return self._run(self._hub.inbox())

    def history(self, limit: int = 50) -> list[Answer]:
        """:meth:`client_sdk.Hub.history`, blocking."""
        return self._run(self._hub.history(limit))

    def respond(self, op_id: str, value: Any = None, *,
                status: str = Status.ANSWERED) -> Answer:
        """:meth:`client_sdk.Hub.respond`, blocking."""
        return self._run(self._hub.respond(op_id, value, status=status))

    def approve(self, op_id: str, comment: str = "") -> Answer:
        """:meth:`client_sdk.Hub.approve`, blocking."""
        return self._run(self._hub.approve(op_id, comment))

    def reject(self, op_id: str, comment: str = "") -> Answer:
        """:meth:`client_sdk.Hub.reject`, blocking."""
        return self._run(self._hub.reject(op_id, comment))

    def ping(self) -> float:
        """:meth:`client_sdk.Hub.ping`, blocking."""
        return self._run(self._hub.ping())

    # -- runs

    @contextlib.contextmanager
    def run(self, run_id: str, *, conversation: str, version: str,
            escalate_to: str | None = None) -> Iterator[SyncRun]:
        """:meth:`client_sdk.Hub.run`, blocking: ``with hub.run(...) as run:``."""
        cm = self._hub.run(run_id, conversation=conversation, version=version,
                           escalate_to=escalate_to)
        run = self._run(cm.__aenter__())
        try:
            yield SyncRun(self, run)
        except Exception as exc:
            if not self._run(cm.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        except BaseException:
            # KeyboardInterrupt & co. must not be thrown into the private loop (it would
            # stop it): tell the run it was interrupted the way async code is, cancelled
            # (the CancelledError that comes back is the one thrown in here, not ours).
            interrupted = asyncio.CancelledError()
            with contextlib.suppress(asyncio.CancelledError):
                self._run(cm.__aexit__(asyncio.CancelledError, interrupted, None))
            raise
        else:
            self._run(cm.__aexit__(None, None, None))

    def runs(self, status: str | None = None, *, limit: int = 100) -> list[RunInfo]:
        """:meth:`client_sdk.Hub.runs`, blocking."""
        return self._run(self._hub.runs(status, limit=limit))

    def pending(self) -> list[Item]:
        """:meth:`client_sdk.Hub.pending`, blocking."""
        return self._run(self._hub.pending())


class SyncRun:
    """:class:`client_sdk.Run`, blocking. Journaled functions run in the caller's thread."""

    def __init__(self, hub: SyncHub, run: Run) -> None:
        self._hub = hub
        self._inner = run

    @property
    def run_id(self) -> str:
        return self._inner.run_id

    def call(self, fn: Callable[..., Any], /, *args: Any, unsafe_to_repeat: bool = False,
             **kwargs: Any) -> Any:
        """:meth:`client_sdk.Run.call`, blocking; ``fn`` is called in this thread (an
        ``async def`` one is awaited on the private loop)."""
        run, portal = self._inner, self._hub._run
        step = portal(run._begin_call(fn, args, kwargs, unsafe_to_repeat))
        if step.done:
            return step.result
        token = _CALL_ID.set(step.call_id)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = portal(_awaited(value))
        except Exception as exc:
            portal(run._fail_call(step, exc))
            raise
        finally:
            _CALL_ID.reset(token)
        return portal(run._record_call(step, value))

    def interrupt(self, payload: Any, *, to: str, choices: list[str] | None = None,
                  wait: float = MAX_WAIT_SECONDS, expires_in: float | None = None) -> Answer:
        """:meth:`client_sdk.Run.interrupt`, blocking."""
        return self._hub._run(self._inner.interrupt(payload, to=to, choices=choices,
                                                    wait=wait, expires_in=expires_in))


async def _drain() -> None:
    """Cancel and await whatever is left on the private loop (its own tasks only)."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


async def _awaited(value: Any) -> Any:
    return await value


__all__ = ["SyncHub", "SyncRun"]
