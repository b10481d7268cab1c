"""``client_sdk.SyncHub``: the async Hub on a private loop, for scripts and notebooks
(issue 13). From plain code, and from inside a running event loop (Jupyter's case)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_util import HubProcess, create_token

from client_sdk import AccessDenied, AlreadyResolved, SyncHub, call_id

pytestmark = pytest.mark.e2e


class Env:
    def __init__(self, url: str, agent: str, human: str) -> None:
        self.url, self.agent, self.human = url, agent, human


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = tmp_path / "sync.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="me")
    with HubProcess(db) as hp:
        yield Env(hp.url, agent, human)


def sdk_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "a2h sync hub"]


def round_trip(env: Env) -> None:
    """Plain blocking code, as a script or a notebook cell would write it."""
    with SyncHub(env.url, env.agent) as agent, SyncHub(env.url, env.human) as human:
        assert agent.ping() > 0
        first = agent.ask("me", "Deploy?", conversation="c", choices=["yes", "no"], wait=0)
        assert first.pending
        (item,) = human.inbox()
        assert item.op_id == first.op_id and item.question == "Deploy?"
        assert human.respond(item.op_id, "yes").value == "yes"
        assert (agent.wait(first.op_id, wait=5).status, agent.wait(first.op_id).value) == \
            ("answered", "yes")
        approval = agent.approve_request("me", {"action": "drop table"}, conversation="c",
                                         wait=0)
        assert human.reject(approval.op_id, "no way").comment == "no way"
        gone = agent.ask("me", "Never mind?", conversation="c", wait=0)
        assert agent.cancel(gone.op_id).status == "cancelled"
        with pytest.raises(AlreadyResolved):
            agent.cancel(gone.op_id)
        assert {a.op_id for a in human.history()} == {first.op_id, approval.op_id, gone.op_id}
        # A blocking ask while someone answers from another thread.
        answered = threading.Event()

        def person() -> None:
            with SyncHub(env.url, env.human) as p:
                for _ in range(500):
                    items = p.inbox()
                    if items:
                        p.respond(items[0].op_id, "later")
                        answered.set()
                        return
                    answered.wait(0.01)

        helper = threading.Thread(target=person)
        helper.start()
        got = agent.ask("me", "Blocking?", conversation="c", wait=20)
        helper.join()
        assert answered.is_set() and (got.status, got.value) == ("answered", "later")
        # Durable runs: the journaled function runs in the caller's thread.
        seen: list[tuple[str, int]] = []

        def step(x: int) -> int:
            seen.append((call_id(), threading.get_ident()))
            return x * 2

        with agent.run("sync-run", conversation="c", version="1") as run:
            assert run.call(step, 21) == 42
        assert seen == [("sync-run:0", threading.get_ident())]
        assert [r.status for r in agent.runs()] == ["completed"]


def test_sync_hub_from_plain_code(env: Env) -> None:
    before = len(sdk_threads())
    round_trip(env)
    assert len(sdk_threads()) == before  # each SyncHub joined its thread on close


async def test_sync_hub_inside_a_running_event_loop(env: Env) -> None:
    """A notebook cell runs inside Jupyter's loop: plain calls must neither deadlock nor
    raise "this event loop is already running"."""
    loop = asyncio.get_running_loop()
    assert loop.is_running()
    round_trip(env)  # a plain function called from a coroutine, on the loop's thread
    assert asyncio.get_running_loop() is loop  # the caller's loop was left alone


def test_a_refused_token_raises_and_leaves_no_thread(env: Env) -> None:
    before = len(sdk_threads())
    with pytest.raises(AccessDenied):
        SyncHub(env.url, "a2h_ag_not-a-token")
    assert len(sdk_threads()) == before
