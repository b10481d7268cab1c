"""Shared fixtures of the micro-benchmarks (run: ``python -m pytest bench/micro --benchmark-only``)."""

from __future__ import annotations

import time

import orjson
import pytest

from hub.core import AskReceived, RoomCore
from hub.protocol import Ask, Conversation, OpId

#: A typical ask as the SDK sends it (~300 bytes).
ASK_FRAME = {
    "type": "ask", "id": 17, "op_id": "9f2c6d1e0b8a4f3c9d2e7a6b5c4d3e2f", "to": "me",
    "question": "Deploy build 4711 to production?", "conversation": "deploys",
    "kind": "question", "choices": ["yes", "no"], "context": {"build": 4711, "branch": "main"},
    "default": None, "wait": 60, "expires_in": None,
}
RESPOND_FRAME = {"type": "respond", "id": 3, "op_id": "9f2c6d1e0b8a4f3c9d2e7a6b5c4d3e2f",
                 "value": "yes", "status": "answered"}


def make_ask(i: int, conversation: str = "deploys") -> AskReceived:
    return AskReceived(
        Ask(id=i, op_id=OpId(f"{i:032x}"), to="me", question="Deploy build 4711 to production?",
            conversation=Conversation(conversation), choices=("yes", "no"),
            context={"build": 4711, "branch": "main"}),
        tenant="default", sender="agent:ci")


@pytest.fixture
def ask_bytes() -> bytes:
    return orjson.dumps(ASK_FRAME)


@pytest.fixture
def respond_bytes() -> bytes:
    return orjson.dumps(RESPOND_FRAME)


@pytest.fixture
def pending_request():  # type: ignore[no-untyped-def]
    core = RoomCore("default", "deploys")
    d = core.handle(make_ask(1), time.time())
    return d.ops[0].request
