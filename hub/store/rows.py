"""Row mapping of requests, shared by the SQL of requests and of the journal.

A row is the tuple a ``SELECT {REQUEST_COLUMNS}`` returns; the payload (question, choices,
context, ...) is one JSON blob, because nothing queries inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from hub.core import Request
from hub.protocol import KIND_OF, STATUS_OF, TEXT, OpId

REQUEST_COLUMNS = ("tenant, op_id, conversation, to_human, sender, payload, payload_hash, "
                   "status, value, actor, created_at, deadline, fixed_deadline, resolved_at, "
                   "human_seconds")


def request_payload(req: Request) -> bytes:
    return orjson.dumps({
        "kind": TEXT[req.kind], "question": req.question,
        "choices": list(req.choices) if req.choices is not None else None,
        "context": req.context, "default": req.default, "schema": req.schema,
        "tools": req.tools,
    })


def row_to_request(row: Sequence[Any]) -> Request:
    (tenant, op_id, conversation, to_human, sender, payload, phash, status, value, actor,
     created_at, deadline, fixed, resolved_at, human_seconds) = row
    p = orjson.loads(payload)
    return Request(
        tenant=tenant, op_id=OpId(op_id), conversation=conversation, to=to_human,
        sender=sender, kind=KIND_OF[p["kind"]], question=p["question"],
        choices=tuple(p["choices"]) if p["choices"] is not None else None,
        context=p["context"], default=p["default"], schema=p.get("schema"),
        tools=p.get("tools"), payload_hash=phash, status=STATUS_OF[status],
        value=orjson.loads(value) if value is not None else None, actor=actor,
        created_at=created_at, deadline=deadline, fixed_deadline=bool(fixed),
        resolved_at=resolved_at, human_seconds=human_seconds,
    )
