"""The sans-I/O state machine (hub/core.py): RoomCore.handle for ask and answer."""

from __future__ import annotations

import itertools
import time

from bench.micro.conftest import make_ask
from hub.core import AnswerSubmitted, RoomCore, payload_hash
from hub.protocol import OpId, Status


def test_payload_hash(benchmark):  # type: ignore[no-untyped-def]
    ask = make_ask(1).ask
    benchmark(payload_hash, ask)


def test_handle_ask(benchmark):  # type: ignore[no-untyped-def]
    core = RoomCore("default", "deploys")
    counter = itertools.count()
    now = time.time()

    def setup():  # type: ignore[no-untyped-def]
        if len(core.requests) > 1000:
            core.requests.clear()
        return (make_ask(next(counter)), now), {}

    d = benchmark.pedantic(core.handle, setup=setup, rounds=20_000, warmup_rounds=100)
    assert d.ops


def test_handle_answer(benchmark):  # type: ignore[no-untyped-def]
    core = RoomCore("default", "deploys")
    counter = itertools.count()
    now = time.time()

    def setup():  # type: ignore[no-untyped-def]
        i = next(counter)
        core.handle(make_ask(i), now)
        if len(core.requests) > 1000:
            core.forget_terminal()
        return (AnswerSubmitted(OpId(f"{i:032x}"), "me", Status.ANSWERED, "yes"), now), {}

    d = benchmark.pedantic(core.handle, setup=setup, rounds=20_000, warmup_rounds=100)
    assert d.ops


def test_cycle_ask_answer(benchmark):  # type: ignore[no-untyped-def]
    """One whole cycle through the core, as a room does it (with cache trimming)."""
    core = RoomCore("default", "deploys")
    counter = itertools.count()
    now = time.time()

    def cycle() -> None:
        i = next(counter)
        core.handle(make_ask(i), now)
        core.handle(AnswerSubmitted(OpId(f"{i:032x}"), "me", Status.ANSWERED, "yes"), now)
        if len(core.requests) > 256:
            core.forget_terminal()

    benchmark(cycle)
