"""The codec: one decode per inbound frame, one encode per push (hub/protocol.py, orjson)."""

from __future__ import annotations

import orjson

from hub.protocol import decode_client_frame


def test_decode_ask(benchmark, ask_bytes):  # type: ignore[no-untyped-def]
    frame = benchmark(decode_client_frame, ask_bytes)
    assert frame.op_id


def test_decode_ask_str(benchmark, ask_bytes):  # type: ignore[no-untyped-def]
    # uvicorn hands text frames to the app as str
    text = ask_bytes.decode()
    benchmark(decode_client_frame, text)


def test_decode_respond(benchmark, respond_bytes):  # type: ignore[no-untyped-def]
    benchmark(decode_client_frame, respond_bytes)


def test_orjson_loads_only(benchmark, ask_bytes):  # type: ignore[no-untyped-def]
    """The floor under decode_client_frame: parsing alone."""
    benchmark(orjson.loads, ask_bytes)


def test_request_view(benchmark, pending_request):  # type: ignore[no-untyped-def]
    benchmark(pending_request.view)


def test_encode_inbox_add(benchmark, pending_request):  # type: ignore[no-untyped-def]
    """What the hub does per push: build the view, encode it, hand str to the socket."""

    def push() -> str:
        return orjson.dumps({"type": "inbox.add", "request": pending_request.view()}).decode()

    assert len(benchmark(push)) > 300


def test_encode_view_prebuilt(benchmark, pending_request):  # type: ignore[no-untyped-def]
    """orjson alone on an already-built view (encode once, send to many)."""
    msg = {"type": "inbox.add", "request": pending_request.view()}
    benchmark(orjson.dumps, msg)
