"""The spliced frame texts (``hub.protocol.*_text``, ``Request.view_text``) are byte for
byte what encoding the frame dicts gives, and the cached view follows every change."""

from __future__ import annotations

import dataclasses

from hub.core import AnswerSubmitted, AskReceived, RoomCore, WaitRequested
from hub.protocol import (
    Ask,
    Conversation,
    Kind,
    OpId,
    Status,
    encode_text,
    inbox_add_frame,
    inbox_add_text,
    inbox_remove_frame,
    inbox_remove_text,
    ok_frame,
    ok_request_text,
    resolved_frame,
    resolved_text,
)


def _ask(op_id: str = "op-1", expires_in: float | None = None) -> Ask:
    return Ask(id=1, op_id=OpId(op_id), to="takeru", question="Deploy? ✓ \"now\"",
               conversation=Conversation("c1"), kind=Kind.QUESTION, choices=("yes", "no"),
               context={"nested": [1, 2.5, None, {"k": "ü"}]}, wait=30.0,
               expires_in=expires_in)


def test_frame_texts_equal_encoded_dicts() -> None:
    core = RoomCore("t", "c1")
    d = core.handle(AskReceived(_ask(), "t", "agent:a"), 100.0)
    req = d.ops[0].request
    view, text = req.view(), req.view_text()
    assert text == encode_text(view)
    for fid in (0, 7, 2**53):
        assert ok_request_text(fid, text) == encode_text(ok_frame(fid, request=view))
        assert ok_request_text(fid, text, True) == \
            encode_text(ok_frame(fid, request=view, attached=True))
    assert resolved_text(text) == encode_text(resolved_frame(view))
    assert inbox_add_text(text) == encode_text(inbox_add_frame(view))
    assert inbox_remove_text(req.op_id, text) == encode_text(inbox_remove_frame(view))


def test_view_text_follows_changes() -> None:
    core = RoomCore("t", "c1")
    req = core.handle(AskReceived(_ask(), "t", "agent:a"), 100.0).ops[0].request
    first = req.view_text()
    assert req.view_text() is first  # cached
    core.handle(WaitRequested(OpId("op-1"), 60.0), 150.0)  # extends the open deadline
    assert req.view_text() == encode_text(req.view()) != first
    core.handle(AnswerSubmitted(OpId("op-1"), "takeru", Status.ANSWERED, "yes"), 151.0)
    assert req.view_text() == encode_text(req.view())
    assert '"status":"answered"' in req.view_text()
    copy = dataclasses.replace(req)
    assert copy == req and copy.view_text() == req.view_text()


def test_text_frames_are_what_websockets_would_send() -> None:
    """The gateway's own frame header (hub.server.ws.text_frame) against websockets'
    serializer, across the three length encodings and their edges; and a client parses it."""
    from websockets.client import ClientProtocol
    from websockets.frames import OP_TEXT, Frame
    from websockets.protocol import State
    from websockets.uri import parse_uri

    from hub.server.ws import text_frame

    client = ClientProtocol(parse_uri("ws://hub.invalid/ws"), state=State.OPEN, max_size=None)
    for n in (0, 1, 125, 126, 127, 65535, 65536, 70_000):
        payload = ("é" * (n // 2) + "a" * (n % 2)).encode()  # n bytes of UTF-8
        ours = text_frame(payload)
        assert ours == Frame(OP_TEXT, payload).serialize(mask=False, extensions=[]), n
        client.receive_data(ours)
        [event] = client.events_received()
        assert isinstance(event, Frame)
        assert (event.opcode, event.fin, event.data) == (OP_TEXT, True, payload)
