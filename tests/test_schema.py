"""The JSON-schema subset and tool-call answers (pure: no event loop)."""

from __future__ import annotations

from typing import Any

import pytest

from hub.core import Request, validate_answer
from hub.errors import Invalid
from hub.protocol import Kind, OpId, Status
from hub.schema import SchemaError, check_schema, check_tools, validate, validate_tool_call

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number", "exclusiveMaximum": 1},
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green"]},
        "nick": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "pet": {"$ref": "#/$defs/pet"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "cat"}}}},
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop"}}]


def test_valid_values_pass() -> None:
    check_schema(PERSON)
    validate({"name": "Ada", "age": 36}, PERSON)
    validate({"name": "Ada", "age": 36.0, "ratio": 0.5, "ok": True, "color": "red",
              "nick": None, "tags": ["a"], "pet": {"kind": "cat"}}, PERSON)


@pytest.mark.parametrize("value, path", [
    ({"age": 3}, "$.name"),
    ({"name": "", "age": 3}, "$.name"),
    ({"name": "a", "age": 3.5}, "$.age"),
    ({"name": "a", "age": True}, "$.age"),
    ({"name": "a", "age": -1}, "$.age"),
    ({"name": "a", "age": 1, "ratio": 1}, "$.ratio"),
    ({"name": "a", "age": 1, "color": "blue"}, "$.color"),
    ({"name": "a", "age": 1, "tags": ["a", "b", "c"]}, "$.tags"),
    ({"name": "a", "age": 1, "tags": [1]}, "$.tags[0]"),
    ({"name": "a", "age": 1, "pet": {"kind": "dog"}}, "$.pet.kind"),
    ({"name": "a", "age": 1, "extra": 1}, "$.extra"),
    (["not", "an", "object"], "$"),
])
def test_invalid_values_name_the_place(value: Any, path: str) -> None:
    with pytest.raises(SchemaError) as info:
        validate(value, PERSON)
    assert info.value.path == path


@pytest.mark.parametrize("schema", [
    {"type": "date"}, {"oneOf": [{"type": "string"}]}, {"$ref": "http://x/y"},
    {"$ref": "#/$defs/missing"}, {"enum": []}, {"properties": []}, {"pattern": "("},
    "string", {"minLength": -1},
])
def test_unsupported_schemas_are_refused(schema: Any) -> None:
    with pytest.raises(SchemaError):
        check_schema(schema)


def test_any_of_and_patterns() -> None:
    schema = {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "integer"}]}
    check_schema(schema)
    validate("abc", schema)
    validate(3, schema)
    with pytest.raises(SchemaError):
        validate("ABC", schema)


def test_tool_calls() -> None:
    check_tools(TOOLS)
    out = validate_tool_call({"tool_call": {"name": "get_weather",
                                            "arguments": '{"city": "Paris"}'}}, TOOLS)
    assert out == {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    assert validate_tool_call({"tool_call": {"name": "noop"}}, TOOLS)["tool_call"][
        "arguments"] == {}
    with pytest.raises(SchemaError, match="unknown tool"):
        validate_tool_call({"tool_call": {"name": "rm_rf", "arguments": {}}}, TOOLS)
    with pytest.raises(SchemaError) as info:
        validate_tool_call({"tool_call": {"name": "get_weather", "arguments": {}}}, TOOLS)
    assert info.value.path == "tool_call.arguments.city"
    with pytest.raises(SchemaError):
        check_tools([{"type": "code_interpreter"}])
    with pytest.raises(SchemaError):
        check_tools([TOOLS[0], TOOLS[0]])


def _request(schema: Any = None, tools: Any = None, context: Any = None) -> Request:
    return Request(tenant="t", op_id=OpId("x"), conversation="c", to="me", sender="agent:a",
                   kind=Kind.QUESTION, question="q", choices=None, context=context,
                   default=None, schema=schema, tools=tools, payload_hash="h",
                   status=Status.PENDING, value=None, actor=None, created_at=0.0,
                   deadline=10.0, fixed_deadline=False)


def test_core_validates_answers_against_schema_and_tools() -> None:
    req = _request(schema=PERSON)
    assert validate_answer(req, Status.ANSWERED, {"name": "a", "age": 1}) == {"name": "a",
                                                                             "age": 1}
    assert validate_answer(req, Status.ANSWERED, '{"name": "a", "age": 1}') == {"name": "a",
                                                                               "age": 1}
    with pytest.raises(Invalid):
        validate_answer(req, Status.ANSWERED, {"name": "a"})
    # a decline carries a reason, never validated against the form
    assert validate_answer(req, Status.DECLINED, "no") == "no"

    req = _request(tools=TOOLS)
    assert validate_answer(req, Status.ANSWERED, "plain text is fine") == "plain text is fine"
    call = {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    assert validate_answer(req, Status.ANSWERED, call) == call
    with pytest.raises(Invalid):
        validate_answer(req, Status.ANSWERED, {"tool_call": {"name": "nope"}})

    req = _request(tools=TOOLS, context={"messages": [], "tool_choice": "required"})
    with pytest.raises(Invalid, match="tool call"):
        validate_answer(req, Status.ANSWERED, "text")
