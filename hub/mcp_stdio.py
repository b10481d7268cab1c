"""``a2h mcp``: the MCP tools over stdio, talking to a hub through the SDK.

Reads ``A2H_URL`` (default ``http://127.0.0.1:8000``) and ``A2H_TOKEN`` (an agent token);
``A2H_TO`` names the person to ask when a call names none, ``A2H_MCP_PROGRESS_INTERVAL``
the seconds between progress notifications (15). Stdout carries MCP messages only; logs go
to stderr. The tools themselves are in ``hub/mcp_tools.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from client_sdk import A2HError, AlreadyResolved, Hub, NotFound
from hub.protocol import Kind, Status, error_from_frame

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from hub.mcp_tools import AskSpec


class SdkBackend:
    """The token's way to the hub: one SDK connection (reconnects and re-attaches)."""

    def __init__(self, hub: Hub, url: str, token: str) -> None:
        self.client = hub
        self.url = url.rstrip("/")
        self.token = token
        self.secret = token.encode()

    async def humans(self) -> list[str]:
        """The tenant's people, from ``GET /v1/models`` (the WebSocket has no such frame)."""

        def fetch() -> list[str]:
            req = urllib.request.Request(f"{self.url}/v1/models",
                                         headers={"authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 (our hub)
                body = orjson.loads(resp.read())
            return [str(m["id"]) for m in body.get("data", [])]

        return await asyncio.to_thread(fetch)

    async def ask(self, spec: AskSpec, op_id: str) -> dict[str, Any]:
        with _hub_errors():
            answer = await self.client.ask(
                spec.to, spec.question, conversation=spec.conversation,
                choices=list(spec.choices) if spec.choices is not None else None, wait=0,
                expires_in=spec.expires_in, op_id=op_id, context=spec.context,
                kind=Kind(spec.kind))
        return _view(answer.request, op_id)

    async def wait(self, op_id: str, wait: float) -> dict[str, Any]:
        with _hub_errors():
            answer = await self.client.wait(op_id, wait)
        return _view(answer.request, op_id)

    async def cancel(self, op_id: str) -> None:
        try:
            await self.client.cancel(op_id)
        except (AlreadyResolved, NotFound):
            pass

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@contextlib.contextmanager
def _hub_errors() -> Iterator[None]:
    """The SDK's errors as the hub's (what the tools handle): same code, same message."""
    try:
        yield
    except A2HError as exc:
        raise error_from_frame({"code": exc.code, "message": exc.message}) from None


def _view(view: dict[str, Any], op_id: str) -> dict[str, Any]:
    out = dict(view)
    out.setdefault("op_id", op_id)
    out.setdefault("status", Status.PENDING.value)
    return out


class SdkBridge:
    """One backend for the whole process; one conversation per process (MCP session)."""

    def __init__(self, backend: SdkBackend, *, progress_interval: float,
                 to: str | None) -> None:
        self._backend = backend
        self.progress_interval = progress_interval
        self.closing = False
        self._to = to
        self._conversation = f"mcp:{secrets.token_hex(8)}"

    async def backend(self, ctx: Context) -> SdkBackend:
        return self._backend

    def default_conversation(self, ctx: Context) -> str:
        return self._conversation

    def default_to(self, ctx: Context) -> str | None:
        return self._to


async def serve_stdio(url: str, token: str, *, progress_interval: float = 15.0,
                      to: str | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes stdin.

    Raises:
        A2HError: the hub refused the token or could not be reached.
    """
    from hub.mcp_tools import build_server

    async with Hub(url, token=token) as hub:
        bridge = SdkBridge(SdkBackend(hub, url, token), progress_interval=progress_interval,
                           to=to)
        await build_server(bridge).run_stdio_async()
