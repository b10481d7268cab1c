"""Typed answers (issue 13): ``hub.ask(..., schema=...)`` with a JSON Schema dict or a
pydantic model. The ask frame carries the schema (checked at the edge, part of the payload
hash), the hub refuses answers that do not match it, and the SDK hands back an instance of
the model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from enum import Enum

import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from pydantic import BaseModel, Field

from client_sdk import Conflict, Hub, InvalidRequest, SyncHub
from hub.core import payload_hash
from hub.errors import Invalid
from hub.protocol import parse_ask
from hub.schema import check_schema


class Channel(Enum):
    STABLE = "stable"
    BETA = "beta"


class Release(BaseModel):
    title: str = Field(description="Shown on the release page")
    copies: int = Field(ge=1)
    channel: Channel
    public: bool = False
    notes: str | None = None


def ask_frame(**extra: object) -> dict[str, object]:
    return {"op_id": "op-1", "to": "me", "question": "Release?", "conversation": "c",
            **extra}


# ---------------------------------------------------------------------------- the frame


def test_a_pydantic_schema_is_in_the_subset_the_hub_validates() -> None:
    check_schema(Release.model_json_schema())


def test_the_ask_frame_carries_a_checked_schema_that_counts_in_the_payload_hash() -> None:
    schema = Release.model_json_schema()
    ask = parse_ask(ask_frame(schema=schema), 1)
    assert ask.schema == schema
    assert payload_hash(ask) != payload_hash(parse_ask(ask_frame(), 1))
    # ... and hashes like a schema given beside the ask (chat completions, HTTP API).
    assert payload_hash(ask) == payload_hash(parse_ask(ask_frame(), 1), schema)
    with pytest.raises(Invalid, match="schema") as err:
        parse_ask(ask_frame(schema={"type": "object", "patternProperties": {}}), 1)
    assert err.value.param == "schema"


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    db = tmp_path_factory.mktemp("typed") / "typed.db"
    with HubProcess(db) as hp:
        yield hp


@pytest.fixture(scope="module")
def tokens(hub: HubProcess) -> tuple[str, str]:
    return create_token(hub.db, agent="typed"), create_token(hub.db, human="me")


async def test_an_invalid_answer_is_refused_and_a_valid_one_comes_back_typed(
        hub: HubProcess, tokens: tuple[str, str]) -> None:
    agent_token, human_token = tokens
    async with Hub(hub.url, agent_token) as agent, Hub(hub.url, human_token) as human:
        asking = asyncio.create_task(agent.ask("me", "Fill in the release (typed)",
                                               conversation="typed", schema=Release))

        async def item_schema() -> object:
            items = [i for i in await human.inbox() if "(typed)" in i.question]
            return items[0].request["schema"] if items else None

        assert await until(item_schema, 20) == Release.model_json_schema()
        op_id = [i for i in await human.inbox() if "(typed)" in i.question][0].op_id
        for wrong in ({"title": "x", "copies": 0, "channel": "beta"},    # minimum
                      {"title": "x", "copies": 2, "channel": "alpha"},   # not in the enum
                      {"copies": 2, "channel": "beta"},                  # title missing
                      "just text"):
            with pytest.raises(InvalidRequest) as err:
                await human.respond(op_id, wrong)
            assert err.value.code == "invalid"
        assert not asking.done()
        await human.respond(op_id, {"title": "Spring", "copies": 3, "channel": "beta"})
        answer = await asyncio.wait_for(asking, 20 * UNIT)
    assert answer.status == "answered"
    assert answer.value == Release(title="Spring", copies=3, channel=Channel.BETA)
    assert isinstance(answer.value, Release)
    assert answer.request["value"] == {"title": "Spring", "copies": 3, "channel": "beta"}


async def test_a_dict_schema_returns_json_and_the_same_op_id_with_another_is_a_conflict(
        hub: HubProcess, tokens: tuple[str, str]) -> None:
    agent_token, human_token = tokens
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with Hub(hub.url, agent_token) as agent, Hub(hub.url, human_token) as human:
        asked = await agent.ask("me", "A number (dict)", conversation="typed", schema=schema,
                                wait=0, op_id="typed-dict-1")
        with pytest.raises(Conflict):
            await agent.ask("me", "A number (dict)", conversation="typed", wait=0,
                            op_id="typed-dict-1", schema={"type": "object"})
        with pytest.raises(InvalidRequest):
            await agent.ask("me", "Bad schema", conversation="typed", wait=0,
                            schema={"type": "object", "oneOf": []})
        await human.respond(asked.op_id, {"n": 4})
        answer = await agent.wait(asked.op_id, 10)
    assert answer.value == {"n": 4}


def test_sync_hub_takes_a_schema_and_wait_builds_the_instance(
        hub: HubProcess, tokens: tuple[str, str]) -> None:
    agent_token, human_token = tokens
    with SyncHub(hub.url, agent_token) as agent, SyncHub(hub.url, human_token) as human:
        asked = agent.ask("me", "Release (sync)", conversation="typed", schema=Release,
                          wait=0)
        assert asked.pending
        [item] = [i for i in human.inbox() if i.op_id == asked.op_id]
        assert item.request["schema"] == Release.model_json_schema()
        human.respond(asked.op_id, {"title": "S", "copies": 1, "channel": "stable"})
        raw = agent.wait(asked.op_id, 10)
        typed = agent.wait(asked.op_id, 10, schema=Release)
    assert raw.value == {"title": "S", "copies": 1, "channel": "stable"}
    assert typed.value == Release(title="S", copies=1, channel=Channel.STABLE)
