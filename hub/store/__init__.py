"""The store interface: the single source of truth (rooms are only caches of it).

Every backend passes ``tests/test_store_contract.py``. Writes go through ``apply``, which
commits a list of request operations in one transaction shared with whatever else
arrived meanwhile (group commit) and reports per operation whether the store agreed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from hub.core import Op, Request


class Role(enum.StrEnum):
    ADMIN = "admin"
    AGENT = "agent"
    HUMAN = "human"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token speaks for. The tenant comes from here, never from a message."""

    tenant: str
    role: Role
    name: str
    token_hash: str

    @property
    def label(self) -> str:
        return f"{self.role.value}:{self.name}"


class StoreError(Exception):
    """The store failed; the operation may be retried."""


class NewerDatabase(StoreError):
    """The database was written by a newer version of the hub."""


@dataclass(frozen=True, slots=True)
class Due:
    tenant: str
    conversation: str
    op_id: str
    deadline: float


class Store(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # -- identity
    async def is_empty(self) -> bool: ...
    async def create_token(self, tenant: str, role: Role, name: str,
                           expires_at: float | None = None) -> str: ...
    async def principal(self, token: str, now: float) -> Principal | None: ...
    async def principal_by_hash(self, token_hash: str, now: float) -> Principal | None: ...
    async def revoke_token(self, token: str, now: float, tenant: str | None = None) -> bool: ...
    async def list_tokens(self, tenant: str) -> list[dict[str, Any]]: ...
    async def revoked_since(self, since: float) -> list[str]: ...
    async def list_humans(self, tenant: str) -> list[str]: ...
    async def create_session(self, token_hash: str, now: float, ttl: float) -> str: ...
    async def session_principal(self, session: str, now: float) -> Principal | None: ...
    async def end_session(self, session: str) -> None: ...

    # -- requests
    async def apply(self, ops: list[Op]) -> list[Request | None | bool]: ...
    async def get_request(self, tenant: str, op_id: str) -> Request | None: ...
    async def load_room(self, tenant: str, conversation: str) -> list[Request]: ...
    async def inbox(self, tenant: str, handle: str) -> list[Request]: ...
    async def history(self, tenant: str, handle: str, limit: int) -> list[Request]: ...
    async def due(self, now: float, limit: int) -> list[Due]: ...
    async def purge(self, resolved_before: float) -> int: ...
    async def counts(self) -> dict[str, int]: ...
    async def pending_usage(self, tenant: str) -> tuple[int, int]: ...
    async def ping(self) -> bool: ...

    def statistics(self) -> dict[str, Any]: ...
