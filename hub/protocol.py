"""The wire vocabulary shared by the hub, the SDK and (through hub/web/js/protocol.js) the inbox.

Standard library and orjson only: ``client_sdk`` imports this module.

Every frame is a JSON object in a WebSocket *text* frame with a ``type`` discriminator.
Client → hub frames carry an integer ``id`` the hub echoes in its reply (``ok`` or
``error``); pushes carry no ``id``. ``decode_client_frame`` is the one place that turns
raw bytes into typed frames: past it nobody handles a raw ``dict``.

The errors a frame can carry, and their codes, are in :mod:`hub.errors`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import field
from typing import Any, NewType, Union

import orjson

from hub.errors import (
    ERRORS_BY_CODE,
    BadJson,
    ErrorCode,
    FrameError,
    HubError,
    Invalid,
    LimitExceeded,
    RetryLater,
    TooDeep,
    TooLarge,
    UnknownType,
)
from hub.records import record
from hub.schema import SchemaError, check_schema

PROTOCOL_VERSION = 1

OpId = NewType("OpId", str)
Conversation = NewType("Conversation", str)

MAX_FRAME_BYTES = 64 * 1024
#: The default wait of an ask (how long one call blocks).
MAX_WAIT_SECONDS = 60.0
#: The longest wait any interface accepts (the official OpenAI clients time out at 600 s).
WAIT_LIMIT = 600.0
#: The longest ``expires_in`` any interface accepts: 30 days.
EXPIRES_LIMIT = 30 * 86400.0
#: The deepest nesting of JSON arrays and objects a frame or body may have (the frame itself
#: is level 1). orjson decodes 1,024 levels but encodes only 254, and replies wrap values in
#: a few more: a bound well below that keeps every stored value encodable in every listing.
MAX_JSON_DEPTH = 64
#: Names — tenants, handles, agent names, conversations, op_ids, run ids — are 1..200 of
#: these characters (docs/protocol.md). No spaces, no control characters, URL-path safe.
NAME_CHARS = "A-Z a-z 0-9 . _ : ~ + = @ -"
NAME_MAX = 200
_NAME_RE = re.compile(r"[A-Za-z0-9._:~+=@-]{1,200}")
#: How long past a wait an open-ended request stays alive (write-up 000: 60 s block, ~70 s alarm).
WAIT_GRACE_SECONDS = 10.0


class Status(enum.StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.ANSWERED, Status.DECLINED, Status.EXPIRED, Status.CANCELLED})


class Kind(enum.StrEnum):
    QUESTION = "question"
    APPROVAL = "approval"


#: A status's or kind's text, looked up: ``Enum.value`` is a property, two Python calls per
#: use, and the hot path (views, hashes, store rows) reads these several times a cycle.
TEXT: dict[Status | Kind, str] = {m: m.value for m in (*Status, *Kind)}
#: ... and back: ``Kind(text)`` / ``Status(text)`` run ``EnumType.__call__`` and
#: ``Enum.__new__``, Python code, where a dict lookup does (frames and store rows, each cycle).
KIND_OF: dict[str, Kind] = {m.value: m for m in Kind}
STATUS_OF: dict[str, Status] = {m.value: m for m in Status}
#: what a human may respond with (``respond``'s ``status``)
_RESPONSE_STATUS: dict[str, Status] = {m.value: m for m in (Status.ANSWERED, Status.DECLINED)}


class CloseCode(enum.IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001
    POLICY = 1008
    TOO_BIG = 1009
    SERVICE_RESTART = 1012
    #: The connection's outbox overflowed: reconnect and re-read state from the hub.
    RESYNC = 4000
    #: The token was revoked or expired.
    REVOKED = 4001


# ---------------------------------------------------------------------------- frame types

class T(enum.StrEnum):
    """Frame ``type`` values, both directions."""

    # client -> hub
    ASK = "ask"
    WAIT = "wait"
    CANCEL = "cancel"
    UNWATCH = "unwatch"
    INBOX = "inbox"
    HISTORY = "history"
    RESPOND = "respond"
    PING = "ping"
    # hub -> client
    HELLO = "hello"
    OK = "ok"
    ERROR = "error"
    RESOLVED = "resolved"
    INBOX_ADD = "inbox.add"
    INBOX_REMOVE = "inbox.remove"
    RECONNECT = "reconnect"
    # runs (issue 6): agent -> hub
    RUN_BEGIN = "run.begin"
    RUN_CALL = "run.call"
    RUN_RESULT = "run.result"
    RUN_INTERRUPT = "run.interrupt"
    RUN_END = "run.end"
    RUN_LIST = "run.list"
    RUN_PENDING = "run.pending"


@record
class Ask:
    id: int
    op_id: OpId
    to: str
    question: str
    conversation: Conversation
    kind: Kind = Kind.QUESTION
    choices: tuple[str, ...] | None = None
    context: Any = None
    default: Any = None
    wait: float = MAX_WAIT_SECONDS
    expires_in: float | None = None
    #: a JSON schema (hub/schema.py subset) the answer must match; the inbox renders a form
    schema: Any = None


@record
class Wait:
    id: int
    op_id: OpId
    wait: float = MAX_WAIT_SECONDS


@record
class Cancel:
    id: int
    op_id: OpId


@record
class Unwatch:
    id: int
    op_id: OpId


@record
class InboxQuery:
    id: int


@record
class HistoryQuery:
    id: int
    limit: int = 50


@record
class Respond:
    id: int
    op_id: OpId
    value: Any = None
    status: Status = Status.ANSWERED


@record
class Ping:
    id: int
    data: Any = field(default=None)


ClientFrame = Union[Ask, Wait, Cancel, Unwatch, InboxQuery, HistoryQuery, Respond, Ping]


# ---------------------------------------------------------------------------- decoding


def too_deep(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if ``obj`` nests arrays/objects deeper than ``limit`` levels (itself is 1)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        t = type(o)
        if t is dict:
            items: Any = o.values()
        elif t is list:
            items = o
        else:
            continue
        if depth > limit:
            return True
        for v in items:
            tv = type(v)
            if tv is dict or tv is list:
                stack.append((v, depth + 1))
    return False


def _brackets(data: str | bytes) -> int:
    """How many ``{`` and ``[`` the text holds: an upper bound of its JSON nesting depth."""
    if isinstance(data, str):
        return data.count("{") + data.count("[")
    return data.count(b"{") + data.count(b"[")


def loads(data: str | bytes) -> Any:
    """Decode JSON from the outside world: every edge's one way in.

    Raises:
        BadJson: not JSON.
        TooDeep: nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BadJson("not valid JSON") from None
    if _brackets(data) > MAX_JSON_DEPTH and too_deep(obj):
        raise TooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return obj


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


def fresh_op_id(now: float, random_hex: str) -> str:
    """The form of an op_id the SDK or the hub makes: the time ``now`` (seconds since the
    epoch) in microseconds, 13 hex digits of fixed width, then ``random_hex`` (128 random
    bits, from the caller: the protocol reads no clock and draws nothing). The random bits
    make it unguessable; the prefix makes fresh op_ids sort in the order they were made, so
    the store's primary-key index takes each new request at its end rather than on a page
    of its own somewhere inside (a group commit of 25 cycles wrote ~61 write-ahead-log
    pages with random op_ids, ~35 with these: ``python -m bench.writer --op-ids random
    ordered``). Never derived from the question."""
    return f"{int(now * 1_000_000):013x}{random_hex}"


def check_name(what: str, value: object) -> str:
    """A tenant, handle, agent name, conversation, op_id or run id, validated.

    Raises:
        Invalid: not 1..200 of :data:`NAME_CHARS`.
    """
    if not is_name(value):
        raise Invalid(f"{what} must be 1..{NAME_MAX} of {NAME_CHARS}", param=what)
    assert isinstance(value, str)
    return value


def _text(obj: dict[str, Any], key: str, max_len: int) -> str:
    """A free-text field (a function name, a version): no control characters."""
    val: str = _req(obj, key, str, "a string")
    if not val or len(val) > max_len or not val.isprintable():
        raise Invalid(f"field {key!r} must be 1..{max_len} printable characters", param=key)
    return val


def _req(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], what: str) -> Any:
    if key not in obj:
        raise Invalid(f"missing field {key!r}")
    val = obj[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise Invalid(f"field {key!r} must be {what}")
    return val


def _opt_number(obj: dict[str, Any], key: str, default: float | None) -> float | None:
    val = obj.get(key, default)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)) or val != val:
        raise Invalid(f"field {key!r} must be a number")
    return float(val)


def _name(obj: dict[str, Any], key: str, max_len: int = NAME_MAX) -> str:
    val: str = _req(obj, key, str, "a string")
    if len(val) > max_len or _NAME_RE.fullmatch(val) is None:
        raise Invalid(f"field {key!r} must be 1..{max_len} of {NAME_CHARS}", param=key)
    return val


def _wait(obj: dict[str, Any], default: float) -> float:
    wait = _opt_number(obj, "wait", default)
    assert wait is not None
    if not 0 <= wait <= WAIT_LIMIT:
        raise Invalid(f"field 'wait' must be 0..{WAIT_LIMIT:g} seconds", param="wait")
    return wait


def _expires_in(obj: dict[str, Any]) -> float | None:
    expires_in = _opt_number(obj, "expires_in", None)
    if expires_in is not None and not 0 < expires_in <= EXPIRES_LIMIT:
        raise Invalid(f"field 'expires_in' must be > 0 and <= {EXPIRES_LIMIT:g} seconds "
                      "(30 days)", param="expires_in")
    return expires_in


def parse_ask(obj: dict[str, Any], fid: int) -> Ask:
    question = _req(obj, "question", str, "a string")
    if not question.strip():
        raise Invalid("field 'question' must not be empty")
    choices_raw = obj.get("choices")
    choices: tuple[str, ...] | None = None
    if choices_raw is not None:
        if not isinstance(choices_raw, list) or not all(isinstance(c, str) and c for c in choices_raw):
            raise Invalid("field 'choices' must be a list of non-empty strings")
        if not choices_raw:
            raise Invalid("field 'choices' must not be empty")
        choices = tuple(choices_raw)
    kind_raw = obj.get("kind", "question")
    kind = KIND_OF.get(kind_raw) if isinstance(kind_raw, str) else None
    if kind is None:
        raise Invalid("field 'kind' must be 'question' or 'approval'")
    wait = _wait(obj, MAX_WAIT_SECONDS)
    expires_in = _expires_in(obj)
    schema = obj.get("schema")
    if schema is not None:
        try:
            check_schema(schema)
        except SchemaError as exc:
            raise Invalid(f"field 'schema': {exc}", param="schema") from None
    return Ask(
        id=fid,
        op_id=OpId(_name(obj, "op_id")),
        to=_name(obj, "to"),
        question=question,
        conversation=Conversation(_name(obj, "conversation")),
        kind=kind,
        choices=choices,
        context=obj.get("context"),
        default=obj.get("default"),
        wait=wait,
        expires_in=expires_in,
        schema=schema,
    )


def _parse_wait(obj: dict[str, Any], fid: int) -> Wait:
    return Wait(fid, OpId(_name(obj, "op_id")), _wait(obj, MAX_WAIT_SECONDS))


def _parse_respond(obj: dict[str, Any], fid: int) -> Respond:
    status_raw = obj.get("status", "answered")
    status = _RESPONSE_STATUS.get(status_raw) if isinstance(status_raw, str) else None
    if status is None:
        raise Invalid("field 'status' must be 'answered' or 'declined'")
    return Respond(fid, OpId(_name(obj, "op_id")), obj.get("value"), status)


def _parse_history(obj: dict[str, Any], fid: int) -> HistoryQuery:
    limit = obj.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
        raise Invalid("field 'limit' must be an integer 1..500")
    return HistoryQuery(fid, limit)


_PARSERS: dict[str, Any] = {
    T.ASK: parse_ask,
    T.WAIT: _parse_wait,
    T.CANCEL: lambda o, i: Cancel(i, OpId(_name(o, "op_id"))),
    T.UNWATCH: lambda o, i: Unwatch(i, OpId(_name(o, "op_id"))),
    T.INBOX: lambda o, i: InboxQuery(i),
    T.HISTORY: _parse_history,
    T.RESPOND: _parse_respond,
    T.PING: lambda o, i: Ping(i, o.get("data")),
}


# ---------------------------------------------------------------------------- runs (issue 6)
# Durable runs and their journal (docs/runs.md, hub/journal.py). Frames sent by agent tokens
# only. The hub answers each with an ``ok`` frame carrying an ``outcome``
# (:class:`Outcome`), or an ``error`` frame.

class RunStatus(enum.StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"


class Outcome(enum.StrEnum):
    """What the hub tells the SDK (the ``outcome`` field of ``ok`` replies to run frames)."""

    STARTED = "started"            # run.begin: this execution now owns the run
    VERSION_CHANGED = "version_changed"
    NOT_ACTIVE = "not_active"      # completed, failed, needs attention, or taken over
    RUN = "run"                    # call the function now (running is committed)
    DONE = "done"                  # the journaled result (or interrupt resolution)
    FAILED = "failed"              # the journaled failure, to raise again
    UNKNOWN = "unknown"            # fail closed: a human settles it in the inbox
    DIVERGED = "diverged"          # the code no longer matches the journal
    ASK = "ask"                    # interrupt: open / re-attach to the request (shell only)
    PENDING = "pending"            # interrupt: no answer within this wait
    RECORDED = "recorded"          # a result, resolution or end was journaled


class Settlement(enum.StrEnum):
    """The decisions a human can take about an unknown outcome (the request's choices)."""

    HAPPENED = "it happened"
    RETRY = "retry it"
    FAIL = "fail the run"


#: The largest JSON value (a call's result, an interrupt's payload) a run frame may carry:
#: the frame limit with room for the other fields.
MAX_JOURNAL_VALUE_BYTES = MAX_FRAME_BYTES - 4 * 1024

_RUN_STATUSES = tuple(s.value for s in RunStatus)


@record
class RunBegin:
    id: int
    run_id: str
    conversation: Conversation
    version: str
    escalate_to: str | None = None


@record
class RunCall:
    id: int
    run_id: str
    exec: str
    position: int
    name: str
    args_hash: str
    unsafe: bool = False
    args: Any = None


@record
class RunResult:
    id: int
    run_id: str
    exec: str
    position: int
    ok: bool
    result: Any = None
    error: Any = None


@record
class RunInterrupt:
    id: int
    run_id: str
    exec: str
    position: int
    payload: Any
    to: str
    choices: tuple[str, ...] | None = None
    wait: float = MAX_WAIT_SECONDS
    expires_in: float | None = None


@record
class RunEnd:
    id: int
    run_id: str
    exec: str
    ok: bool
    error: str | None = None
    #: how many positions the code used (calls and interrupts), to catch a replay that
    #: ends before the journal does
    calls: int | None = None


@record
class RunList:
    id: int
    status: str | None = None
    limit: int = 100


@record
class RunPending:
    id: int


RunFrame = Union[RunBegin, RunCall, RunResult, RunInterrupt, RunEnd, RunList, RunPending]


def _position(obj: dict[str, Any]) -> int:
    pos = _req(obj, "position", int, "an integer")
    if not 0 <= pos <= 10_000_000:
        raise Invalid("field 'position' must be 0..10000000")
    return int(pos)


def _opt_name(obj: dict[str, Any], key: str) -> str | None:
    return None if obj.get(key) is None else _name(obj, key)


def _parse_run_begin(obj: dict[str, Any], fid: int) -> RunBegin:
    return RunBegin(fid, _name(obj, "run_id"), Conversation(_name(obj, "conversation")),
                    _text(obj, "version", 100), _opt_name(obj, "escalate_to"))


def _parse_run_call(obj: dict[str, Any], fid: int) -> RunCall:
    return RunCall(fid, _name(obj, "run_id"), _name(obj, "exec", 64), _position(obj),
                   _text(obj, "name", NAME_MAX), _name(obj, "args_hash", 64),
                   bool(obj.get("unsafe", False)), obj.get("args"))


def _parse_run_result(obj: dict[str, Any], fid: int) -> RunResult:
    return RunResult(fid, _name(obj, "run_id"), _name(obj, "exec", 64), _position(obj),
                     _req(obj, "ok", bool, "a boolean"), obj.get("result"), obj.get("error"))


def _parse_run_interrupt(obj: dict[str, Any], fid: int) -> RunInterrupt:
    choices_raw = obj.get("choices")
    choices: tuple[str, ...] | None = None
    if choices_raw is not None:
        if not isinstance(choices_raw, list) or not choices_raw or \
                not all(isinstance(c, str) and c for c in choices_raw):
            raise Invalid("field 'choices' must be a non-empty list of non-empty strings")
        choices = tuple(choices_raw)
    wait = _opt_number(obj, "wait", MAX_WAIT_SECONDS)
    assert wait is not None
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise Invalid(f"field 'wait' must be 0..{MAX_WAIT_SECONDS:g}", param="wait")
    expires_in = _expires_in(obj)
    return RunInterrupt(fid, _name(obj, "run_id"), _name(obj, "exec", 64), _position(obj),
                        obj.get("payload"), _name(obj, "to"), choices, wait, expires_in)


def _parse_run_end(obj: dict[str, Any], fid: int) -> RunEnd:
    error = obj.get("error")
    if error is not None and not isinstance(error, str):
        raise Invalid("field 'error' must be a string or null")
    calls = obj.get("calls")
    if calls is not None and (isinstance(calls, bool) or not isinstance(calls, int)
                              or calls < 0):
        raise Invalid("field 'calls' must be a non-negative integer or null")
    return RunEnd(fid, _name(obj, "run_id"), _name(obj, "exec", 64),
                  _req(obj, "ok", bool, "a boolean"), error[:2000] if error else None, calls)


def _parse_run_list(obj: dict[str, Any], fid: int) -> RunList:
    status = obj.get("status")
    if status is not None and status not in _RUN_STATUSES:
        raise Invalid(f"field 'status' must be one of {', '.join(_RUN_STATUSES)}")
    limit = obj.get("limit", 100)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise Invalid("field 'limit' must be an integer 1..1000")
    return RunList(fid, status, limit)


_PARSERS.update({
    T.RUN_BEGIN: _parse_run_begin,
    T.RUN_CALL: _parse_run_call,
    T.RUN_RESULT: _parse_run_result,
    T.RUN_INTERRUPT: _parse_run_interrupt,
    T.RUN_END: _parse_run_end,
    T.RUN_LIST: _parse_run_list,
    T.RUN_PENDING: lambda o, i: RunPending(i),
})
# ---------------------------------------------------------------------------- end of runs


#: Every frame a client may send: a request frame or a run frame.
AnyClientFrame = Union[ClientFrame, RunFrame]


def decode_client_frame(data: str | bytes, max_bytes: int = MAX_FRAME_BYTES) -> AnyClientFrame:
    """Parse one client frame.

    Raises:
        FrameError: wrapping the specific :class:`HubError` (bad_json, unknown_type,
            invalid, too_large) and the frame's ``id`` when one could be read.
    """
    if len(data) > max_bytes:
        raise FrameError(TooLarge(f"frame exceeds {max_bytes} bytes"), None)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise FrameError(BadJson("frame is not valid JSON"), None) from None
    # Each level of nesting opens a bracket: a frame with at most MAX_JSON_DEPTH of them
    # (strings included, so this only over-counts) cannot be too deep; skip the walk.
    if _brackets(data) > MAX_JSON_DEPTH and too_deep(obj):
        fid = obj.get("id") if isinstance(obj, dict) else None
        raise FrameError(TooDeep(f"frame nested deeper than {MAX_JSON_DEPTH} levels"),
                         fid if type(fid) is int else None)
    if not isinstance(obj, dict):
        raise FrameError(Invalid("frame must be a JSON object"), None)
    fid = obj.get("id")
    if isinstance(fid, bool) or not isinstance(fid, int):
        fid_out = None
    else:
        fid_out = fid
    typ = obj.get("type")
    parser = _PARSERS.get(typ) if isinstance(typ, str) else None
    if parser is None:
        raise FrameError(UnknownType(f"unknown frame type {typ!r}"), fid_out)
    if fid_out is None:
        raise FrameError(Invalid("field 'id' must be an integer"), None)
    try:
        frame: AnyClientFrame = parser(obj, fid_out)
        return frame
    except HubError as exc:
        raise FrameError(exc, fid_out) from None


def encode(obj: Any) -> bytes:
    return orjson.dumps(obj)


def encode_text(obj: Any) -> str:
    """One frame as the text a WebSocket sends: encode once, send the same text to all."""
    return orjson.dumps(obj).decode()


# ---------------------------------------------------------------------------- one edge
# A hub error becomes a WebSocket frame, an HTTP JSON body or an OpenAI error body here and
# nowhere else: the same code, message, retryable flag and extras on every interface.

_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                 403: "permission_error", 404: "invalid_request_error",
                 408: "timeout_error", 409: "invalid_request_error",
                 413: "invalid_request_error", 422: "invalid_request_error",
                 429: "rate_limit_error"}


def _error_fields(exc: HubError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": exc.code.value, "message": exc.message,
                           "retryable": exc.retryable}
    if exc.retry_after is not None:
        out["retry_after"] = round(exc.retry_after, 3)
    if exc.param is not None:
        out["param"] = exc.param
    if exc.request is not None:
        out["request"] = exc.request
    return out


def error_frame(exc: HubError, frame_id: int | None) -> dict[str, Any]:
    """The ``error`` frame answering frame ``frame_id``."""
    return {"type": T.ERROR, "id": frame_id, **_error_fields(exc)}


def error_body(exc: HubError) -> dict[str, Any]:
    """The JSON body of an HTTP error: ``{"error": {code, message, retryable, ...}}``."""
    return {"error": _error_fields(exc)}


def openai_error_body(exc: HubError, oai_code: str | None = None) -> dict[str, Any]:
    """The body of an OpenAI-style error (``/v1``): ``{"error": {message, type, param,
    code}}``; ``oai_code`` overrides the code where OpenAI names the case differently."""
    status = exc.http_status
    return {"error": {"message": exc.message,
                      "type": _OPENAI_TYPES.get(status, "server_error"),
                      "param": exc.param, "code": oai_code or exc.code.value}}


# ---------------------------------------------------------------------------- hub frames


def ok_frame(frame_id: int, **fields: Any) -> dict[str, Any]:
    """The ``ok`` reply to frame ``frame_id``."""
    return {"type": T.OK, "id": frame_id, **fields}


def hello_frame(role: str, tenant: str, handle: str, now: float,
                heartbeat: float) -> dict[str, Any]:
    return {"type": T.HELLO, "protocol": PROTOCOL_VERSION, "role": role, "tenant": tenant,
            "handle": handle, "now": now, "heartbeat": heartbeat}


def resolved_frame(view: dict[str, Any]) -> dict[str, Any]:
    """Push to an op's waiters: the request reached its terminal state."""
    return {"type": T.RESOLVED, "request": view}


def inbox_add_frame(view: dict[str, Any]) -> dict[str, Any]:
    """Push to a human's inboxes: a new item (or, for a known op_id, an updated one)."""
    return {"type": T.INBOX_ADD, "request": view}


def inbox_remove_frame(view: dict[str, Any]) -> dict[str, Any]:
    return {"type": T.INBOX_REMOVE, "op_id": view["op_id"], "request": view}


# The same frames as text, around a request view already encoded (``Request.view_text``):
# the view is encoded once per transition and spliced into the reply and every push. Each
# gives exactly what ``encode_text`` gives for the frame built by its dict twin above.

def ok_request_text(frame_id: int, view: str, attached: bool = False) -> str:
    """``encode_text(ok_frame(frame_id, request=..., [attached=True]))``."""
    tail = ',"attached":true}' if attached else "}"
    return f'{{"type":"ok","id":{int(frame_id)},"request":{view}{tail}'


def resolved_text(view: str) -> str:
    """``encode_text(resolved_frame(...))``."""
    return f'{{"type":"resolved","request":{view}}}'


def inbox_add_text(view: str) -> str:
    """``encode_text(inbox_add_frame(...))``."""
    return f'{{"type":"inbox.add","request":{view}}}'


def inbox_remove_text(op_id: str, view: str) -> str:
    """``encode_text(inbox_remove_frame(...))``."""
    return f'{{"type":"inbox.remove","op_id":{orjson.dumps(op_id).decode()},"request":{view}}}'


def reconnect_frame(after_ms: tuple[int, int]) -> dict[str, Any]:
    """Tell a client the hub is going away and how long to pause (a random pause in the
    range) before reconnecting."""
    return {"type": T.RECONNECT, "after_ms": list(after_ms)}


def error_from_frame(frame: dict[str, Any]) -> HubError:
    """Rebuild the exception an ``error`` frame describes (used by the SDK)."""
    try:
        code = ErrorCode(str(frame.get("code")))
    except ValueError:
        code = ErrorCode.INTERNAL
    cls = ERRORS_BY_CODE.get(code, RetryLater)
    message = str(frame.get("message") or code.value)
    if cls is LimitExceeded:
        exc: HubError = LimitExceeded(message, code=code, request=frame.get("request"))
    else:
        exc = cls(message, request=frame.get("request"))
    retry_after = frame.get("retry_after")
    if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool):
        exc.retry_after = float(retry_after)
    return exc
