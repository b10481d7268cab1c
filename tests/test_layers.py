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
        assert top in {"__future__", "enum", "re", "dataclasses", "typing", "orjson"} \
            or mod in {"hub.schema", "hub.records", "hub.errors"}, mod  # the ask's schema is checked here
    for mod in imports(ROOT / "hub" / "errors.py"):  # ... and hub.errors is stdlib only
        assert mod.split(".")[0] in {"__future__", "enum", "typing"}, mod
    for mod in imports(ROOT / "hub" / "schema.py"):  # ... and hub.schema is stdlib only
        assert mod.split(".")[0] in {"__future__", "json", "math", "re", "typing"}, mod
    for mod in imports(ROOT / "hub" / "records.py"):  # ... and so is hub.records
        assert mod.split(".")[0] in {"__future__", "dataclasses", "typing"}, mod


#: Pure modules: no I/O, no clock; the core may use them.
PURE = {"hub.protocol", "hub.errors", "hub.schema", "hub.records", "hub.core", "hub.journal"}
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


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, ``from a import b`` counted as ``a`` and ``a.b`` (b may
    be a submodule), lazy imports inside functions included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


#: What only hub/store/ may import: the drivers, and every module of the package except
#: the package itself (its interface and factory) and hub.store.base (the interface).
STORE_ONLY_TOPS = {"sqlite3", "aiosqlite", "asyncpg", "psycopg"}
STORE_PUBLIC = {"hub.store", "hub.store.base"}


def test_nothing_outside_the_store_imports_a_driver_or_a_backend() -> None:
    backends = {"hub.store." + p.stem for p in (ROOT / "hub" / "store").glob("*.py")} \
        - {"hub.store.__init__"} - STORE_PUBLIC
    assert "hub.store.sqlite" in backends
    for path in files("hub") + files("client_sdk"):
        if path.parent == ROOT / "hub" / "store":
            continue
        for mod in imported_names(path):
            assert mod.split(".")[0] not in STORE_ONLY_TOPS, (path, mod)
            assert mod not in backends, (path, mod)


def test_the_layer_check_sees_every_way_to_import_a_backend(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from hub.store import sqlite\n"
                      "def f():\n    import hub.store.journal_sql\n"
                      "from sqlite3 import connect\n")
    assert {"hub.store.sqlite", "hub.store.journal_sql", "sqlite3"} <= imported_names(sample)


#: Module-level containers in these files must be constants (UPPER_CASE names): run state
#: lives in objects that own it (the service, a session, the store), never in a module.
NO_MODULE_STATE = [ROOT / "hub" / "journal.py", ROOT / "hub" / "server" / "runs_api.py",
                   *sorted((ROOT / "hub" / "store").glob("*.py"))]
MUTABLE_CALLS = {"dict", "set", "list", "defaultdict", "WeakKeyDictionary",
                 "WeakValueDictionary", "WeakSet", "count", "deque", "OrderedDict"}


def test_no_module_level_mutable_state() -> None:
    for path in NO_MODULE_STATE:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            assert not isinstance(node, ast.Global), (path, node.lineno)
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            mutable = isinstance(value, ast.Dict | ast.Set | ast.List | ast.DictComp
                                 | ast.SetComp | ast.ListComp) or (
                isinstance(value, ast.Call) and getattr(value.func, "id",
                                                        getattr(value.func, "attr", None))
                in MUTABLE_CALLS)
            if mutable:
                for t in targets:
                    assert isinstance(t, ast.Name), (path, node.lineno)
                    dunder = t.id.startswith("__") and t.id.endswith("__")
                    assert dunder or t.id.lstrip("_").isupper(), (path, node.lineno)


def test_sdk_uses_only_the_protocol_from_hub() -> None:
    """The wire vocabulary: the frames and the errors they carry."""
    for path in files("client_sdk"):
        for mod in imports(path):
            assert not mod.startswith("hub.") or mod in {"hub.protocol", "hub.errors"}, (path, mod)


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
