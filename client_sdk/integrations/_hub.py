"""What the adapters share: stable op_ids, and a request with a JSON schema, waited out.

Theory of operation: an adapter turns one pending decision of a framework (a LangGraph
interrupt, an OpenAI Agents tool approval) into one hub request whose op_id is derived from
the framework's own stable ids, so a restarted agent process that finds the same decision
pending re-attaches to the same request (same op_id, same payload) instead of asking twice.
The request carries a ``schema`` describing exactly the answers the framework accepts, so the
hub's core refuses any other answer, whichever client sent it.

Until ``Hub.ask`` takes ``schema=`` (the WebSocket ``ask`` frame gains it with issue 13's
typed answers), the request is created through the HTTP API (``POST /api/requests``, which
has always taken a schema) and then waited for over the hub's WebSocket like any other.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from typing import Any

import httpx

from client_sdk.client import Hub
from client_sdk.errors import A2HError, from_frame
from client_sdk.models import Answer
from hub.protocol import MAX_WAIT_SECONDS

#: How long an adapter's request stays answerable unless told otherwise: a week. A
#: checkpointed agent may be stopped while it waits, so an open-ended request (which
#: expires shortly after nobody waits on it) would be wrong here.
DEFAULT_EXPIRES_IN = 7 * 24 * 3600.0


class HumanDecisionError(A2HError):
    """The person's decision could not be had: the request expired, was cancelled, or was
    declined where the framework has no way to say "no". ``.answer`` carries the outcome."""

    code = "no_decision"

    def __init__(self, message: str, *, answer: Answer) -> None:
        super().__init__(message, request=answer.request)
        self.answer = answer


def derived_op_id(namespace: str, *parts: str) -> str:
    """A stable op_id from a framework's ids: the same parts always give the same op_id.

    It is a SHA-256 of the parts (128 bits shown), so it carries no user text and fits the
    hub's op_id alphabet whatever the parts contain.
    """
    h = hashlib.sha256(namespace.encode())
    for part in parts:
        h.update(b"\0" + part.encode())
    return f"{namespace}-{h.hexdigest()[:32]}"


def _http_base(hub: Hub) -> str:
    url = hub.ws_url
    if url.startswith("ws"):
        url = "http" + url[2:]
    return url[: -len("/ws")] if url.endswith("/ws") else url


def _sdk_takes_schema(hub: Hub) -> bool:
    return "schema" in inspect.signature(hub.ask).parameters


async def create_with_schema(hub: Hub, *, op_id: str, to: str, question: str,
                             conversation: str, schema: dict[str, Any], context: Any,
                             expires_in: float | None) -> Answer:
    """Create the request (or re-attach to it) without waiting; its current state.

    Raises:
        Conflict: the op_id was used with a different payload.
        NotFound: no such human.
        InvalidRequest: the hub refused a field.
    """
    if _sdk_takes_schema(hub):
        ask: Any = hub.ask
        answer: Answer = await ask(to, question, conversation=conversation, op_id=op_id,
                                   schema=schema, context=context, expires_in=expires_in,
                                   wait=0)
        return answer
    body = {"op_id": op_id, "to": to, "question": question, "conversation": conversation,
            "schema": schema, "context": context, "expires_in": expires_in}
    # Private on purpose: the same token the socket uses, until the SDK sends schemas itself.
    token = hub._conn._token
    async with httpx.AsyncClient(base_url=_http_base(hub), timeout=30.0) as http:
        r = await http.post("/api/requests", json=body,
                            headers={"authorization": f"Bearer {token}"})
    payload = r.json() if r.headers.get("content-type", "").startswith("application/json") \
        else {}
    if r.status_code >= 400:
        raise from_frame(payload.get("error") or {"message": r.text[:200]})
    return Answer.from_view(payload["request"])


async def wait_resolved(hub: Hub, answer: Answer, timeout: float | None) -> Answer:
    """Wait for ``answer``'s request to resolve; the last pending Answer if ``timeout`` runs out.

    ``timeout=None`` waits as long as the request lives (its ``expires_in``).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while answer.pending:
        left = MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
        if left <= 0:
            break
        answer = await hub.wait(answer.op_id, wait=min(MAX_WAIT_SECONDS, left))
    return answer
