"""ntfy (https://ntfy.sh): one POST to the topic URL per event.

The body is the question as plain text; headers carry the title, a click action to the
item in the inbox (``Click``, and a "view" button in ``Actions``) and tags. Header values
that are not ASCII are RFC 2047 encoded, which ntfy decodes.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import orjson

from hub.notify.events import EventType

#: characters of a question sent (ntfy keeps messages short; the inbox has the rest)
BODY_CHARS = 1000


def item_link(base_url: str, op_id: str) -> str:
    """The inbox's deep link to one request."""
    return f"{base_url.rstrip('/')}/#item={quote(op_id, safe='')}"


def header_value(text: str) -> str:
    text = " ".join(text.split())[:250]
    if text.isascii():
        return text
    return "=?UTF-8?B?" + base64.b64encode(text.encode()).decode() + "?="


def title_of(view: dict[str, Any]) -> str:
    what = "Approval" if view.get("kind") == "approval" else "Question"
    return f"{what} from {view.get('from') or 'an agent'}"


def message(event_body: bytes, base_url: str, token: str | None) -> tuple[dict[str, str], bytes]:
    """Headers and body of the ntfy POST for one event body (``events.event_body``)."""
    event = orjson.loads(event_body)
    data: dict[str, Any] = event["data"]
    base = base_url.rstrip("/")
    if event["type"] == EventType.RUN_NEEDS_ATTENTION.value:
        title = f"Run {data.get('run_id')} needs attention"
        text = str(data.get("reason") or "A run stopped and needs a person's decision.")
        link, tags = base + "/", "warning"
    else:
        title = title_of(data)
        text = str(data.get("question") or "")
        link = item_link(base, str(data.get("op_id")))
        tags = "white_check_mark" if data.get("kind") == "approval" else "question"
    if len(text) > BODY_CHARS:
        text = text[:BODY_CHARS - 1] + "…"
    headers = {
        "title": header_value(title),
        "click": link,
        "actions": f"view, Open in the inbox, {link}, clear=true",
        "tags": tags,
        "content-type": "text/plain; charset=utf-8",
        "user-agent": "a2h-hub",
    }
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers, text.encode()
