"""The errors the hub reports on the wire: their codes, what each means over HTTP, and the
exception types that carry them.

Standard library only: ``client_sdk`` imports this module. :mod:`hub.protocol` turns an error
into a frame or a body (``error_frame``, ``error_body``, ``openai_error_body``);
``hub/server/errors.py`` adds HTTP's status line and headers.

Error tree (what the caller can do)::

    HubError
    ├── FixRequest          the caller must change the request   (bad_json, invalid, ...)
    │   ├── Conflict        same op_id, different payload
    │   └── AlreadyResolved the request has a terminal resolution (carried along)
    ├── NotFound            no such request in this tenant
    ├── Denied              unauthorized / forbidden
    ├── RetryLater          retryable: true  (unavailable, internal)
    └── Overloaded          retryable: false — never retried automatically

These classes live apart from :mod:`hub.protocol` because the native build
(:mod:`hub._native`) compiles that module and not this one: an exception type another
module subclasses (``hub/server/errors.py``) stays an ordinary Python class.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.StrEnum):
    BAD_JSON = "bad_json"
    BINARY_FRAME = "binary_frame"
    UNKNOWN_TYPE = "unknown_type"
    INVALID = "invalid"
    TOO_LARGE = "too_large"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    ALREADY_RESOLVED = "already_resolved"
    OVERLOADED = "overloaded"
    RATE_LIMITED = "rate_limited"
    LIMIT_EXCEEDED = "limit_exceeded"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"
    # One code per configurable limit (docs/THREAT_MODEL.md lists them with defaults).
    TOO_MANY_SOCKETS = "too_many_sockets"
    TOO_MANY_PENDING = "too_many_pending"
    QUESTION_TOO_LARGE = "question_too_large"
    CONTEXT_TOO_LARGE = "context_too_large"
    TOO_MANY_CHOICES = "too_many_choices"
    JOURNAL_FULL = "journal_full"


#: error code -> (HTTP status, retryable)
ERROR_TABLE: dict[ErrorCode, tuple[int, bool]] = {
    ErrorCode.BAD_JSON: (400, False),
    ErrorCode.BINARY_FRAME: (400, False),
    ErrorCode.UNKNOWN_TYPE: (400, False),
    ErrorCode.INVALID: (400, False),
    ErrorCode.TOO_LARGE: (413, False),
    ErrorCode.UNAUTHORIZED: (401, False),
    ErrorCode.FORBIDDEN: (403, False),
    ErrorCode.NOT_FOUND: (404, False),
    ErrorCode.CONFLICT: (409, False),
    ErrorCode.ALREADY_RESOLVED: (409, False),
    ErrorCode.OVERLOADED: (503, False),
    ErrorCode.RATE_LIMITED: (429, True),
    ErrorCode.LIMIT_EXCEEDED: (429, False),
    ErrorCode.UNAVAILABLE: (503, True),
    ErrorCode.INTERNAL: (500, True),
    ErrorCode.TOO_MANY_SOCKETS: (429, False),
    ErrorCode.TOO_MANY_PENDING: (429, False),
    ErrorCode.QUESTION_TOO_LARGE: (413, False),
    ErrorCode.CONTEXT_TOO_LARGE: (413, False),
    ErrorCode.TOO_MANY_CHOICES: (413, False),
    ErrorCode.JOURNAL_FULL: (429, False),
}


class HubError(Exception):
    """Root of every error the hub reports on the wire."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str = "", *, request: dict[str, Any] | None = None,
                 retry_after: float | None = None, param: str | None = None) -> None:
        super().__init__(message or self.code.value)
        self.message = message or self.code.value
        #: the request's view, for ``conflict`` and ``already_resolved``
        self.request = request
        #: seconds the caller should pause before retrying (``rate_limited``)
        self.retry_after = retry_after
        #: the field of the request that was wrong, when one was
        self.param = param

    @property
    def retryable(self) -> bool:
        return ERROR_TABLE[self.code][1]

    @property
    def http_status(self) -> int:
        return ERROR_TABLE[self.code][0]


class FixRequest(HubError):
    code = ErrorCode.INVALID


class Invalid(FixRequest):
    code = ErrorCode.INVALID


class BadJson(FixRequest):
    code = ErrorCode.BAD_JSON


class BinaryFrame(FixRequest):
    code = ErrorCode.BINARY_FRAME


class UnknownType(FixRequest):
    code = ErrorCode.UNKNOWN_TYPE


class TooLarge(FixRequest):
    code = ErrorCode.TOO_LARGE


class LimitExceeded(FixRequest):
    """A configured limit was hit; ``code`` names which one."""

    code = ErrorCode.LIMIT_EXCEEDED

    def __init__(self, message: str = "", *, code: ErrorCode | None = None,
                 request: dict[str, Any] | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message, request=request)


class TooDeep(FixRequest):
    """JSON nested deeper than :data:`hub.protocol.MAX_JSON_DEPTH`."""

    code = ErrorCode.INVALID


class Conflict(FixRequest):
    code = ErrorCode.CONFLICT


class AlreadyResolved(FixRequest):
    code = ErrorCode.ALREADY_RESOLVED


class NotFound(HubError):
    code = ErrorCode.NOT_FOUND


class Denied(HubError):
    code = ErrorCode.FORBIDDEN


class Unauthorized(Denied):
    code = ErrorCode.UNAUTHORIZED


class RetryLater(HubError):
    code = ErrorCode.UNAVAILABLE


class RateLimited(RetryLater):
    code = ErrorCode.RATE_LIMITED


class Overloaded(HubError):
    code = ErrorCode.OVERLOADED


ERRORS_BY_CODE: dict[ErrorCode, type[HubError]] = {
    ErrorCode.BAD_JSON: BadJson,
    ErrorCode.BINARY_FRAME: BinaryFrame,
    ErrorCode.UNKNOWN_TYPE: UnknownType,
    ErrorCode.INVALID: Invalid,
    ErrorCode.TOO_LARGE: TooLarge,
    ErrorCode.LIMIT_EXCEEDED: LimitExceeded,
    ErrorCode.CONFLICT: Conflict,
    ErrorCode.ALREADY_RESOLVED: AlreadyResolved,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.FORBIDDEN: Denied,
    ErrorCode.UNAUTHORIZED: Unauthorized,
    ErrorCode.UNAVAILABLE: RetryLater,
    ErrorCode.RATE_LIMITED: RateLimited,
    ErrorCode.OVERLOADED: Overloaded,
    ErrorCode.INTERNAL: RetryLater,
    ErrorCode.TOO_MANY_SOCKETS: LimitExceeded,
    ErrorCode.TOO_MANY_PENDING: LimitExceeded,
    ErrorCode.QUESTION_TOO_LARGE: LimitExceeded,
    ErrorCode.CONTEXT_TOO_LARGE: LimitExceeded,
    ErrorCode.TOO_MANY_CHOICES: LimitExceeded,
    ErrorCode.JOURNAL_FULL: LimitExceeded,
}


class FrameError(HubError):
    """A frame that could not be decoded; ``frame_id`` is echoed when it could be read."""

    def __init__(self, inner: HubError, frame_id: int | None) -> None:
        super().__init__(inner.message, request=inner.request, retry_after=inner.retry_after,
                         param=inner.param)
        self.code = inner.code
        self.frame_id = frame_id
