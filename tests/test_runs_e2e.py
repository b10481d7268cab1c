"""Durable runs over real processes (issue 6): a real ``a2h serve``, an agent script in a
subprocess killed with SIGKILL at the awkward moments, a local mock API counting calls by
idempotency key. No sleeps: every wait is on a line from the agent, an event from the
mock API, or a bounded poll of the real condition.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from runs_support.mock_api import MockAPI

from client_sdk import AccessDenied, Hub, Item, NotFound

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).parent / "runs_support" / "agent.py"


@dataclass
class Env:
    db: Path
    hub: HubProcess
    agent_token: str
    human_token: str
    other_tenant_agent: str


def _env(tmp: Path) -> Env:
    db = tmp / "runs.db"
    agent = create_token(db, agent="bot")
    human = create_token(db, human="takeru")
    other = create_token(db, agent="bot", tenant="other")
    return Env(db, HubProcess(db), agent, human, other)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = _env(tmp_path_factory.mktemp("runs"))
    with e.hub:
        yield e


@pytest.fixture
def api() -> Iterator[MockAPI]:
    with MockAPI() as m:
        yield m


class Agent:
    """tests/runs_support/agent.py in a subprocess; its stdout lines arrive on a queue."""

    def __init__(self, env: Env, api: MockAPI, run_id: str, *extra: str) -> None:
        self.stderr = open(env.db.parent / f"{run_id}.{time.monotonic_ns()}.err", "w+")
        cmd = [sys.executable, str(AGENT), "--url", env.hub.url, "--token", env.agent_token,
               "--api", api.url, "--run", run_id, *extra]
        pythonpath = os.pathsep.join([str(Path(__file__).parents[1]),
                                      os.environ.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env={**os.environ, "PYTHONPATH": pythonpath})
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    async def expect(self, prefix: str, timeout: float = 30.0) -> str:
        """The next stdout line starting with ``prefix`` (earlier lines are skipped)."""
        end = time.monotonic() + timeout * UNIT
        while True:
            left = end - time.monotonic()
            try:
                line = await asyncio.to_thread(self.lines.get, True, max(left, 0.01))
            except queue.Empty:
                raise AssertionError(f"agent printed no {prefix!r} in time") from None
            if line is None:
                self.stderr.seek(0)
                raise AssertionError(f"agent exited ({self.proc.wait()}) before {prefix!r}:\n"
                                     + self.stderr.read()[-4000:])
            if line.startswith(prefix):
                return line

    async def error(self, name: str) -> dict[str, Any]:
        line = await self.expect("ERROR ")
        _, cls, payload = line.split(" ", 2)
        assert cls == name, line
        return dict(json.loads(payload))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    async def exit_code(self) -> int:
        return await asyncio.to_thread(self.proc.wait, 30 * UNIT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.stderr.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for a in started:
        a.close()


def spawn(agents: list[Agent], env: Env, api: MockAPI, run_id: str, *extra: str) -> Agent:
    a = Agent(env, api, run_id, *extra)
    agents.append(a)
    return a


async def inbox_item(human: Hub, run_id: str) -> Item:
    async def find() -> Item | None:
        for item in await human.inbox():
            if isinstance(item.context, dict) and item.context.get("run_id") == run_id:
                return item
        return None

    item: Item = await until(find, 20)
    return item


async def run_status(hub: Hub, run_id: str) -> str:
    return {r.run_id: r.status for r in await hub.runs()}[run_id]


async def arrived(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 20 * UNIT), "the mock API got no request"


# ---------------------------------------------------------------------------- the scenario


async def test_sigkill_between_calls(env: Env, api: MockAPI, agents: list[Agent]) -> None:
    first = spawn(agents, env, api, "run-a", "--pause-after", "read_issue")
    await first.expect("PAUSED")
    first.kill()
    second = spawn(agents, env, api, "run-a")
    await second.expect("DONE")
    assert await second.exit_code() == 0
    assert api.seen("read_issue") == 1  # served from the journal on replay
    assert api.count("post_comment", "run-a:1") == 1 and api.seen("post_comment") == 1
    assert api.seen("notify") == 1
    async with Hub(env.hub.url, token=env.agent_token) as hub:
        assert await run_status(hub, "run-a") == "completed"


async def test_sigkill_during_the_second_call(env: Env, api: MockAPI,
                                              agents: list[Agent]) -> None:
    hold = api.hold("post_comment")
    first = spawn(agents, env, api, "run-b")
    await arrived(hold.arrived)  # the comment is posted; the response has not left yet
    first.kill()
    hold.release.set()
    second = spawn(agents, env, api, "run-b")
    await second.expect("DONE")
    assert await second.exit_code() == 0
    # Sent again with the same call_id as its key: the API applied it once.
    assert api.seen("post_comment", "run-b:1") == 2
    assert api.count("post_comment") == 1
    assert api.seen("read_issue") == 1 and api.seen("notify") == 1


async def test_sigkill_while_waiting_for_an_approval(env: Env, api: MockAPI,
                                                     agents: list[Agent]) -> None:
    first = spawn(agents, env, api, "run-c", "--approval")
    async with Hub(env.hub.url, token=env.human_token) as human:
        item = await inbox_item(human, "run-c")
        assert item.kind == "approval" and item.context["call_id"] == "run-c:1"
        assert item.context["payload"]["action"] == "post_comment"
        first.kill()
        async with Hub(env.hub.url, token=env.agent_token) as agent_hub:
            assert item.op_id in {i.op_id for i in await agent_hub.pending()}
        await human.approve(item.op_id, "fine")  # answered while the agent is down
    second = spawn(agents, env, api, "run-c", "--approval")
    line = await second.expect("STEP approval")
    assert json.loads(line.split(" ", 2)[2]) == {"approved": True, "comment": "fine"}
    await second.expect("DONE")
    assert api.seen("read_issue") == 1 and api.count("post_comment") == 1
    assert api.seen("notify") == 1


async def test_sigkill_during_an_unsafe_call_asks_a_human(env: Env, api: MockAPI,
                                                          agents: list[Agent]) -> None:
    hold = api.hold("notify")
    first = spawn(agents, env, api, "run-d")
    await arrived(hold.arrived)
    first.kill()
    hold.release.set()
    second = spawn(agents, env, api, "run-d")
    err = await second.error("UnknownOutcome")
    assert "notify" in err["message"] and err["op_id"]
    assert api.seen("notify") == 1  # not sent a second time
    async with Hub(env.hub.url, token=env.human_token) as human, \
            Hub(env.hub.url, token=env.agent_token) as hub:
        assert await run_status(hub, "run-d") == "needs_attention"
        item = await inbox_item(human, "run-d")
        assert item.op_id == err["op_id"] and item.kind == "question"
        assert item.choices == ["it happened", "retry it", "fail the run"]
        assert item.context["call"] == "notify" and item.context["args"] == [1000]
        assert "notify" in item.question
        await human.respond(item.op_id, {"decision": "it happened",
                                         "result": '{"sent": true, "comment_id": 1000}'})
        third = spawn(agents, env, api, "run-d")
        line = await third.expect("STEP notify")
        assert json.loads(line.split(" ", 2)[2]) == {"sent": True, "comment_id": 1000}
        await third.expect("DONE")
        assert api.seen("notify") == 1
        assert api.count("post_comment") == 1 and api.seen("read_issue") == 1
        assert await run_status(hub, "run-d") == "completed"


# ---------------------------------------------------------------------------- the hub dies


async def test_hub_restart_while_a_run_waits_for_an_approval(
        tmp_path: Path, api: MockAPI, agents: list[Agent]) -> None:
    env = _env(tmp_path)
    with env.hub:
        agent = spawn(agents, env, api, "run-e", "--approval")
        async with Hub(env.hub.url, token=env.human_token) as human:
            item = await inbox_item(human, "run-e")
        env.hub.restart()  # SIGKILL, then the same database and port
        async with Hub(env.hub.url, token=env.human_token) as human, \
                Hub(env.hub.url, token=env.agent_token) as hub:
            assert [i.op_id for i in await human.inbox()] == [item.op_id]  # still pending
            assert item.op_id in {i.op_id for i in await hub.pending()}
            assert agent.proc.poll() is None
            await human.approve(item.op_id)
            await agent.expect("DONE")
            assert await agent.exit_code() == 0
            assert await run_status(hub, "run-e") == "completed"
    assert api.count("post_comment") == 1 and api.seen("notify") == 1


# ---------------------------------------------------------------------------- refusals


async def test_version_change(env: Env, api: MockAPI, agents: list[Agent]) -> None:
    first = spawn(agents, env, api, "run-f", "--pause-after", "read_issue", "--version", "1")
    await first.expect("PAUSED")
    first.kill()
    second = spawn(agents, env, api, "run-f", "--version", "2")
    err = await second.error("RunVersionChanged")
    assert err["message"] == ("the run was interrupted and can't resume, because its code "
                              "version changed from 1 to 2 since it started")
    async with Hub(env.hub.url, token=env.agent_token) as hub:
        [run] = [r for r in await hub.runs(status="needs_attention") if r.run_id == "run-f"]
        assert run.reason == err["message"] and run.version == "1"
    assert api.seen("read_issue") == 1 and api.seen("post_comment") == 0


async def test_divergence(env: Env, api: MockAPI, agents: list[Agent]) -> None:
    first = spawn(agents, env, api, "run-g", "--pause-after", "read_issue")
    await first.expect("PAUSED")
    first.kill()
    second = spawn(agents, env, api, "run-g", "--variant")  # reads with fetch_issue now
    err = await second.error("ReplayDivergence")
    assert "read_issue" in err["message"] and "fetch_issue" in err["message"]
    assert api.seen("read_issue") == 1  # neither skipped nor re-run
    async with Hub(env.hub.url, token=env.agent_token) as hub:
        assert await run_status(hub, "run-g") == "needs_attention"


async def test_rejected_approval(env: Env, api: MockAPI, agents: list[Agent]) -> None:
    agent = spawn(agents, env, api, "run-h", "--approval")
    async with Hub(env.hub.url, token=env.human_token) as human:
        item = await inbox_item(human, "run-h")
        await human.reject(item.op_id, "not this wording")
    err = await agent.error("Rejected")
    assert err["comment"] == "not this wording" and "not this wording" in err["message"]
    assert api.seen("post_comment") == 0
    async with Hub(env.hub.url, token=env.agent_token) as hub:
        assert await run_status(hub, "run-h") == "failed"


async def test_run_frames_need_an_agent_token_and_stay_in_its_tenant(env: Env) -> None:
    base = {"run_id": "tenant-run", "exec": "x", "position": 0}
    frames = [
        {"type": "run.begin", "run_id": "tenant-run", "conversation": "c", "version": "1"},
        {"type": "run.call", **base, "name": "f", "args_hash": "h"},
        {"type": "run.result", **base, "ok": True, "result": 1},
        {"type": "run.interrupt", **base, "payload": "ok?", "to": "takeru"},
        {"type": "run.end", "run_id": "tenant-run", "exec": "x", "ok": True},
        {"type": "run.list"},
        {"type": "run.pending"},
    ]
    async with Hub(env.hub.url, token=env.human_token) as human:
        for frame in frames:
            with pytest.raises(AccessDenied):
                await human._request(dict(frame))
    async with Hub(env.hub.url, token=env.agent_token) as a, \
            Hub(env.hub.url, token=env.other_tenant_agent) as b:
        began = await a._request(dict(frames[0]))
        mine = {**base, "exec": began["exec"]}
        call = await a._request({"type": "run.call", **mine, "name": "f", "args_hash": "h"})
        assert call["outcome"] == "run"
        # Tenant "other" cannot see or touch it, even knowing its run id and exec id.
        for frame in frames[1:5]:
            with pytest.raises(NotFound):
                await b._request({**frame, **({"exec": began["exec"]} if "exec" in frame
                                              else {})})
        assert "tenant-run" not in {r.run_id for r in await b.runs()}
        with pytest.raises(NotFound):  # takeru is a human of the default tenant only
            await b._request({**frames[0], "escalate_to": "takeru"})
        # The same run id in "other" is another run with its own journal.
        theirs = await b._request(dict(frames[0]))
        assert theirs["run"]["agent"] == "agent:bot" and theirs["exec"] != began["exec"]
        assert (await b._request({"type": "run.call", **base, "exec": theirs["exec"],
                                  "name": "g", "args_hash": "h2"}))["outcome"] == "run"
        [run] = [r for r in await a.runs() if r.run_id == "tenant-run"]
        assert run.calls == 1 and run.status == "active"


async def test_finished_runs_are_cleaned_up_after_the_retention_window(tmp_path: Path) -> None:
    db = tmp_path / "retention.db"
    token = create_token(db, agent="bot")
    with HubProcess(db, "--retention", "0.5") as hub:
        async with Hub(hub.url, token=token) as a:
            async with a.run("short-lived", conversation="c", version="1") as run:
                await run.call(len, "abc")
            async with a.run("still-open", conversation="c", version="1") as run:
                await run.call(len, "abcd")
                # The store's periodic purge (the alarms loop) deletes runs finished over
                # the retention window ago, and keeps active ones.
                async def purged() -> bool:
                    return "short-lived" not in {r.run_id for r in await a.runs()}

                await until(purged, 20)
                assert "still-open" in {r.run_id for r in await a.runs(status="active")}
