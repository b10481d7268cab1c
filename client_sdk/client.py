"""The async client: one multiplexed WebSocket per :class:`Hub`, reconnect with resume.

:class:`Hub` is the public face; the socket, its supervisor task and the retry policy live
in :mod:`client_sdk._connection` (its docstring has the theory of operation), and runs in
:class:`client_sdk.runs.Runs`, which the hub holds. In short: ``ask`` and ``wait`` survive
a dropped socket by re-sending the same op_id after the reconnect (a re-attach, never a
second request); ``respond``, ``inbox``, ``history``, ``ping`` and run frames are safe to
repeat and are re-sent too; ``cancel`` raises :class:`ConnectionLost`. All of them wait
out a ``rate_limited`` answer except ``cancel``, which raises :class:`RateLimited`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import orjson

from client_sdk._connection import Connection
from client_sdk.errors import A2HError
from client_sdk.models import Answer, Item
from client_sdk.runs import Run, RunInfo, Runs
from hub.protocol import MAX_WAIT_SECONDS, Kind, Status, T, fresh_op_id


def new_op_id() -> str:
    """A fresh op_id: the time, then 128 random bits (``hub.protocol.fresh_op_id``)."""
    return fresh_op_id(time.time(), secrets.token_hex(16))


class SchemaModel(Protocol):
    """A class that describes a typed answer: a pydantic v2 model (duck-typed, so the SDK
    does not depend on pydantic)."""

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Any: ...


#: What ``schema=`` takes: a JSON Schema dict, or a class with ``model_json_schema()``.
Schema = dict[str, Any] | type[SchemaModel]


def _schema_parts(schema: Schema | None) -> tuple[dict[str, Any] | None, type[SchemaModel] | None]:
    """(the JSON schema to send, the class to build the answer with)."""
    if schema is None or isinstance(schema, dict):
        return schema, None
    return schema.model_json_schema(), schema


def _typed(answer: Answer, model: type[SchemaModel] | None) -> Answer:
    """An answered request's value as an instance of ``model`` (``request["value"]`` keeps
    the JSON). Declined, expired, cancelled and pending answers are left as they are."""
    if model is None or answer.status != Status.ANSWERED:
        return answer
    return dataclasses.replace(answer, value=model.model_validate(answer.value))


class Hub:
    """A connection to an A2H hub.

    Args:
        url: the hub's base URL, e.g. ``http://127.0.0.1:8000``; or several (nodes of one
            hub sharing a store): the client connects to the first that answers and fails
            over to the next one when its socket drops, re-attaching every wait.
        token: an agent token (to ask) or a human token (to answer).
        reconnect: reconnect with jittered backoff when the socket drops. It keeps trying
            for as long as the client is open; only a refused or revoked token stops it.
        max_backoff: the longest pause between reconnect attempts, seconds.
        open_timeout: how long one connection attempt may take, seconds.
        retry_timeout: how long a call keeps retrying across reconnects and rate limits
            (for ``ask``/``wait``: beyond their ``wait``) before it raises, seconds.
    """

    def __init__(self, url: str | Sequence[str], token: str, *, reconnect: bool = True,
                 max_backoff: float = 5.0, open_timeout: float = 10.0,
                 retry_timeout: float = 30.0) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        self._conn = Connection(urls, token, reconnect=reconnect, max_backoff=max_backoff,
                                open_timeout=open_timeout, retry_timeout=retry_timeout)
        self._runs = Runs(self._conn)

    @property
    def ws_url(self) -> str:
        """The WebSocket URL in use (or last used)."""
        return self._conn.ws_url

    @property
    def urls(self) -> list[str]:
        """Every WebSocket URL this client may connect to, in failover order."""
        return list(self._conn.urls)

    @property
    def hello(self) -> dict[str, Any]:
        """The hub's ``hello`` frame on the current connection."""
        return self._conn.hello

    @property
    def reconnects(self) -> int:
        """How many times the client reconnected."""
        return self._conn.reconnects

    @property
    def _fatal(self) -> A2HError | None:
        return self._conn.fatal

    # -- lifecycle

    async def __aenter__(self) -> Hub:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the socket (the URLs in order, until one answers).

        Raises:
            AccessDenied: the hub refused the token.
            ConnectionLost: no URL could be reached.
        """
        await self._conn.connect()

    async def close(self) -> None:
        """Close the socket and stop reconnecting; calls in flight raise ConnectionLost."""
        await self._conn.close()

    async def _request(self, frame: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Send a raw frame once (tests, tools): a dropped socket is ConnectionLost."""
        return await self._conn.call_once(frame, timeout)

    # -- agents

    async def ask(self, to: str, question: str, *, conversation: str,
                  choices: list[str] | None = None, wait: float = MAX_WAIT_SECONDS,
                  expires_in: float | None = None, op_id: str | None = None,
                  default: Any = None, context: Any = None,
                  kind: str = Kind.QUESTION, schema: Schema | None = None) -> Answer:
        """Ask a human and block up to ``wait`` seconds for the answer.

        Across a dropped socket (or a failover to another URL) the same op_id is sent
        again: the hub re-attaches, never creates a second request.

        Args:
            schema: a typed answer: a JSON Schema dict (the subset in docs/protocol.md), or
                a class with ``model_json_schema()`` (a pydantic v2 model). The inbox shows
                a form, the hub refuses answers that do not match (``invalid``), and with a
                class the answer's ``value`` is an instance of it (``model_validate``).

        Returns:
            The :class:`Answer`; ``status == "pending"`` when ``wait`` ran out first
            (re-attach with :meth:`wait`, passing the same ``schema`` class).

        Raises:
            Overloaded: the room is full (never retried automatically).
            Conflict: ``op_id`` was used before with a different payload.
            NotFound: no such human.
            ConnectionLost: the hub could not be reached within ``wait`` + ``retry_timeout``.
        """
        frame: dict[str, Any] = {
            "type": T.ASK, "op_id": op_id or new_op_id(), "to": to, "question": question,
            "conversation": conversation, "kind": kind, "choices": choices,
            "context": context, "default": default, "wait": wait, "expires_in": expires_in,
        }
        json_schema, model = _schema_parts(schema)
        if json_schema is not None:
            frame["schema"] = json_schema
        return _typed(await self._attach(frame, wait), model)

    async def approve_request(self, to: str, action: Any, *, conversation: str,
                              wait: float = MAX_WAIT_SECONDS, expires_in: float | None = None,
                              op_id: str | None = None, context: Any = None) -> Answer:
        """Ask a human to approve ``action`` (a string or JSON shown in the inbox)."""
        question = action if isinstance(action, str) else \
            "Approve?\n\n```json\n" + orjson.dumps(action, option=orjson.OPT_INDENT_2).decode() + "\n```"
        return await self.ask(to, question, conversation=conversation, wait=wait,
                              expires_in=expires_in, op_id=op_id, context=context,
                              kind=Kind.APPROVAL)

    async def wait(self, op_id: str, wait: float = MAX_WAIT_SECONDS, *,
                   schema: type[SchemaModel] | None = None) -> Answer:
        """Re-attach to a request and block up to ``wait`` seconds for its resolution;
        with ``schema`` (the class given to :meth:`ask`) the value is an instance of it."""
        answer = await self._attach({"type": T.WAIT, "op_id": op_id, "wait": wait}, wait)
        return _typed(answer, schema)

    async def _attach(self, frame: dict[str, Any], wait: float) -> Answer:
        view = await self._conn.attach(frame, wait)
        if view.get("status") == Status.PENDING:
            return Answer(status=Status.PENDING, op_id=frame["op_id"], request=view)
        return Answer.from_view(view)

    async def cancel(self, op_id: str) -> Answer:
        """Cancel a pending request.

        Raises:
            AlreadyResolved: too late; ``.answer`` carries the resolution.
            ConnectionLost: the socket dropped before the hub answered (not re-sent: a
                second cancel would report the first one's success as AlreadyResolved).
            RateLimited: slow down; ``.retry_after`` says for how long.
        """
        reply = await self._conn.call_once({"type": T.CANCEL, "op_id": op_id})
        return Answer.from_view(reply["request"])

    # -- humans

    async def inbox(self) -> list[Item]:
        """The pending requests addressed to this human, nearest deadline first."""
        reply = await self._conn.call_retrying({"type": T.INBOX})
        return [Item.from_view(v) for v in reply["items"]]

    async def history(self, limit: int = 50) -> list[Answer]:
        """This human's resolved requests, most recent first."""
        reply = await self._conn.call_retrying({"type": T.HISTORY, "limit": limit})
        return [Answer.from_view(v) for v in reply["items"]]

    async def respond(self, op_id: str, value: Any = None, *,
                      status: str = Status.ANSWERED) -> Answer:
        """Answer a request addressed to this human.

        Safe across a dropped socket: the same answer by the same person is re-sent after
        the reconnect, and the hub returns it if the first one had committed.

        Raises:
            AlreadyResolved: someone (or something) resolved it first; ``.answer`` has it.
            NotFound: no such request for this human.
        """
        reply = await self._conn.call_retrying({"type": T.RESPOND, "op_id": op_id,
                                                "value": value, "status": status})
        return Answer.from_view(reply["request"])

    async def approve(self, op_id: str, comment: str = "") -> Answer:
        """Approve an approval request, with an optional comment."""
        return await self.respond(op_id, {"approved": True, "comment": comment})

    async def reject(self, op_id: str, comment: str = "") -> Answer:
        """Reject an approval request, with an optional comment."""
        return await self.respond(op_id, {"approved": False, "comment": comment},
                                  status=Status.DECLINED)

    async def inbox_events(self) -> AsyncIterator[dict[str, Any]]:
        """Live ``inbox.add`` / ``inbox.remove`` frames for this human.

        Raises:
            A2HError: the connection's final error (closed, token revoked).
        """
        q = await self._conn.inbox_frames()
        try:
            while True:
                frame = await q.get()
                if frame is None:
                    raise self._conn.fatal or A2HError("connection closed")
                yield frame
        finally:
            self._conn.drop_inbox_queue(q)

    async def ping(self) -> float:
        """A round trip to the hub; returns the hub's clock."""
        reply = await self._conn.call_retrying({"type": T.PING})
        return float(reply.get("now", 0.0))

    # -- runs (client_sdk.runs)

    def run(self, run_id: str, *, conversation: str, version: str,
            escalate_to: str | None = None) -> contextlib.AbstractAsyncContextManager[Run]:
        """Start (or resume) the durable run ``run_id``: see :meth:`Runs.run`."""
        return self._runs.run(run_id, conversation=conversation, version=version,
                              escalate_to=escalate_to)

    async def runs(self, status: str | None = None, *, limit: int = 100) -> list[RunInfo]:
        """The runs of this tenant, most recently changed first: see :meth:`Runs.runs`."""
        return await self._runs.runs(status, limit=limit)

    async def pending(self) -> list[Item]:
        """Open requests of this agent and its tenant's runs: see :meth:`Runs.pending`."""
        return await self._runs.pending()
