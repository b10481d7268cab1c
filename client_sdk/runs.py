"""Durable runs: a journal of external calls, replay without repeats (issue 6).

A :class:`client_sdk.Hub` holds a :class:`Runs` (``hub.run``, ``hub.runs``, ``hub.pending``
delegate to it); everything about runs lives in this module::

    async with hub.run("issue-42-summary", conversation="issue-42", version="1") as run:
        issue = await run.call(read_issue, 42)
        await run.interrupt({"action": "post_comment", "body": body}, to="takeru")
        comment = await run.call(post_comment, 42, body)   # uses client_sdk.call_id()
        await run.call(charge_card, order, unsafe_to_repeat=True)

Start the same run id again after a crash and the code replays from the top: calls the
journal has finished return their journaled result without being called, a call that was
in flight is called again with the same :func:`call_id` (or, if ``unsafe_to_repeat``,
stops the run with :class:`UnknownOutcome` and asks a human), and an interrupt re-attaches
to its request. ``docs/runs.md`` has the whole story.

Exceptions of runs (all :class:`~client_sdk.errors.A2HError`)::

    A2HError
    ├── UnknownOutcome     an unsafe call was in flight: a human settles it in the inbox
    ├── ReplayDivergence   the code no longer makes the calls the journal recorded
    ├── RunVersionChanged  resumed with another code version than the run started with
    ├── RunNotActive       completed, failed, needs attention, or taken over elsewhere
    ├── CallFailed         replay of a call that failed and that the code went past
    └── Rejected           a human rejected (or let expire) an interrupt (.comment)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from client_sdk._connection import REPLY_GRACE, Connection
from client_sdk.errors import (
    A2HError,
    InvalidRequest,
    Overloaded,
    RetryableError,
    UnknownOutcome,
)
from client_sdk.models import Answer, Item
from hub.protocol import MAX_JOURNAL_VALUE_BYTES, MAX_WAIT_SECONDS, Outcome, Status, T

log = logging.getLogger("a2h.sdk.runs")

_CALL_ID: contextvars.ContextVar[str] = contextvars.ContextVar("a2h_call_id")

#: How many characters of an unsafe call's arguments the inbox shows.
_ARGS_PREVIEW = 2000


def call_id() -> str:
    """The call_id of the journaled call running now: ``"<run_id>:<position>"``, the same
    on every replay. Pass it to the outside world as an idempotency key.

    Raises:
        LookupError: outside a function called through :meth:`Run.call`.
    """
    try:
        return _CALL_ID.get()
    except LookupError:
        raise LookupError("client_sdk.call_id() is only set inside a function called "
                          "through run.call()") from None


# ---------------------------------------------------------------------------- exceptions


class ReplayDivergence(A2HError):
    """The code made a different call than the journal recorded at that position (another
    function, or other arguments). The run needs attention; nothing was skipped or re-run.
    ``journal`` and ``code`` describe both sides."""

    code = "replay_divergence"

    def __init__(self, message: str, *, journal: dict[str, Any] | None = None,
                 code_side: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.journal = journal or {}
        self.code_side = code_side or {}


class RunVersionChanged(A2HError):
    """The run started with another code version; it is marked ``needs_attention``."""

    code = "run_version_changed"

    def __init__(self, message: str, *, old: str | None = None, new: str | None = None) -> None:
        super().__init__(message)
        self.old = old
        self.new = new


class RunNotActive(A2HError):
    """The run cannot make progress here: it is ``completed`` or ``failed`` (start a new
    run id), ``needs_attention``, or another process started it again (``superseded``)."""

    code = "run_not_active"

    def __init__(self, message: str, *, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class CallFailed(A2HError):
    """Replay of a call whose function raised, and that the code got past the first time
    (it caught the error). ``error_type`` and ``error`` are what was journaled."""

    code = "call_failed"

    def __init__(self, message: str, *, error_type: str = "", error: str = "",
                 call_id: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error = error
        self.call_id = call_id


class Rejected(A2HError):
    """A human rejected an interrupt (or it expired or was cancelled). ``comment`` is the
    human's comment, ``answer`` the whole resolution."""

    code = "rejected"

    def __init__(self, message: str, *, answer: Answer | None = None) -> None:
        super().__init__(message)
        self.answer = answer
        self.comment = answer.comment if answer is not None else ""
        self.status = answer.status if answer is not None else ""


# ---------------------------------------------------------------------------- helpers


def _stable(obj: Any) -> str:
    # An argument JSON cannot show (a client, a connection) counts by its type only: its
    # repr would differ between processes and every replay would look like a divergence.
    return f"<{type(obj).__module__}.{type(obj).__qualname__}>"


def args_hash(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The hash that tells whether a replayed call has the journaled arguments."""
    blob = orjson.dumps([list(args), kwargs], default=_stable,
                        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(blob).hexdigest()[:32]


def _preview(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    value: Any = {"args": list(args), "kwargs": kwargs} if kwargs else list(args)
    try:
        text = orjson.dumps(value, default=repr, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return repr(value)[:_ARGS_PREVIEW]
    if len(text) > _ARGS_PREVIEW:
        return text[:_ARGS_PREVIEW].decode(errors="ignore") + " …"
    return orjson.loads(text)


def function_name(fn: Callable[..., Any]) -> str:
    """The name a call is journaled under (compared on replay)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return str(name)[:200]


def _encode_result(fn_name: str, value: Any) -> bytes:
    try:
        blob = orjson.dumps(value)
    except TypeError as exc:
        raise TypeError(f"run.call({fn_name}): the result is not JSON-serialisable, so it "
                        f"cannot be journaled: {exc}. Return plain JSON (dict, list, str, "
                        "number, bool, None).") from None
    if len(blob) > MAX_JOURNAL_VALUE_BYTES:
        raise ValueError(f"run.call({fn_name}): the result is {len(blob)} bytes of JSON; a "
                         f"journaled result may have at most {MAX_JOURNAL_VALUE_BYTES}")
    return blob


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RunInfo:
    """A run as :meth:`client_sdk.Hub.runs` lists it."""

    run_id: str
    conversation: str
    version: str
    status: str
    reason: str | None
    agent: str
    calls: int
    created_at: float
    updated_at: float
    finished_at: float | None
    escalate_to: str | None = None
    view: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_view(cls, v: dict[str, Any]) -> RunInfo:
        return cls(run_id=v["run_id"], conversation=v["conversation"], version=v["version"],
                   status=v["status"], reason=v.get("reason"), agent=v.get("agent", ""),
                   calls=int(v.get("calls") or 0), created_at=v["created_at"],
                   updated_at=v["updated_at"], finished_at=v.get("finished_at"),
                   escalate_to=v.get("escalate_to"), view=v)


@dataclass(frozen=True, slots=True)
class _Step:
    """A journaled call under way: where it is, and its journaled result if done."""

    position: int
    name: str
    call_id: str
    done: bool = False
    result: Any = None


class Run:
    """One execution of a durable run (made by :meth:`client_sdk.Hub.run`)."""

    def __init__(self, runs: Runs, run_id: str, conversation: str, version: str,
                 exec_id: str) -> None:
        self._runs = runs
        self.run_id = run_id
        self.conversation = conversation
        self.version = version
        self._exec = exec_id
        self._next = 0
        self._closed = False

    def _position(self) -> int:
        if self._closed:
            raise InvalidRequest(f"run {self.run_id!r} is over: use it inside its "
                                 "`async with hub.run(...)` block")
        pos = self._next
        self._next += 1
        return pos

    async def call(self, fn: Callable[..., Any], /, *args: Any, unsafe_to_repeat: bool = False,
                   **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` once per run, journaled.

        The hub commits the call as ``running`` before ``fn`` starts; inside ``fn``,
        :func:`call_id` gives its stable ID. On replay a finished call returns its
        journaled result without calling ``fn``. The value returned is always the JSON
        the journal holds (a tuple comes back as a list, on the first run as on replays).

        Args:
            fn: a function or coroutine function.
            unsafe_to_repeat: if the process dies while ``fn`` runs, do not call it again
                on replay: stop with :class:`UnknownOutcome` and let a human decide.

        Raises:
            TypeError: the result is not JSON-serialisable (the call is journaled failed).
            UnknownOutcome: an unsafe call was in flight when the run stopped.
            ReplayDivergence: the journal has another call at this position.
            CallFailed: replay of a failure the code went past the first time.
            RunNotActive: the run cannot make progress here.
            Whatever ``fn`` raises (journaled as failed, then re-raised).
        """
        step = await self._begin_call(fn, args, kwargs, unsafe_to_repeat)
        if step.done:
            return step.result
        token = _CALL_ID.set(step.call_id)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            await self._fail_call(step, exc)
            raise
        finally:
            _CALL_ID.reset(token)
        return await self._record_call(step, value)

    # The three steps of a call, apart so that SyncRun can run ``fn`` in its caller's
    # thread between them (one implementation of the journal protocol, not two).

    async def _begin_call(self, fn: Callable[..., Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any], unsafe: bool) -> _Step:
        pos = self._position()
        name = function_name(fn)
        cid = f"{self.run_id}:{pos}"
        frame: dict[str, Any] = {
            "type": T.RUN_CALL, "run_id": self.run_id, "exec": self._exec, "position": pos,
            "name": name, "args_hash": args_hash(args, kwargs), "unsafe": unsafe,
        }
        if unsafe:
            frame["args"] = _preview(args, kwargs)  # shown in the inbox if it gets unknown
        reply = await self._runs.frame(frame)
        outcome = reply.get("outcome")
        if outcome == Outcome.DONE:
            return _Step(pos, name, cid, done=True, result=reply.get("result"))
        if outcome != Outcome.RUN:
            raise _outcome_error(reply, cid)
        return _Step(pos, name, cid)

    async def _fail_call(self, step: _Step, exc: BaseException) -> None:
        await self._finish(step.position, ok=False, error={"type": type(exc).__qualname__,
                                                           "message": str(exc)[:2000]})

    async def _record_call(self, step: _Step, value: Any) -> Any:
        try:
            blob = _encode_result(step.name, value)
        except (TypeError, ValueError) as exc:
            await self._fail_call(step, exc)
            raise
        await self._finish(step.position, ok=True, result=orjson.Fragment(blob))
        return orjson.loads(blob)

    async def _finish(self, pos: int, *, ok: bool, result: Any = None,
                      error: Any = None) -> None:
        reply = await self._runs.frame({
            "type": T.RUN_RESULT, "run_id": self.run_id, "exec": self._exec, "position": pos,
            "ok": ok, "result": result, "error": error})
        if reply.get("outcome") != Outcome.RECORDED:
            raise _outcome_error(reply, f"{self.run_id}:{pos}")

    async def interrupt(self, payload: Any, *, to: str, choices: list[str] | None = None,
                        wait: float = MAX_WAIT_SECONDS, expires_in: float | None = None) -> Answer:
        """Put an approval (or, with ``choices``, a question) in ``to``'s inbox and wait for
        the answer, across restarts of the agent and of the hub.

        Args:
            payload: what to approve: a string (Markdown) or any JSON, shown in the inbox.
            to: the human's handle.
            choices: make it a question with these answers instead of an approval.
            wait: seconds per round trip (the SDK keeps waiting; this bounds one frame).
            expires_in: seconds the request stays answerable (default: 24 hours).

        Returns:
            The :class:`Answer` (``.approved``, ``.comment``, ``.value``, ``.actor``).

        Raises:
            Rejected: the human rejected it (``.comment``), or it expired or was cancelled.
            ReplayDivergence: the journal has something else at this position.
        """
        pos = self._position()
        cid = f"{self.run_id}:{pos}"
        size = len(orjson.dumps(payload))
        if size > MAX_JOURNAL_VALUE_BYTES:
            raise InvalidRequest(f"interrupt payload is {size} bytes of JSON; at most "
                                 f"{MAX_JOURNAL_VALUE_BYTES}")
        frame: dict[str, Any] = {
            "type": T.RUN_INTERRUPT, "run_id": self.run_id, "exec": self._exec,
            "position": pos, "payload": payload, "to": to, "choices": choices,
            "wait": min(max(wait, 0.0), MAX_WAIT_SECONDS), "expires_in": expires_in,
        }
        while True:
            reply = await self._runs.frame(frame, timeout=frame["wait"] + REPLY_GRACE)
            outcome = reply.get("outcome")
            if outcome == Outcome.PENDING:
                continue
            if outcome != Outcome.DONE:
                raise _outcome_error(reply, cid)
            answer = Answer.from_view(reply["result"])
            if answer.status == Status.ANSWERED and (choices is not None or answer.approved):
                return answer
            who = answer.actor or "the hub"
            what: dict[str, str] = {Status.DECLINED: "rejected", Status.EXPIRED: "expired",
                                    Status.CANCELLED: "cancelled"}
            msg = f"interrupt {cid} was {what.get(answer.status, answer.status)} by {who}"
            if answer.comment:
                msg += f": {answer.comment}"
            raise Rejected(msg, answer=answer)


def _outcome_error(reply: dict[str, Any], cid: str) -> A2HError:
    outcome = reply.get("outcome")
    message = str(reply.get("message") or outcome)
    if outcome == Outcome.UNKNOWN:
        exc = UnknownOutcome(message)
        exc.op_id = reply.get("op_id")
        exc.call_id = cid
        return exc
    if outcome == Outcome.DIVERGED:
        return ReplayDivergence(message, journal=reply.get("journal"),
                                code_side=reply.get("code"))
    if outcome == Outcome.FAILED:
        err = reply.get("error") or {}
        etype = str(err.get("type", "")) if isinstance(err, dict) else ""
        emsg = str(err.get("message", "")) if isinstance(err, dict) else str(err)
        return CallFailed(f"call {cid} failed the first time ({etype}: {emsg}); replaying "
                          "that failure", error_type=etype, error=emsg, call_id=cid)
    if outcome == Outcome.VERSION_CHANGED:
        return RunVersionChanged(message, old=reply.get("old"), new=reply.get("new"))
    if outcome == Outcome.NOT_ACTIVE:
        return RunNotActive(message, status=reply.get("status"))
    return A2HError(f"unexpected reply to a run frame: {reply!r}")


#: Exceptions that leave a run resumable (interrupted, not failed): the run stays as the
#: hub has it (active, or needs_attention) and can be started again.
_RESUMABLE = (UnknownOutcome, ReplayDivergence, RunVersionChanged, RunNotActive,
              RetryableError, Overloaded)


class Runs:
    """The run and journal methods of :class:`client_sdk.Hub` (it holds one of these)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def frame(self, frame: dict[str, Any], timeout: float = REPLY_GRACE,
                    reconnect_timeout: float = 120.0) -> dict[str, Any]:
        """Send a run frame; across a dropped socket or a rate limit, send it again.

        Every run frame is safe to repeat: the hub fences by execution and position, so a
        re-sent frame finds its own earlier effect (``running`` by this execution, the same
        result, the same request) instead of making a second one.
        """
        return await self._conn.call_retrying(frame, timeout, retry_timeout=reconnect_timeout)

    @contextlib.asynccontextmanager
    async def run(self, run_id: str, *, conversation: str, version: str,
                  escalate_to: str | None = None) -> AsyncIterator[Run]:
        """Start (or resume) the durable run ``run_id``.

        Args:
            run_id: the run's name in this tenant; start it again with the same id to
                resume after a crash.
            conversation: where its interrupts and inbox items go.
            version: the code version; resuming with another one fails.
            escalate_to: the human who settles unknown outcomes (default: the human of
                the run's last interrupt, else the tenant's only human).

        Raises:
            RunVersionChanged: the run started with another version (it needs attention).
            RunNotActive: the run already completed or failed.

        Leaving the block normally completes the run. An exception fails it, except the
        ones that leave it resumable: :class:`UnknownOutcome`, :class:`ReplayDivergence`,
        :class:`RunVersionChanged`, :class:`RunNotActive`, connection and retryable
        errors, and cancellation.
        """
        reply = await self.frame({"type": T.RUN_BEGIN, "run_id": run_id,
                                  "conversation": conversation, "version": version,
                                  "escalate_to": escalate_to})
        if reply.get("outcome") != Outcome.STARTED:
            raise _outcome_error(reply, run_id)
        run = Run(self, run_id, conversation, version, str(reply["exec"]))
        try:
            yield run
        except _RESUMABLE:
            run._closed = True
            raise
        except Exception as exc:
            run._closed = True
            with contextlib.suppress(A2HError):
                await self.frame({"type": T.RUN_END, "run_id": run_id, "exec": run._exec,
                                  "ok": False, "error": f"{type(exc).__qualname__}: {exc}"})
            raise
        except BaseException:  # cancelled or exiting: interrupted, resumable
            run._closed = True
            raise
        run._closed = True
        end = await self.frame({"type": T.RUN_END, "run_id": run_id, "exec": run._exec,
                                "ok": True, "calls": run._next})
        if end.get("outcome") != Outcome.RECORDED:
            raise _outcome_error(end, run_id)

    async def runs(self, status: str | None = None, *, limit: int = 100) -> list[RunInfo]:
        """The runs of this tenant, most recently changed first.

        Args:
            status: only ``active``, ``completed``, ``failed`` or ``needs_attention``
                (:class:`hub.protocol.RunStatus`).
        """
        reply = await self._conn.call_retrying({"type": T.RUN_LIST, "status": status,
                                                "limit": limit})
        return [RunInfo.from_view(v) for v in reply["runs"]]

    async def pending(self) -> list[Item]:
        """Open requests (agent tokens): those this agent sent, plus every open interrupt
        and unknown-outcome item of its tenant's runs. Read from the store, so it holds
        across restarts of the hub and of the agent. (A human lists theirs with
        :meth:`~client_sdk.Hub.inbox`.)"""
        reply = await self._conn.call_retrying({"type": T.RUN_PENDING})
        return [Item.from_view(v) for v in reply["items"]]
