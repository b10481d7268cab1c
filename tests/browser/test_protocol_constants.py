"""hub/web/js/protocol.js mirrors hub/protocol.py: the same frame types, codes and statuses.

No browser needed: the JavaScript file is read with regular expressions. It keeps the shape
``export const NAME = Object.freeze({ KEY: value, ... });`` with one entry per line.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path

import pytest

from hub import errors, protocol

PROTOCOL_JS = Path(__file__).resolve().parents[2] / "hub" / "web" / "js" / "protocol.js"

_BLOCK = re.compile(r"^export const (\w+) = Object\.freeze\(\{(.*?)\}\);", re.DOTALL | re.MULTILINE)
_ENTRY = re.compile(r'^\s*([A-Z][A-Z0-9_]*):\s*("(?:[^"\\]|\\.)*"|-?\d+),?\s*(?://.*)?$')


def _js_objects() -> dict[str, dict[str, str | int]]:
    text = PROTOCOL_JS.read_text(encoding="utf-8")
    out: dict[str, dict[str, str | int]] = {}
    for name, body in _BLOCK.findall(text):
        entries: dict[str, str | int] = {}
        for line in body.splitlines():
            line = line.strip()
            if not line or line.startswith("//"):
                continue
            m = _ENTRY.match(line)
            assert m, f"protocol.js {name}: cannot read line {line!r}"
            key, raw = m.groups()
            assert key not in entries, f"protocol.js {name}.{key} twice"
            entries[key] = raw[1:-1] if raw.startswith('"') else int(raw)
        out[name] = entries
    return out


def _py_members(cls: type[enum.Enum]) -> dict[str, str | int]:
    return {m.name: m.value for m in cls}


@pytest.mark.parametrize("cls", [protocol.T, errors.ErrorCode, protocol.CloseCode,
                                 protocol.Status, protocol.Kind], ids=lambda c: c.__name__)
def test_enum_mirrored(cls: type[enum.Enum]) -> None:
    js = _js_objects()
    assert cls.__name__ in js, f"protocol.js has no `export const {cls.__name__}`"
    assert js[cls.__name__] == _py_members(cls)


def test_protocol_version() -> None:
    m = re.search(r"^export const PROTOCOL_VERSION = (\d+);$", PROTOCOL_JS.read_text("utf-8"), re.MULTILINE)
    assert m, "protocol.js has no PROTOCOL_VERSION"
    assert int(m.group(1)) == protocol.PROTOCOL_VERSION


def test_terminal_statuses() -> None:
    text = PROTOCOL_JS.read_text("utf-8")
    m = re.search(r"export const TERMINAL = Object\.freeze\(\[(.*?)\]\);", text, re.DOTALL)
    assert m, "protocol.js has no TERMINAL"
    names = set(re.findall(r"Status\.([A-Z_]+)", m.group(1)))
    assert {protocol.Status[n] for n in names} == set(protocol.TERMINAL)


def test_every_export_is_frozen() -> None:
    text = PROTOCOL_JS.read_text("utf-8")
    exported = re.findall(r"^export const (\w+) = (.*)$", text, re.MULTILINE)
    for name, rhs in exported:
        assert rhs.startswith("Object.freeze(") or re.fullmatch(r"\d+;", rhs), name
