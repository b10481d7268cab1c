"""The codec: one place decodes frames; every bad input maps to a code."""

from __future__ import annotations

import orjson
import pytest

from hub import errors as e
from hub import protocol as p


def dec(obj: object) -> p.ClientFrame:
    return p.decode_client_frame(orjson.dumps(obj))


def code_of(data: str | bytes) -> str:
    with pytest.raises(e.FrameError) as info:
        p.decode_client_frame(data)
    return info.value.code.value


def test_ask_decodes_to_a_typed_frame() -> None:
    f = dec({"type": "ask", "id": 3, "op_id": "o", "to": "me", "question": "Q?",
             "conversation": "c", "choices": ["a", "b"], "wait": 5})
    assert isinstance(f, p.Ask)
    assert f.choices == ("a", "b") and f.wait == 5.0 and f.expires_in is None


@pytest.mark.parametrize("data,code", [
    ("{not json", "bad_json"),
    ("[1,2]", "invalid"),
    ('{"type": "nope", "id": 1}', "unknown_type"),
    ('{"type": "ask"}', "invalid"),
    ('{"type": "ask", "id": 1, "to": "me", "question": "Q", "conversation": "c"}', "invalid"),
    ('{"type": "ask", "id": 1, "op_id": 5, "to": "me", "question": "Q", "conversation": "c"}',
     "invalid"),
    ('{"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q", "conversation": "c",'
     ' "wait": "soon"}', "invalid"),
    ('{"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q", "conversation": "c",'
     ' "choices": "yes,no"}', "invalid"),
    ('{"type": "respond", "id": 1, "op_id": "o", "status": "maybe"}', "invalid"),
    ('{"type": "respond", "id": 1, "op_id": "o", "status": "pending"}', "invalid"),
    ('{"type": "respond", "id": 1, "op_id": "o", "status": ["answered"]}', "invalid"),
    ('{"type": "respond", "id": 1, "op_id": "o", "status": null}', "invalid"),
    ('{"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q", "conversation": "c",'
     ' "kind": "poll"}', "invalid"),
    ('{"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q", "conversation": "c",'
     ' "kind": ["question"]}', "invalid"),
    ('{"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q", "conversation": "c",'
     ' "kind": {"a": 1}}', "invalid"),
    ('{"type": "history", "id": 1, "limit": true}', "invalid"),
    ("x" * (p.MAX_FRAME_BYTES + 1), "too_large"),
])
def test_bad_frames_get_codes(data: str, code: str) -> None:
    assert code_of(data) == code


def test_kinds_and_statuses_decode_to_their_members() -> None:
    """Kind and status are looked up from their text: the member itself, the default when
    absent."""
    ask = {"type": "ask", "id": 1, "op_id": "o", "to": "me", "question": "Q",
           "conversation": "c"}
    assert dec(ask).kind is p.Kind.QUESTION
    assert dec({**ask, "kind": "approval"}).kind is p.Kind.APPROVAL
    respond = {"type": "respond", "id": 1, "op_id": "o", "value": 1}
    assert dec(respond).status is p.Status.ANSWERED
    assert dec({**respond, "status": "declined"}).status is p.Status.DECLINED
    assert p.KIND_OF == {k.value: k for k in p.Kind}
    assert p.STATUS_OF == {s.value: s for s in p.Status}


def test_frame_id_is_echoed_when_readable() -> None:
    with pytest.raises(e.FrameError) as info:
        p.decode_client_frame('{"type": "wait", "id": 9}')
    assert info.value.frame_id == 9


def test_every_error_code_has_a_status_and_a_class() -> None:
    for code in e.ErrorCode:
        assert code in e.ERROR_TABLE
        assert code in e.ERRORS_BY_CODE
    assert not e.Overloaded().retryable
    assert e.RetryLater().retryable


def test_error_frame_round_trip() -> None:
    frame = p.error_frame(e.Conflict("dup", request={"op_id": "o"}), 4)
    exc = p.error_from_frame(orjson.loads(orjson.dumps(frame)))
    assert isinstance(exc, e.Conflict) and exc.request == {"op_id": "o"}


def test_the_sdk_maps_every_error_code() -> None:
    from client_sdk import errors

    for code in e.ErrorCode:
        frame = {"type": "error", "code": code.value, "message": "m"}
        exc = errors.from_frame(frame)
        assert isinstance(exc, errors.A2HError) and exc.code == code.value
        if issubclass(e.ERRORS_BY_CODE[code], e.LimitExceeded):
            assert isinstance(exc, errors.LimitExceeded)
        if code is e.ErrorCode.OVERLOADED:
            assert isinstance(exc, errors.Overloaded) and not isinstance(exc, errors.RetryableError)
