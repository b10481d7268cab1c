"""The MCP tools, on either transport: ``ask_human``, ``request_approval``,
``request_permission``.

Imported only when the ``mcp`` package is installed (``pip install 'a2h-hub[mcp]'``):
``hub/server/mcp.py`` serves these tools over streamable HTTP at ``/mcp`` inside the hub,
``hub/mcp_stdio.py`` over stdio (``a2h mcp``) through the SDK. Both plug a :class:`Bridge`
into :func:`build_server`; everything about the tools themselves lives here, once.

Theory of operation
-------------------
A tool call is an ask that blocks until the person resolves it. MCP clients retry a call
(a lost response, a restarted client) by sending the same tool and arguments again, so the
op_id is *derived*, never random — the approach of ``/v1/chat/completions``::

    op_id = HMAC-SHA256(key = the caller's secret, msg = tool | canonical arguments
                        | conversation | generation)[:128 bits]

Keyed by a secret of the token (its hash in the hub, the token itself over stdio), op_ids
are unguessable and scoped to the token. The same call re-attaches to its request while it
is pending and for a while after it resolved (``REATTACH_WINDOW`` for questions,
``APPROVAL_REATTACH_WINDOW`` for approvals, so an approval is not silently reused for a
later identical action); a cancelled request is never re-attached. Otherwise the next
*generation* of the op_id asks anew.

While it blocks, the call sends an MCP progress notification every ``progress_interval``
seconds (15 by default, of the bridge's clock), so clients with a 60 s request timeout
stay alive; each wait is a re-attach, which keeps an open-ended question alive while its
caller waits. A call the client cancels (``notifications/cancelled``, or a closed stream
on 2026-07-28 connections) cancels the request — except while the server itself shuts
down, when the request stays open for the client's retry.

MCP Tasks (``io.modelcontextprotocol/tasks``): the ``mcp`` package 2.x removed its
experimental tasks runtime and does not implement the tasks extension, so long waits run
as ordinary blocking calls kept alive by progress notifications.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Protocol

import anyio
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from hub.errors import HubError, NotFound
from hub.protocol import MAX_WAIT_SECONDS, Kind, Status, check_name, is_name
from hub.records import record

log = logging.getLogger("a2h.mcp")

#: Seconds after a question resolved during which the same call re-attaches to it.
REATTACH_WINDOW = 600.0
#: The same for approvals: short, so a later identical action is asked about again.
APPROVAL_REATTACH_WINDOW = 60.0
#: How many generations of a derived op_id are tried before falling back to a fresh one.
MAX_GENERATIONS = 100
#: Seconds one wait blocks in the hub (each re-attach extends an open-ended deadline).
BLOCK_WAIT = MAX_WAIT_SECONDS
#: How long a cancel of an abandoned call may take before it is given up.
CANCEL_TIMEOUT = 5.0

View = dict[str, Any]


class Backend(Protocol):
    """One caller's way to the hub: the hub itself, or the SDK over a WebSocket."""

    #: the HMAC key for derived op_ids: a secret of the caller's token
    secret: bytes

    async def humans(self) -> list[str]:
        """The handles of the caller's tenant."""

    async def ask(self, spec: AskSpec, op_id: str) -> View:
        """Ask (or re-attach) and return once the hub committed it: the request's view.

        Raises:
            HubError: what the hub answered.
        """

    async def wait(self, op_id: str, wait: float) -> View:
        """Re-attach and block up to ``wait`` seconds; the view may still be pending."""

    async def cancel(self, op_id: str) -> None:
        """Cancel a pending request (a resolved one is left as it is)."""

    def now(self) -> float:
        """The hub's time (seconds since the epoch)."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of the backend's clock."""


class Bridge(Protocol):
    """What a transport gives the tools."""

    progress_interval: float
    #: True once the server shuts down: cancelled calls then leave their requests open
    closing: bool

    async def backend(self, ctx: Context) -> Backend:
        """The caller's backend (in the hub: from the request's bearer token)."""

    def default_conversation(self, ctx: Context) -> str:
        """One conversation per MCP session."""

    def default_to(self, ctx: Context) -> str | None:
        """The person to ask when a call names none (``A2H_TO``, header ``X-A2H-To``)."""


@record
class AskSpec:
    """One tool call, decoded: what the hub is asked."""

    tool: str
    to: str
    question: str
    conversation: str
    kind: Kind = Kind.QUESTION
    choices: tuple[str, ...] | None = None
    context: Any = None
    expires_in: float | None = None
    #: extra identity of the call (Claude Code's tool_use_id), part of the derived op_id
    nonce: str | None = None

    def frame(self, op_id: str, wait: float) -> dict[str, Any]:
        """The ``ask`` as a wire frame's fields (``hub.protocol.parse_ask`` checks them)."""
        return {"op_id": op_id, "to": self.to, "question": self.question,
                "conversation": self.conversation, "kind": self.kind.value,
                "choices": list(self.choices) if self.choices is not None else None,
                "context": self.context, "wait": wait, "expires_in": self.expires_in}

    def key(self) -> bytes:
        """What makes two calls "the same call"."""
        return orjson.dumps([self.tool, self.to, self.conversation, self.kind.value,
                             self.question, self.choices, self.context, self.expires_in,
                             self.nonce], option=orjson.OPT_SORT_KEYS)

    @property
    def reattach_window(self) -> float:
        return APPROVAL_REATTACH_WINDOW if self.kind is Kind.APPROVAL else REATTACH_WINDOW


def derive_op_id(secret: bytes, key: bytes, generation: int = 0) -> str:
    """128 bits of HMAC-SHA256: unguessable, scoped to the caller's token."""
    msg = b"mcp\x00" + key + b"\x00" + str(generation).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()[:32]


def _reusable(view: View, now: float, window: float) -> bool:
    """May a call re-attach to this existing request?"""
    status = view.get("status")
    if status == Status.PENDING:
        return True
    if status == Status.CANCELLED:
        return False
    resolved_at = view.get("resolved_at")
    return isinstance(resolved_at, (int, float)) and now - resolved_at <= window


async def submit(backend: Backend, spec: AskSpec) -> View:
    """Ask under the first derived op_id that is free or re-attachable."""
    key = spec.key()
    for gen in range(MAX_GENERATIONS):
        view = await backend.ask(spec, derive_op_id(backend.secret, key, gen))
        if _reusable(view, backend.now(), spec.reattach_window):
            return view
    return await backend.ask(spec, derive_op_id(backend.secret, key + os.urandom(16)))


async def block(backend: Backend, view: View, interval: float,
                tick: Callable[[], Awaitable[None]]) -> View:
    """Re-attach until the request resolves; ``tick()`` every ``interval`` seconds of the
    backend's clock while it has not."""
    op_id = view["op_id"]
    while view.get("status") == Status.PENDING:
        waiter = asyncio.ensure_future(backend.wait(op_id, BLOCK_WAIT))
        try:
            while not waiter.done():
                ticker = asyncio.ensure_future(backend.sleep(interval))
                try:
                    await asyncio.wait({waiter, ticker}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ticker.cancel()
                if not waiter.done():
                    await tick()
        finally:
            if not waiter.done():
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
        view = waiter.result()
    return view


async def run_call(bridge: Bridge, backend: Backend, spec: AskSpec, ctx: Context) -> View:
    """Ask, block with progress, and cancel the request if the call is cancelled."""
    try:
        view = await submit(backend, spec)
    except NotFound as exc:
        raise ToolError(f"{exc.message}; {await _people(backend)}") from None
    except HubError as exc:
        raise ToolError(f"{exc.code.value}: {exc.message}") from None
    started = backend.now()
    op_id = view["op_id"]

    async def tick() -> None:
        waited = backend.now() - started
        await ctx.report_progress(waited, None,
                                  f"waiting for {spec.to} to answer ({waited:.0f} s)")

    try:
        return await block(backend, view, bridge.progress_interval, tick)
    except HubError as exc:
        raise ToolError(f"{exc.code.value}: {exc.message}") from None
    except BaseException:
        if not bridge.closing:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
                try:
                    await backend.cancel(op_id)
                    log.info("op=%s cancelled by the MCP client", op_id)
                except Exception as exc:  # resolved meanwhile, or the hub went away
                    log.info("op=%s not cancelled: %s", op_id, exc)
        raise


async def _people(backend: Backend) -> str:
    humans = await backend.humans()
    if not humans:
        return "this tenant has no people yet"
    return "the people here are: " + ", ".join(sorted(humans))


async def _addressee(bridge: Bridge, ctx: Context, backend: Backend, to: str | None) -> str:
    to = to if to is not None else bridge.default_to(ctx)
    if to is not None:
        return _checked("to", to)
    humans = await backend.humans()
    if len(humans) == 1:
        return humans[0]
    if not humans:
        raise ToolError("this tenant has no people to ask yet (create a human token first)")
    raise ToolError("this tenant has several people; say whom to ask with 'to', one of: "
                    + ", ".join(sorted(humans)))


def _checked(what: str, value: str) -> str:
    try:
        return check_name(what, value)
    except HubError as exc:
        raise ToolError(exc.message) from None


def _conversation(bridge: Bridge, ctx: Context, conversation: str | None) -> str:
    if conversation is not None:
        return _checked("conversation", conversation)
    return bridge.default_conversation(ctx)


def session_conversation(session: str | None, fallback: str) -> str:
    """``mcp:<session>``: one conversation per MCP session (a name-safe form of it)."""
    raw = session or fallback
    if not is_name("mcp:" + raw):
        raw = hashlib.sha256(raw.encode()).hexdigest()[:32]
    return "mcp:" + raw


# ---------------------------------------------------------------------------- results


class AnswerOut(BaseModel):
    """The structured content of an answer."""

    status: str = Field(description="answered, declined, expired or cancelled")
    value: Any = Field(description="the person's answer (text, a choice, or JSON); for "
                       "approvals {approved, comment}")
    actor: str | None = Field(description="who resolved it: human:<handle> or system")
    op_id: str = Field(description="the request's op_id in the hub")


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _comment(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get("comment"), str):
        return str(value["comment"])
    return value if isinstance(value, str) else ""


def answer_text(view: View) -> str:
    status, value, to = view.get("status"), view.get("value"), view.get("to", "the person")
    approval = view.get("kind") == Kind.APPROVAL
    comment = _comment(value)
    if status == Status.ANSWERED:
        if approval:
            return f"Approved by {to}" + (f": {comment}" if comment else ".")
        return _text_of(value)
    if status == Status.DECLINED:
        verb = "Rejected by" if approval else "Declined by"
        return f"{verb} {to}" + (f": {comment}" if comment else ".")
    if status == Status.EXPIRED:
        return f"{to} did not answer in time: the request expired."
    return "The request was cancelled."


def answer_result(view: View) -> CallToolResult:
    out = AnswerOut(status=view["status"], value=view.get("value"), actor=view.get("actor"),
                    op_id=view["op_id"])
    return CallToolResult(content=[TextContent(type="text", text=answer_text(view))],
                          structured_content=out.model_dump(), is_error=False)


def permission_decision(view: View) -> dict[str, Any]:
    """Claude Code's ``--permission-prompt-tool`` answer."""
    if view.get("status") == Status.ANSWERED:
        ctx = view.get("context") if isinstance(view.get("context"), dict) else {}
        return {"behavior": "allow", "updatedInput": (ctx or {}).get("input", {})}
    comment = _comment(view.get("value"))
    if not comment:
        comment = answer_text(view) if view.get("status") != Status.DECLINED else \
            f"{view.get('to', 'the person')} denied this without a comment."
    return {"behavior": "deny", "message": comment}


def _json_block(value: Any) -> str:
    return "```json\n" + orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n```"


# ---------------------------------------------------------------------------- the server

ASK_HUMAN = """Ask a person a question and wait for their answer.

Use this when you need information, a decision or a judgement call that only a person
can give. The question appears in their A2H inbox; this call blocks until they answer
(it can take minutes or hours; progress notifications keep the call alive).
Returns the answer as text, and as structured content {status, value, actor, op_id}:
status is "answered" (value is their answer), "declined", "expired" or "cancelled".
Calling again with the same arguments re-attaches to the same question (never a second
one), so it is safe to retry."""

REQUEST_APPROVAL = """Ask a person to approve or reject an action before you take it.

Describe the action in one line (e.g. "Deploy build 142 to production"); put what the
person needs to decide in details (text or JSON). The call blocks until they decide.
Returns "Approved by ..." or "Rejected by ..." with their comment, and structured content
{status, value: {approved, comment}, actor, op_id}. Only proceed when status is
"answered" and value.approved is true."""

REQUEST_PERMISSION = """Ask a person whether a tool call may run (for Claude Code's
--permission-prompt-tool). Input: the tool's name and its input. The person approves or
rejects it in their inbox. Returns, as JSON text, {"behavior": "allow", "updatedInput":
{...}} or {"behavior": "deny", "message": "<the person's comment>"}."""

Str = Annotated[str, Field(min_length=1)]


def build_server(bridge: Bridge, *, name: str = "a2h",
                 instructions: str | None = None) -> MCPServer[Any]:
    """An MCP server with the three tools, served through ``bridge``."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer[Any] = MCPServer(
        name=name, version="0.1.0",
        instructions=instructions or ("Tools to ask a person (through the A2H hub) and "
                                      "wait for their answer or approval."),
    )
    # MCPServer() configures the root logger when it has no handler: logging is the
    # application's (hub.logs), so undo that.
    root.handlers[:], root.level = handlers, level
    blocking = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                               idempotent_hint=True, open_world_hint=True)

    async def ask_human(
        question: Annotated[str, Field(min_length=1, description=(
            "The question, in Markdown. Be specific and self-contained: the person has "
            "not seen your conversation."))],
        ctx: Context,
        choices: Annotated[list[Str] | None, Field(description=(
            "If the answer must be one of a few options, list them; the person clicks "
            "one and it comes back as the answer."))] = None,
        to: Annotated[str | None, Field(description=(
            "The handle of the person to ask. Leave it out when the tenant has only one "
            "person."))] = None,
        conversation: Annotated[str | None, Field(description=(
            "Groups related questions in the inbox; defaults to one per MCP session."))]
        = None,
        expires_in: Annotated[float | None, Field(gt=0, description=(
            "Seconds the question stays answerable (default: while you wait)."))] = None,
        context: Annotated[dict[str, Any] | str | None, Field(description=(
            "Background the person may need (text or JSON), shown collapsed beside the "
            "question."))] = None,
    ) -> Annotated[CallToolResult, AnswerOut]:
        backend = await bridge.backend(ctx)
        spec = AskSpec(tool="ask_human", to=await _addressee(bridge, ctx, backend, to), question=question,
                       conversation=_conversation(bridge, ctx, conversation),
                       choices=tuple(choices) if choices else None, context=context,
                       expires_in=expires_in)
        return answer_result(await run_call(bridge, backend, spec, ctx))

    async def request_approval(
        action: Annotated[str, Field(min_length=1, description=(
            "The action to approve, in one line (Markdown)."))],
        ctx: Context,
        details: Annotated[dict[str, Any] | str | None, Field(description=(
            "What the person needs to decide: text, or JSON such as the exact "
            "arguments."))] = None,
        to: Annotated[str | None, Field(description=(
            "The handle of the person to ask. Leave it out when the tenant has only one "
            "person."))] = None,
    ) -> Annotated[CallToolResult, AnswerOut]:
        backend = await bridge.backend(ctx)
        question = action
        if isinstance(details, str) and details.strip():
            question = f"{action}\n\n{details}"
        elif details is not None and not isinstance(details, str):
            question = f"{action}\n\n{_json_block(details)}"
        spec = AskSpec(tool="request_approval", to=await _addressee(bridge, ctx, backend, to),
                       question=question, conversation=_conversation(bridge, ctx, None),
                       kind=Kind.APPROVAL, context=details)
        return answer_result(await run_call(bridge, backend, spec, ctx))

    async def request_permission(
        tool_name: Annotated[str, Field(min_length=1, description="The tool that wants to run.")],
        input: Annotated[dict[str, Any], Field(description="The tool's input.")],  # noqa: A002
        ctx: Context,
        tool_use_id: Annotated[str | None, Field(description=(
            "The tool use's id, when the client has one."))] = None,
    ) -> CallToolResult:
        backend = await bridge.backend(ctx)
        question = f"Allow **{tool_name}** to run?\n\n{_json_block(input)}"
        spec = AskSpec(tool="request_permission", to=await _addressee(bridge, ctx, backend, None),
                       question=question, conversation=_conversation(bridge, ctx, None),
                       kind=Kind.APPROVAL, context={"tool_name": tool_name, "input": input},
                       nonce=tool_use_id)
        view = await run_call(bridge, backend, spec, ctx)
        decision = orjson.dumps(permission_decision(view)).decode()
        return CallToolResult(content=[TextContent(type="text", text=decision)])

    server.add_tool(ask_human, title="Ask a person", description=ASK_HUMAN,
                    annotations=blocking)
    server.add_tool(request_approval, title="Ask a person for approval",
                    description=REQUEST_APPROVAL, annotations=blocking)
    server.add_tool(request_permission, title="Ask a person for permission",
                    description=REQUEST_PERMISSION, annotations=blocking)
    return server


__all__: Sequence[str] = ["AskSpec", "Backend", "Bridge", "build_server", "derive_op_id"]
