"""The outbox's vocabulary (pure: no I/O, no clock): channels, event types, which channel
hears which event, and the event body every channel starts from.

A delivery row holds the body of its event exactly as it was at commit time (a Standard
Webhooks payload ``{type, timestamp, data}``), so every retry sends the same bytes under the
same ``webhook-id``, and a later purge of the request cannot change what is delivered.
"""

from __future__ import annotations

import enum
import secrets
from datetime import UTC, datetime
from typing import Any

import orjson


class Channel(enum.StrEnum):
    WEBHOOK = "webhook"
    NTFY = "ntfy"
    PUSH = "push"


class EventType(enum.StrEnum):
    REQUEST_CREATED = "request.created"
    REQUEST_RESOLVED = "request.resolved"
    RUN_NEEDS_ATTENTION = "run.needs_attention"


#: Which channels hear which event. A webhook hears everything; an ntfy topic and a browser
#: hear what asks for a person (a push for a resolution would only be noise).
CHANNELS: dict[EventType, tuple[Channel, ...]] = {
    EventType.REQUEST_CREATED: (Channel.WEBHOOK, Channel.NTFY, Channel.PUSH),
    EventType.REQUEST_RESOLVED: (Channel.WEBHOOK,),
    EventType.RUN_NEEDS_ATTENTION: (Channel.WEBHOOK, Channel.NTFY),
}


class DeliveryOutcome(enum.StrEnum):
    """How one delivery attempt ended (``Store.settle_delivery``)."""

    DONE = "done"            # delivered
    RETRY = "retry"          # failed; try again at ``next_at`` (counts an attempt)
    POSTPONED = "postponed"  # not tried; try at ``next_at`` (push coalescing, busy endpoint)
    FAILED = "failed"        # given up (too old, endpoint disabled)
    SKIPPED = "skipped"      # nothing to send any more (a push for a resolved request)


def new_message_id() -> str:
    """A ``webhook-id``: unique per event, the same for every retry and every endpoint."""
    return "msg_" + secrets.token_hex(16)


def new_endpoint_id() -> str:
    return "ep_" + secrets.token_hex(8)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def event_body(event: EventType, at: float, data: dict[str, Any]) -> bytes:
    """The Standard Webhooks payload: ``{"type", "timestamp", "data"}``."""
    return orjson.dumps({"type": event.value, "timestamp": iso(at), "data": data})
