"""One mapping from a hub error to each HTTP format.

The error *bodies* come from :mod:`hub.protocol` (``error_body``, ``openai_error_body``),
the same code, message, ``retryable`` flag and extras the WebSocket ``error`` frame carries.
This module adds what only HTTP has — the status line and the headers — for the two HTTP
dialects the hub speaks::

    plain API (/api, /metrics)   api_response(exc)      {"error": {code, message, retryable,
                                                         retry_after?, param?, request?}}
                                                        + WWW-Authenticate on 401
                                                        + Retry-After when retry_after is set
    OpenAI (/v1)                 openai_response(exc)   {"error": {message, type, param, code},
                                                         "a2h"?} + x-should-retry,
                                                        retry-after-ms, x-a2h-op-id

Outcomes only the OpenAI dialect reports (a chat call still pending at the end of its wait,
declined, expired, cancelled; an unknown model; a parameter error naming OpenAI's ``param``
and ``code``) are :class:`OpenAIError` instances: a :class:`HubError` with its own status,
OpenAI code and retry advice, so they go through the same one function as every other error.

``endpoint`` / ``openai_endpoint`` wrap handlers: a ``HubError`` becomes its response, any
other exception is logged and answered as a retryable ``unavailable`` (never a traceback).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hub.errors import ErrorCode, HubError, RetryLater
from hub.protocol import error_body, openai_error_body

log = logging.getLogger("a2h.http")

#: What a retryable /v1 error tells the client to pause before its retry, unless the error
#: carries its own ``retry_after`` (a 408 "still pending" makes the client's retry the
#: long-poll, so the pause is tiny).
RETRY_AFTER_MS = 100

#: OpenAI's own names for hub error codes where they differ.
_OPENAI_CODES: dict[ErrorCode, str] = {ErrorCode.UNAUTHORIZED: "invalid_api_key"}


class OpenAIError(HubError):
    """A hub error as only ``/v1`` reports it.

    Args:
        message: for the person reading the client's exception.
        status: the HTTP status (408 ``request_pending``, 422 ``request_declined``, ...).
        oai_code: OpenAI's ``code`` field.
        retry: whether the client should retry (``x-should-retry``).
        param: the request parameter at fault, if any.
        a2h: the hub's view of the request concerned (``a2h`` in the body and the
            ``x-a2h-op-id`` header), for outcomes of a request.
    """

    code = ErrorCode.INVALID

    def __init__(self, message: str, *, status: int, oai_code: str, retry: bool = False,
                 param: str | None = None, a2h: dict[str, Any] | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        self.oai_code = oai_code
        self.retry = retry
        self.a2h = a2h

    @property
    def http_status(self) -> int:
        return self.status

    @property
    def retryable(self) -> bool:
        return self.retry


def api_response(exc: HubError) -> JSONResponse:
    """The plain API's error response for ``exc``."""
    headers: dict[str, str] = {}
    if exc.http_status == 401:
        headers["www-authenticate"] = "Bearer"
    if exc.retry_after is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    return JSONResponse(error_body(exc), status_code=exc.http_status, headers=headers or None)


def openai_body(exc: HubError) -> dict[str, Any]:
    """The OpenAI-style error body for ``exc`` (also the ``data:`` of an SSE error event)."""
    if isinstance(exc, OpenAIError):
        body = openai_error_body(exc, exc.oai_code)
        if exc.a2h is not None:
            body["a2h"] = exc.a2h
        return body
    return openai_error_body(exc, _OPENAI_CODES.get(exc.code))


def openai_response(exc: HubError) -> JSONResponse:
    """The ``/v1`` error response for ``exc``. ``x-should-retry`` always says what the
    client should do (the official clients would otherwise retry a 409 by themselves)."""
    headers = {"x-should-retry": "true" if exc.retryable else "false"}
    if exc.retryable:
        ms = RETRY_AFTER_MS if exc.retry_after is None else math.ceil(exc.retry_after * 1000)
        headers["retry-after-ms"] = str(ms)
    if exc.http_status == 401:
        headers["www-authenticate"] = "Bearer"
    if isinstance(exc, OpenAIError) and exc.a2h is not None:
        headers["x-a2h-op-id"] = str(exc.a2h["op_id"])
    return JSONResponse(openai_body(exc), status_code=exc.http_status, headers=headers)


Handler = Callable[[Request], Awaitable[Response]]


def _wrap(fn: Handler, respond: Callable[[HubError], Response]) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except HubError as exc:
            return respond(exc)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return respond(RetryLater("internal error"))

    wrapped.__name__ = fn.__name__
    wrapped.__qualname__ = fn.__qualname__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def endpoint(fn: Handler) -> Handler:
    """A plain-API handler: HubErrors become :func:`api_response`; anything else is a
    logged, retryable ``unavailable``."""
    return _wrap(fn, api_response)


def openai_endpoint(fn: Handler) -> Handler:
    """A ``/v1`` handler: HubErrors become :func:`openai_response`."""
    return _wrap(fn, openai_response)
