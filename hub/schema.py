"""A small JSON-schema subset, and the shape of tool-call answers. Pure: no I/O, no clock.

Chat-completions requests carry a JSON schema (``response_format``) or an OpenAI-style
tool list (``tools``); the inbox renders a form for them and the core checks the human's
answer here before it accepts it. Only the subset a form can produce is supported —
enough for OpenAI "structured outputs" schemas — and ``check_schema`` refuses anything
else up front, so a request can never ask for an answer the hub could not validate.

Supported keywords::

    type (one name or a list)   enum   const   anyOf   allOf   $ref (local: #/$defs/..)
    object: properties required additionalProperties (bool or schema)
    array:  items minItems maxItems
    string: minLength maxLength pattern format (ignored)
    number / integer: minimum maximum exclusiveMinimum exclusiveMaximum multipleOf
    annotations (ignored): title description default examples $schema $id $defs definitions
                           strict nullable

A tool-call answer is ``{"tool_call": {"name": <one of the tools>, "arguments": {...}}}``;
``arguments`` may also arrive as a JSON string (OpenAI's own encoding) and is decoded.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "SchemaError",
    "check_schema",
    "check_tools",
    "is_tool_call",
    "tool_names",
    "validate",
    "validate_tool_call",
]

_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$defs", "definitions",
    "$comment", "strict", "nullable", "format", "readOnly", "writeOnly", "deprecated",
})
_KEYWORDS = frozenset({
    "type", "enum", "const", "anyOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength",
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
}) | _ANNOTATIONS
#: Deepest nesting check_schema accepts (forms deeper than this are not usable anyway).
MAX_DEPTH = 32
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class SchemaError(ValueError):
    """A value does not match its schema, or a schema uses what this subset lacks.

    ``path`` is where, as a JSON-pointer-like string (``$.items[2].name``).
    """

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(f"{path}: {message}" if path != "$" else message)
        self.path = path
        self.reason = message


# ---------------------------------------------------------------------------- schemas


def check_schema(schema: Any) -> None:
    """Refuse a schema this subset cannot validate (unknown keyword, bad ``$ref``...).

    Raises:
        SchemaError: naming the first problem found.
    """
    _check(schema, schema, "$", 0)


def _check(node: Any, root: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise SchemaError(f"nested deeper than {MAX_DEPTH} levels", path)
    if isinstance(node, bool):
        return  # true: anything, false: nothing
    if not isinstance(node, dict):
        raise SchemaError("a schema must be an object", path)
    for key in node:
        if key not in _KEYWORDS:
            raise SchemaError(f"unsupported keyword {key!r}", path)
    typ = node.get("type")
    if typ is not None:
        names = typ if isinstance(typ, list) else [typ]
        if not names or not all(isinstance(t, str) and t in _TYPES for t in names):
            raise SchemaError(f"'type' must be one of {', '.join(_TYPES)} (or a list)", path)
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise SchemaError("'enum' must be a non-empty list", path)
    if "$ref" in node:
        _resolve(node["$ref"], root, path)
    for key in ("anyOf", "allOf"):
        if key in node:
            subs = node[key]
            if not isinstance(subs, list) or not subs:
                raise SchemaError(f"{key!r} must be a non-empty list", path)
            for i, sub in enumerate(subs):
                _check(sub, root, f"{path}.{key}[{i}]", depth + 1)
    props = node.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise SchemaError("'properties' must be an object", path)
        for name, sub in props.items():
            _check(sub, root, f"{path}.properties.{name}", depth + 1)
    req = node.get("required")
    if req is not None and (not isinstance(req, list)
                            or not all(isinstance(r, str) for r in req)):
        raise SchemaError("'required' must be a list of strings", path)
    extra = node.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        _check(extra, root, f"{path}.additionalProperties", depth + 1)
    if "items" in node:
        _check(node["items"], root, f"{path}.items", depth + 1)
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if defs is not None:
            if not isinstance(defs, dict):
                raise SchemaError(f"{key!r} must be an object", path)
            for name, sub in defs.items():
                _check(sub, root, f"{path}.{key}.{name}", depth + 1)
    for key in ("minItems", "maxItems", "minLength", "maxLength"):
        if key in node and (isinstance(node[key], bool) or not isinstance(node[key], int)
                            or node[key] < 0):
            raise SchemaError(f"{key!r} must be a non-negative integer", path)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        if key in node and not _is_number(node[key]):
            raise SchemaError(f"{key!r} must be a number", path)
    if "multipleOf" in node and node["multipleOf"] <= 0:
        raise SchemaError("'multipleOf' must be > 0", path)
    if "pattern" in node:
        if not isinstance(node["pattern"], str):
            raise SchemaError("'pattern' must be a string", path)
        try:
            re.compile(node["pattern"])
        except re.error as exc:
            raise SchemaError(f"'pattern' is not a valid regular expression: {exc}", path) \
                from None


def _resolve(ref: Any, root: Any, path: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError("only local '$ref's (#/...) are supported", path)
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"'$ref' {ref!r} points nowhere", path)
        node = node[part]
    return node


# ---------------------------------------------------------------------------- values


def validate(value: Any, schema: Any) -> None:
    """Check ``value`` against ``schema`` (one that passed :func:`check_schema`).

    Raises:
        SchemaError: naming the first mismatch and where it is.
    """
    _validate(value, schema, schema, "$", 0)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "number":
        return _is_number(value)
    if typ == "integer":
        return _is_number(value) and float(value).is_integer()
    if typ == "boolean":
        return isinstance(value, bool)
    return value is None  # "null"


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(type(a) is type(b) or _is_number(a) and _is_number(b)) and a == b


def _validate(value: Any, node: Any, root: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH * 4:
        raise SchemaError("schema recursion too deep", path)
    if node is True:
        return
    if node is False:
        raise SchemaError("no value is allowed here", path)
    assert isinstance(node, dict)
    if "$ref" in node:
        _validate(value, _resolve(node["$ref"], root, path), root, path, depth + 1)
    typ = node.get("type")
    if typ is not None:
        names = typ if isinstance(typ, list) else [typ]
        if not any(_type_ok(value, t) for t in names):
            raise SchemaError(f"expected {' or '.join(names)}", path)
    if "enum" in node and not any(_same(value, e) for e in node["enum"]):
        shown = ", ".join(json.dumps(e) for e in node["enum"][:10])
        raise SchemaError(f"must be one of {shown}", path)
    if "const" in node and not _same(value, node["const"]):
        raise SchemaError(f"must be {json.dumps(node['const'])}", path)
    for sub in node.get("allOf", ()):
        _validate(value, sub, root, path, depth + 1)
    if "anyOf" in node:
        errors: list[SchemaError] = []
        for sub in node["anyOf"]:
            try:
                _validate(value, sub, root, path, depth + 1)
                break
            except SchemaError as exc:
                errors.append(exc)
        else:
            raise SchemaError("matches none of the allowed shapes"
                              + (f" ({errors[0].reason})" if len(errors) == 1 else ""), path)
    if isinstance(value, dict):
        _object(value, node, root, path, depth)
    elif isinstance(value, list):
        if "minItems" in node and len(value) < node["minItems"]:
            raise SchemaError(f"needs at least {node['minItems']} items", path)
        if "maxItems" in node and len(value) > node["maxItems"]:
            raise SchemaError(f"allows at most {node['maxItems']} items", path)
        if "items" in node:
            for i, item in enumerate(value):
                _validate(item, node["items"], root, f"{path}[{i}]", depth + 1)
    elif isinstance(value, str):
        if "minLength" in node and len(value) < node["minLength"]:
            raise SchemaError(f"must be at least {node['minLength']} characters", path)
        if "maxLength" in node and len(value) > node["maxLength"]:
            raise SchemaError(f"must be at most {node['maxLength']} characters", path)
        if "pattern" in node and re.search(node["pattern"], value) is None:
            raise SchemaError(f"must match {node['pattern']!r}", path)
    elif _is_number(value):
        _number(value, node, path)


def _object(value: dict[str, Any], node: dict[str, Any], root: Any, path: str,
            depth: int) -> None:
    props: dict[str, Any] = node.get("properties") or {}
    for name in node.get("required", ()):
        if name not in value:
            raise SchemaError("is required", f"{path}.{name}")
    extra = node.get("additionalProperties", True)
    for key, item in value.items():
        sub = props.get(key)
        if sub is not None:
            _validate(item, sub, root, f"{path}.{key}", depth + 1)
        elif extra is False:
            raise SchemaError("is not an allowed field", f"{path}.{key}")
        elif extra is not True:
            _validate(item, extra, root, f"{path}.{key}", depth + 1)


def _number(value: float, node: dict[str, Any], path: str) -> None:
    if "minimum" in node and value < node["minimum"]:
        raise SchemaError(f"must be >= {node['minimum']}", path)
    if "maximum" in node and value > node["maximum"]:
        raise SchemaError(f"must be <= {node['maximum']}", path)
    if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
        raise SchemaError(f"must be > {node['exclusiveMinimum']}", path)
    if "exclusiveMaximum" in node and value >= node["exclusiveMaximum"]:
        raise SchemaError(f"must be < {node['exclusiveMaximum']}", path)
    if "multipleOf" in node:
        q = value / node["multipleOf"]
        if not math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9):
            raise SchemaError(f"must be a multiple of {node['multipleOf']}", path)


# ---------------------------------------------------------------------------- tools


def check_tools(tools: Any) -> None:
    """Check an OpenAI-style tool list: ``[{"type": "function", "function": {...}}]``.

    Raises:
        SchemaError: with ``path`` like ``tools[1].function.name``.
    """
    if not isinstance(tools, list) or not tools:
        raise SchemaError("must be a non-empty list", "tools")
    if len(tools) > 128:
        raise SchemaError("at most 128 tools", "tools")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise SchemaError("only tools of type 'function' are supported", where)
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise SchemaError("'function' must be an object", where)
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise SchemaError("'name' must be 1..64 of a-z, A-Z, 0-9, _ and -",
                              f"{where}.function.name")
        if name in seen:
            raise SchemaError(f"duplicate tool name {name!r}", f"{where}.function.name")
        seen.add(name)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise SchemaError("must be a string", f"{where}.function.description")
        params = fn.get("parameters")
        if params is not None:
            try:
                check_schema(params)
            except SchemaError as exc:
                raise SchemaError(exc.reason,
                                  f"{where}.function.parameters{exc.path[1:]}") from None


def tool_names(tools: Any) -> list[str]:
    return [t["function"]["name"] for t in tools]


def is_tool_call(value: Any) -> bool:
    return isinstance(value, dict) and "tool_call" in value


def validate_tool_call(value: Any, tools: Any) -> dict[str, Any]:
    """Check a human's tool-call answer; return it normalized (arguments as an object).

    Raises:
        SchemaError: unknown tool, arguments not an object, or arguments that do not
            match the tool's ``parameters``.
    """
    call = value.get("tool_call") if isinstance(value, dict) else None
    if not isinstance(call, dict):
        raise SchemaError('a tool call is {"tool_call": {"name": ..., "arguments": {...}}}')
    name = call.get("name")
    tool = next((t for t in tools if t["function"]["name"] == name), None)
    if tool is None:
        raise SchemaError(f"unknown tool {name!r}; one of {', '.join(tool_names(tools))}",
                          "tool_call.name")
    args = call.get("arguments", {})
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise SchemaError("is not valid JSON", "tool_call.arguments") from None
    if not isinstance(args, dict):
        raise SchemaError("must be an object", "tool_call.arguments")
    params = tool["function"].get("parameters")
    if params is not None:
        try:
            validate(args, params)
        except SchemaError as exc:
            raise SchemaError(exc.reason, "tool_call.arguments" + exc.path[1:]) from None
    return {"tool_call": {"name": name, "arguments": args}}
