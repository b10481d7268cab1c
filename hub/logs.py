"""Log lines that cannot be forged and never carry a secret.

Every field a client controls may end up in a log line (an op_id, a path, a reason). The
:class:`SafeLogFilter` sits on the hub's log handler and rewrites each record once, after
its arguments are merged into the message:

- control characters (C0, DEL, C1, and the Unicode line and paragraph separators) become
  visible escapes (``\\n``, ``\\x00``, ``\\u2028``), so one record is always one line;
- a query string that carries a token (``?token=…``, or any ``a2h_`` token) is replaced by
  ``?<redacted>``: uvicorn logs the path of a refused WebSocket with its query string.

Exception tracebacks are left alone (they are the hub's own text, and multi-line by design).
"""

from __future__ import annotations

import logging
import re

_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})

_SECRET_QUERY = re.compile(r"\?[^\s\"']*(?:token|secret|key|a2h_)[^\s\"']*", re.IGNORECASE)
_BARE_TOKEN = re.compile(r"a2h_(?:ag|hu|ad)_[A-Za-z0-9_-]{8,}")


def escape(text: str) -> str:
    """``text`` with every control character made visible."""
    return text.translate(_ESCAPES)


def redact(text: str) -> str:
    """``text`` without query strings that carry tokens, and without bare tokens."""
    return _BARE_TOKEN.sub("a2h_<redacted>", _SECRET_QUERY.sub("?<redacted>", text))


class SafeLogFilter(logging.Filter):
    """Rewrites every record's message: secrets redacted, control characters escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: log what we have rather than nothing
            message = f"{record.msg!r} {record.args!r}"
        record.msg = escape(redact(message))
        record.args = None
        return True


def configure(level: str) -> None:
    """Log to stderr through the safe filter; uvicorn's loggers propagate to it."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(SafeLogFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
