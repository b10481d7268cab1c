"""Property-based fuzzing of a real hub: arbitrary bytes and JSON at the WebSocket and the HTTP
endpoints. The hub answers with errors — never a 500, never a traceback — and a well-behaved
client on another connection keeps completing ask/answer cycles the whole time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from e2e_util import HubProcess, create_token
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from client_sdk import Hub
from hub.protocol import T

pytestmark = pytest.mark.e2e

FRAME_TYPES = [t.value for t in T]
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


class GoodClient(threading.Thread):
    """Asks and answers in a loop on its own connections until told to stop."""

    def __init__(self, url: str, agent: str, human: str) -> None:
        super().__init__(daemon=True)
        self.url, self.agent, self.human = url, agent, human
        self.cycles = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    async def _loop(self) -> None:
        async with Hub(self.url, self.agent) as a, Hub(self.url, self.human) as h:
            events = h.inbox_events()
            while not self.stop.is_set() and self.cycles < 100_000:
                task = asyncio.create_task(a.ask("good", f"cycle {self.cycles}",
                                                 conversation="good", wait=10))
                while True:
                    ev = await asyncio.wait_for(events.__anext__(), 10)
                    if ev["type"] == "inbox.add" and ev["request"]["conversation"] == "good":
                        break
                await h.respond(ev["request"]["op_id"], "ok")
                answer = await asyncio.wait_for(task, 10)
                assert answer.value == "ok"
                self.cycles += 1


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubProcess, dict[str, str]]]:
    db: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    tokens = {
        "agent": create_token(db, agent="fuzzer"),
        "human": create_token(db, human="me"),
        "good_agent": create_token(db, agent="good"),
        "good_human": create_token(db, human="good"),  # out of the fuzzer's reach
        "admin": create_token(db, admin=True),
    }
    hp = HubProcess(db, "--rate", "1000000", "--burst", "1000000", "--max-frame", "16384",
                    "--log-level", "warning").start()
    good = GoodClient(hp.url, tokens["good_agent"], tokens["good_human"])
    good.start()
    try:
        yield hp, tokens
    finally:
        good.stop.set()
        good.join(30)
        assert not good.errors, good.errors
        assert good.cycles > 0
        assert hp.proc is not None and hp.proc.poll() is None, "the hub died"
        hp.stop()
        out = "".join(hp.output)
        assert "Traceback" not in out, out[-3000:]
    hub.good = good  # type: ignore[attr-defined]


json_values = st.recursive(
    st.none() | st.booleans() | ints | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
    max_leaves=20,
)

frames = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=3000),
    json_values.map(lambda v: orjson.dumps(v).decode()),
    st.fixed_dictionaries(
        {"type": st.sampled_from(FRAME_TYPES), "id": ints | st.text(max_size=5)},
        optional={
            "op_id": st.text(max_size=40) | ints,
            "to": st.sampled_from(["me", "nobody", ""]) | ints,
            "question": st.text(max_size=200) | st.none(),
            "conversation": st.text(max_size=30),
            "choices": st.lists(st.text(max_size=10), max_size=5) | json_values,
            "wait": st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=3),
            "expires_in": st.floats(allow_nan=True) | ints,
            "value": json_values, "status": st.text(max_size=10),
            "context": json_values, "limit": ints | st.booleans(),
            "kind": st.text(max_size=10),
        },
    ).map(lambda d: orjson.dumps(d, option=orjson.OPT_NON_STR_KEYS).decode()),
    st.just("x" * 20_000),  # oversize: closes with 1009
)


class FuzzSocket:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.ws: ClientConnection | None = None

    def get(self) -> ClientConnection:
        if self.ws is None:
            self.ws = connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                              max_size=None)
            hello = orjson.loads(self.ws.recv(5))
            assert hello["type"] == "hello"
        return self.ws

    def send(self, data: str | bytes) -> None:
        ws = self.get()
        try:
            ws.send(data)
            while True:  # skip pushes; every frame gets exactly one ok or error
                frame = orjson.loads(ws.recv(5))
                assert frame["type"] in ("ok", "error", "inbox.add", "inbox.remove",
                                         "resolved"), frame
                if frame["type"] in ("ok", "error"):
                    break
            if frame["type"] == "error":
                assert isinstance(frame["code"], str) and frame["code"] != "internal", frame
        except TimeoutError:
            pytest.fail(f"no ok or error within 5 s for {data[:200]!r}")
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code in (1009, 1008, 4000), exc
            self.ws = None


@pytest.mark.parametrize("role", ["agent", "human"])
def test_fuzz_websocket(hub: tuple[HubProcess, dict[str, str]], role: str) -> None:
    hp, tokens = hub
    sock = FuzzSocket(hp.ws_url, tokens[role])

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=frames)
    def check(data: str | bytes) -> None:
        sock.send(data)

    check()
    # The fuzzed socket (or its replacement) still works.
    ws = sock.get()
    ws.send(orjson.dumps({"type": "ping", "id": 987654321}).decode())
    while True:
        frame = orjson.loads(ws.recv(5))
        if frame.get("id") == 987654321:
            assert frame["type"] == "ok"
            break


PATHS = ["/", "/healthz", "/metrics", "/api/me", "/api/session", "/api/admin/tokens",
         "/api/admin/tokens/revoke", "/api/admin/humans", "/api/requests", "/api/requests/x",
         "/api/requests/x/cancel", "/api/requests/x/respond", "/api/inbox", "/api/history",
         "/v1/models", "/v1/chat/completions", "/openapi.json", "/ws", "/nope"]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]), path=st.sampled_from(PATHS),
       suffix=st.text(alphabet="abc%/?=&.", max_size=8),
       who=st.sampled_from(["agent", "human", "admin", None, "garbage"]),
       body=st.one_of(st.binary(max_size=500), json_values.map(orjson.dumps),
                      st.fixed_dictionaries({}, optional={
                          "model": st.sampled_from(["me", "human/me", "nobody"]) | ints,
                          "messages": json_values | st.just([{"role": "user", "content": "hi"}]),
                          "stream": st.booleans() | ints, "n": ints,
                          "question": st.text(max_size=20), "to": st.just("me"),
                          "token": st.text(max_size=20), "role": st.text(max_size=8),
                          "name": st.text(max_size=8), "wait": st.just(0),
                          "extra_body": json_values}).map(orjson.dumps)))
def test_fuzz_http(hub: tuple[HubProcess, dict[str, str]], method: str, path: str, suffix: str,
                   who: str | None, body: bytes) -> None:
    hp, tokens = hub
    headers: dict[str, Any] = {"content-type": "application/json", "x-a2h-wait": "0"}
    if who == "garbage":
        headers["authorization"] = "Bearer a2h_zz_garbage"
    elif who is not None:
        headers["authorization"] = f"Bearer {tokens[who]}"
    try:
        r = httpx.request(method, hp.url + path + suffix, content=body, headers=headers,
                          timeout=10)
    except httpx.ReadTimeout:
        pytest.fail(f"{method} {path}{suffix} hung")
    assert r.status_code < 500, (method, path + suffix, r.status_code, r.text[:300])
    assert "Traceback" not in r.text


def test_hub_survived(hub: tuple[HubProcess, dict[str, str]]) -> None:
    hp, tokens = hub
    assert httpx.get(hp.url + "/healthz", timeout=5).status_code == 200
    with pytest.raises(InvalidStatus):
        connect(hp.ws_url, additional_headers={"Authorization": "Bearer nope"})
