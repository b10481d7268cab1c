"""The MCP tools' pure parts, and the hub without the ``mcp`` package."""

from __future__ import annotations

import sys

import pytest
from starlette.routing import Route

from hub.config import Settings
from hub.mcp_tools import (
    APPROVAL_REATTACH_WINDOW,
    AskSpec,
    _reusable,
    derive_op_id,
    permission_decision,
    session_conversation,
)
from hub.protocol import Kind, is_name
from hub.server import create_app
from hub.store import open_store


def test_the_hub_starts_without_the_mcp_package(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: object) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp -> ImportError
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    app = create_app(Settings(db=":memory:"), store=open_store(":memory:"))
    assert "/mcp" not in [r.path for r in app.routes if isinstance(r, Route)]
    monkeypatch.undo()
    app = create_app(Settings(db=":memory:"), store=open_store(":memory:"))
    assert "/mcp" in [r.path for r in app.routes if isinstance(r, Route)]


def test_derived_op_ids_are_names_scoped_to_the_secret_and_the_call() -> None:
    spec = AskSpec(tool="ask_human", to="me", question="Q?", conversation="c")
    a = derive_op_id(b"token-a", spec.key())
    assert is_name(a) and len(a) == 32
    assert a == derive_op_id(b"token-a", spec.key())
    assert a != derive_op_id(b"token-b", spec.key())
    assert a != derive_op_id(b"token-a", spec.key(), 1)
    other = AskSpec(tool="ask_human", to="me", question="Q?", conversation="d")
    assert a != derive_op_id(b"token-a", other.key())
    nonce = AskSpec(tool="ask_human", to="me", question="Q?", conversation="c", nonce="t1")
    assert a != derive_op_id(b"token-a", nonce.key())


def test_what_a_call_reattaches_to() -> None:
    now = 1000.0
    assert _reusable({"status": "pending"}, now, 60)
    assert not _reusable({"status": "cancelled", "resolved_at": now}, now, 60)
    assert _reusable({"status": "answered", "resolved_at": now - 59}, now, 60)
    assert not _reusable({"status": "answered", "resolved_at": now - 61}, now, 60)
    approval = AskSpec(tool="request_approval", to="me", question="Q", conversation="c",
                       kind=Kind.APPROVAL)
    assert approval.reattach_window == APPROVAL_REATTACH_WINDOW


def test_session_conversations_are_names() -> None:
    assert session_conversation("abc123", "x") == "mcp:abc123"
    assert session_conversation(None, "tok") == "mcp:tok"
    odd = session_conversation("has spaces/and slashes", "x")
    assert odd.startswith("mcp:") and is_name(odd)


def test_permission_decisions() -> None:
    view = {"status": "answered", "to": "me", "value": {"approved": True, "comment": ""},
            "context": {"tool_name": "Bash", "input": {"command": "ls"}}}
    assert permission_decision(view) == {"behavior": "allow",
                                         "updatedInput": {"command": "ls"}}
    view = {"status": "declined", "to": "me", "value": {"approved": False, "comment": ""}}
    assert permission_decision(view) == {"behavior": "deny",
                                         "message": "me denied this without a comment."}
    view = {"status": "expired", "to": "me", "value": None}
    assert permission_decision(view)["behavior"] == "deny"
