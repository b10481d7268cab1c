"""The SDK's exception tree, grouped by what the caller can do::

    A2HError
    ├── RequestError          fix the request: nothing to retry
    │   ├── InvalidRequest    bad field, too large, unknown type
    │   ├── Conflict          op_id reused with a different payload (.request = existing)
    │   ├── AlreadyResolved   the request already has its resolution (.answer)
    │   └── LimitExceeded     a configured limit (.code: too_many_pending, ...)
    ├── NotFound              no such request (or not yours: indistinguishable on purpose)
    ├── AccessDenied          token missing, revoked, or not allowed to do this
    ├── Overloaded            the room is full; the SDK never retries this by itself
    └── RetryableError        try again later (hub unavailable, internal error)
        ├── RateLimited       too many messages per second on this connection
        └── ConnectionLost    the socket dropped before the hub answered
"""

from __future__ import annotations

from typing import Any

import hub.errors as errors
from hub.errors import ErrorCode


class A2HError(Exception):
    """Root of every SDK error."""

    code: str = ErrorCode.INTERNAL.value

    def __init__(self, message: str = "", *, code: str | None = None,
                 request: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.code)
        if code is not None:
            self.code = code
        self.message = message or self.code
        self.request = request


class RequestError(A2HError):
    code = ErrorCode.INVALID.value


class InvalidRequest(RequestError):
    code = ErrorCode.INVALID.value


class Conflict(RequestError):
    code = ErrorCode.CONFLICT.value


class AlreadyResolved(RequestError):
    code = ErrorCode.ALREADY_RESOLVED.value

    @property
    def answer(self) -> Any:
        from client_sdk.models import Answer

        return Answer.from_view(self.request) if self.request else None


class LimitExceeded(RequestError):
    """A configured limit was hit (``code`` says which: too_many_pending, ...)."""

    code = ErrorCode.LIMIT_EXCEEDED.value


class NotFound(A2HError):
    code = ErrorCode.NOT_FOUND.value


class AccessDenied(A2HError):
    code = ErrorCode.FORBIDDEN.value


class Overloaded(A2HError):
    code = ErrorCode.OVERLOADED.value


class RetryableError(A2HError):
    code = ErrorCode.UNAVAILABLE.value


#: The pause a ``rate_limited`` error asks for when the hub sends no ``retry_after``.
DEFAULT_RETRY_AFTER = 0.25


class RateLimited(RetryableError):
    """Too many messages per second on this connection: slow down.

    ``retry_after`` is how long the hub asks to wait before the next frame, in seconds.
    Calls that are safe to repeat wait that long (plus jitter) and retry by themselves.
    """

    code = ErrorCode.RATE_LIMITED.value

    def __init__(self, message: str = "", *, code: str | None = None,
                 request: dict[str, Any] | None = None,
                 retry_after: float = DEFAULT_RETRY_AFTER) -> None:
        super().__init__(message, code=code, request=request)
        self.retry_after = retry_after


class ConnectionLost(RetryableError):
    code = "connection_lost"


class UnknownOutcome(A2HError):
    """A journaled call may or may not have happened; a human must settle it.

    ``op_id`` names the inbox item that asks them; ``call_id`` the call in question.
    """

    code = "unknown_outcome"
    op_id: str | None = None
    call_id: str | None = None


_BY_CODE: dict[str, type[A2HError]] = {
    ErrorCode.BAD_JSON: InvalidRequest,
    ErrorCode.BINARY_FRAME: InvalidRequest,
    ErrorCode.UNKNOWN_TYPE: InvalidRequest,
    ErrorCode.INVALID: InvalidRequest,
    ErrorCode.TOO_LARGE: InvalidRequest,
    ErrorCode.LIMIT_EXCEEDED: LimitExceeded,
    ErrorCode.CONFLICT: Conflict,
    ErrorCode.ALREADY_RESOLVED: AlreadyResolved,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.UNAUTHORIZED: AccessDenied,
    ErrorCode.FORBIDDEN: AccessDenied,
    ErrorCode.OVERLOADED: Overloaded,
    ErrorCode.RATE_LIMITED: RateLimited,
    ErrorCode.UNAVAILABLE: RetryableError,
    ErrorCode.INTERNAL: RetryableError,
}
# Every limit the hub reports (its own LimitExceeded codes) is LimitExceeded here too.
_BY_CODE.update({code: LimitExceeded for code, cls in errors.ERRORS_BY_CODE.items()
                 if issubclass(cls, errors.LimitExceeded)})


def _retry_after(frame: dict[str, Any]) -> float:
    hint = frame.get("retry_after")
    if isinstance(hint, bool) or not isinstance(hint, int | float) or not 0 <= hint <= 3600:
        return DEFAULT_RETRY_AFTER  # missing or nonsense: the default, never a spin or a hang
    return float(hint)


def from_frame(frame: dict[str, Any]) -> A2HError:
    """The SDK exception an ``error`` frame describes."""
    code = str(frame.get("code") or ErrorCode.INTERNAL)
    cls = _BY_CODE.get(code, RetryableError)
    message = str(frame.get("message") or code)
    if cls is RateLimited:
        return RateLimited(message, code=code, request=frame.get("request"),
                           retry_after=_retry_after(frame))
    return cls(message, code=code, request=frame.get("request"))
