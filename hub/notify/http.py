"""Outbound HTTP for the notification channels: one small interface, aiohttp behind it.

Every POST has a total timeout and follows no redirect; the hub never awaits one on a
request's path (only the Notifier's own tasks do). Tests may inject any :class:`Transport`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from hub.records import record

if TYPE_CHECKING:
    import aiohttp


@record
class Response:
    #: HTTP status, or None when no response came (refused, timeout, TLS error)
    status: int | None
    #: the start of the body, or why no response came
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self) -> str:
        if self.status is None:
            return self.text or "no response"
        snippet = " ".join(self.text.split())[:200]
        return f"HTTP {self.status}" + (f": {snippet}" if snippet else "")


class Transport(Protocol):
    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   timeout: float) -> Response: ...
    async def aclose(self) -> None: ...


#: Why nothing can be sent without the ``notify`` extra (an endpoint's ``last_error``).
MISSING = "notifications need the notify extra: pip install 'a2h-hub[notify]'"


class AiohttpTransport:
    """POSTs through one shared aiohttp session, created on first use."""

    #: bytes of a response body kept for the endpoint's ``last_error``
    KEEP = 2048

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   timeout: float) -> Response:
        try:
            import aiohttp
        except ImportError:  # pragma: no cover - the extra is installed in tests
            return Response(None, MISSING)
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        try:
            async with self._session.post(url, data=body, headers=headers,
                                          allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                text = (await r.content.read(self.KEEP)).decode("utf-8", "replace")
                return Response(r.status, text)
        except TimeoutError:
            return Response(None, f"no answer within {timeout:g} s")
        except aiohttp.ClientError as exc:
            return Response(None, f"{type(exc).__name__}: {exc}"[:500])
        except ValueError as exc:  # a malformed URL
            return Response(None, f"bad URL: {exc}"[:500])

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
