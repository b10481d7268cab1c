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

import hub.protocol as protocol
from hub.protocol import ErrorCode


class A2HError(Exception):
    """Root of every SDK error."""

    code: str = "internal"

    def __init__(self, message: str = "", *, code: str | None = None,
                 request: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.code)
        if code is not None:
            self.code = code
        self.message = message or self.code
        self.request = request


class RequestError(A2HError):
    code = "invalid"


class InvalidRequest(RequestError):
    code = "invalid"


class Conflict(RequestError):
    code = "conflict"


class AlreadyResolved(RequestError):
    code = "already_resolved"

    @property
    def answer(self) -> Any:
        from client_sdk.models import Answer

        return Answer.from_view(self.request) if self.request else None


class LimitExceeded(RequestError):
    """A configured limit was hit (``code`` says which: too_many_pending, ...)."""

    code = "limit_exceeded"


class NotFound(A2HError):
    code = "not_found"


class AccessDenied(A2HError):
    code = "forbidden"


class Overloaded(A2HError):
    code = "overloaded"


class RetryableError(A2HError):
    code = "unavailable"


class RateLimited(RetryableError):
    """Too many messages per second on this connection: slow down."""

    code = "rate_limited"


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
_BY_CODE.update({code: LimitExceeded for code, cls in protocol.ERRORS_BY_CODE.items()
                 if issubclass(cls, protocol.LimitExceeded)})


def from_frame(frame: dict[str, Any]) -> A2HError:
    code = str(frame.get("code") or "internal")
    cls = _BY_CODE.get(code, RetryableError)
    return cls(str(frame.get("message") or code), code=code, request=frame.get("request"))
