"""The layer rule: arrows point down (DESIGN.md, Architecture)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def files(pkg: str) -> list[Path]:
    return sorted((ROOT / pkg).rglob("*.py"))


def test_protocol_is_stdlib_and_orjson_only() -> None:
    for mod in imports(ROOT / "hub" / "protocol.py"):
        top = mod.split(".")[0]
        assert top in {"__future__", "enum", "re", "dataclasses", "typing", "orjson"}, mod


#: Pure modules: no I/O, no clock; the core may use them.
PURE = {"hub.protocol", "hub.schema", "hub.core", "hub.journal"}
IMPURE_TOPS = {"asyncio", "starlette", "aiosqlite", "sqlite3", "time", "websockets", "uvicorn",
               "socket", "threading", "os", "subprocess"}


def test_core_imports_nothing_of_the_others() -> None:
    for name in sorted(PURE):
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            continue
        for mod in imports(path):
            assert not mod.startswith("hub.") or mod in PURE, (name, mod)
            assert mod.split(".")[0] not in IMPURE_TOPS, (name, mod)


def test_only_server_imports_starlette() -> None:
    for path in files("hub") + files("client_sdk"):
        if "server" in path.parts:
            continue
        assert not any(m.startswith("starlette") for m in imports(path)), path


def test_only_the_sqlite_store_imports_aiosqlite() -> None:
    for path in files("hub") + files("client_sdk"):
        if path.parent.name == "store":
            continue
        assert "aiosqlite" not in imports(path), path


def test_sdk_uses_only_the_protocol_from_hub() -> None:
    for path in files("client_sdk"):
        for mod in imports(path):
            assert not mod.startswith("hub.") or mod == "hub.protocol", (path, mod)


def test_sdk_exports_are_pinned() -> None:
    """The public names, exactly: adding or dropping one is a decision, made here."""
    import client_sdk

    assert sorted(client_sdk.__all__) == [
        "A2HError", "AccessDenied", "AlreadyResolved", "Answer", "CallFailed", "Conflict",
        "ConnectionLost", "Hub", "InvalidRequest", "Item", "LimitExceeded", "NotFound",
        "Overloaded", "RateLimited", "Rejected", "ReplayDivergence", "RequestError",
        "RetryableError", "Run", "RunInfo", "RunNotActive", "RunVersionChanged", "SyncHub",
        "SyncRun", "UnknownOutcome", "call_id", "new_op_id",
    ]
    assert len(set(client_sdk.__all__)) == len(client_sdk.__all__)
    for name in client_sdk.__all__:
        assert getattr(client_sdk, name).__module__.startswith("client_sdk"), name
    public = {n for n, v in vars(client_sdk).items()
              if not n.startswith("_") and not isinstance(v, type(client_sdk))}
    assert public == set(client_sdk.__all__)  # nothing public left out of __all__
