"""Decode once, at the edge: an HTTP request body, size-bounded, through ``hub.protocol.loads``
(so JSON nesting is bounded with a clear ``invalid`` error on every HTTP route)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from hub.errors import Invalid, TooLarge
from hub.protocol import loads

#: Largest JSON body of the plain API (a WebSocket frame's limit applies when larger).
MAX_API_BODY = 64 * 1024


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, at most ``limit`` bytes.

    Raises:
        TooLarge: the body exceeds ``limit`` bytes.
        BadJson: it is not JSON.
        TooDeep: it nests deeper than ``hub.protocol.MAX_JSON_DEPTH``.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    return loads(b"".join(chunks))


async def read_object(request: Request, limit: int = MAX_API_BODY) -> dict[str, Any]:
    """The body as a JSON object (Invalid otherwise); see :func:`read_json`."""
    body = await read_json(request, limit)
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    return body
