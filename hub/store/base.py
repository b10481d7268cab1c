"""The store interface: the single source of truth (rooms are only caches of it).

Everything the hub persists goes through :class:`Store`: identity (tokens, sessions),
requests and their deadlines, and durable runs with their journal. Every backend passes
``tests/test_store_contract.py``; adding one is a module beside ``sqlite.py``, a branch in
``hub.store.open_store`` and a parameter of that suite's fixture.

Backends import this module, never the package ``hub.store`` (the package imports the
backends, lazily, in its factory).

Decisions are not the store's: request rules live in ``hub.core``, journal rules in
``hub.journal``. The store applies their decisions, each one a compare-and-set in one
transaction (invariant 2):

- ``apply(ops)`` commits request operations (``Insert``/``Resolve``/``Extend``) and reports
  per operation whether the store agreed, or the row that won;
- ``run_step(tenant, event, now, max_entries)`` reads the journal snapshot the event is
  about, lets ``hub.journal.handle`` decide, and writes what it returned, all in one
  transaction.

Exceptions (what the caller can do)::

    StoreError          the store failed (unreachable, read-only, full): nothing was
    │                   written; retry later (the room answers ``unavailable``)
    └── NewerDatabase   the database was written by a newer hub: upgrade, or use another
    UnsupportedStore    (a ValueError) the target names no backend of this build
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Callable
from typing import Any, Protocol, TypedDict

from hub.core import Op, Request
from hub.journal import Event, Run, Step
from hub.notify.events import Channel, DeliveryOutcome, EventType
from hub.protocol import RunStatus
from hub.records import record


def hash_token(token: str) -> str:
    """What the store keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_hash_of(token_or_hash: str) -> str:
    """A token's hash, given the token itself or already its hash (64 hex digits)."""
    if len(token_or_hash) == 64 and all(ch in "0123456789abcdef" for ch in token_or_hash):
        return token_or_hash
    return hash_token(token_or_hash)


def new_token(role: Role) -> str:
    # 256 random bits; the prefix tells a reader (and a secret scanner) what it is.
    return f"a2h_{role.value[:2]}_{secrets.token_urlsafe(32)}"


#: ``done(ok, value)``: a commit's outcome, called in the event loop's thread: ``ok`` and what
#: ``apply`` returns, or not ``ok`` and the exception.
Done = Callable[[bool, Any], None]


class Role(enum.StrEnum):
    ADMIN = "admin"
    AGENT = "agent"
    HUMAN = "human"


@record
class Principal:
    """Who a token speaks for. The tenant comes from here, never from a message."""

    tenant: str
    role: Role
    name: str
    token_hash: str
    #: when the token stops being valid (epoch seconds), None if never: the hub closes its
    #: sockets and ends its blocked calls then, as for a revocation
    expires_at: float | None = None

    @property
    def label(self) -> str:
        return f"{self.role.value}:{self.name}"


class StoreError(Exception):
    """The store failed; nothing was written, and the operation may be retried."""


class NewerDatabase(StoreError):
    """The database was written by a newer version of the hub."""


class UnsupportedStore(ValueError):
    """The store target (a path or a URL) names a backend this build does not have."""


@record
class Due:
    tenant: str
    conversation: str
    op_id: str
    deadline: float


class TokenInfo(TypedDict):
    """A token as the admin API lists it (never the token itself: only its hash)."""

    hash: str
    role: str
    name: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None


#: A run's status and reason before a journal step (None: the run did not exist), as the
#: step's own read saw them: a step that makes the run need attention notifies only if
#: that changed.
PriorRun = tuple[RunStatus, str | None] | None


@record
class RunSummary:
    """A run as ``run.list`` shows it: the run and how many calls its journal holds."""

    run: Run
    calls: int

    def view(self) -> dict[str, Any]:
        return self.run.view(calls=self.calls)


@record
class Endpoint:
    """Where notifications go: a webhook, an ntfy topic, or one browser's push subscription.

    ``human`` None: every person of the tenant (webhooks, ntfy). ``secret``: the webhook's
    signing secret (``whsec_…``), an ntfy access token, or a push subscription's keys
    (JSON); never shown by :meth:`view`.
    """

    id: str
    tenant: str
    human: str | None
    channel: Channel
    url: str
    secret: str | None
    created_at: float
    #: since when every attempt failed (None: the last one succeeded, or none was made)
    failing_since: float | None = None
    last_error: str | None = None
    last_success_at: float | None = None
    disabled_at: float | None = None
    disabled_reason: str | None = None
    #: deliveries waiting (listings only)
    pending: int = 0

    def view(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "human": self.human,
                "channel": self.channel.value, "url": self.url, "created_at": self.created_at,
                "failing_since": self.failing_since, "last_error": self.last_error,
                "last_success_at": self.last_success_at, "disabled_at": self.disabled_at,
                "disabled_reason": self.disabled_reason, "pending": self.pending}


@record
class Delivery:
    """One event for one endpoint, as claimed from the outbox."""

    msg_id: str
    endpoint: Endpoint
    event: EventType
    #: the request it is about (None for run events)
    op_id: str | None
    #: the event body as committed (``hub.notify.events.event_body``)
    body: bytes
    created_at: float
    attempts: int


class Store(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # -- identity
    async def is_empty(self) -> bool: ...
    async def bootstrap(self, tenant: str, human: str) -> tuple[str, str] | None:
        """On an empty store, atomically create ``human``'s token and an agent token
        ``default`` in ``tenant``: (human token, agent token). None if not empty."""
        ...
    async def create_token(self, tenant: str, role: Role, name: str,
                           expires_at: float | None = None) -> str: ...
    async def principal(self, token: str, now: float) -> Principal | None: ...
    async def principal_by_hash(self, token_hash: str, now: float) -> Principal | None: ...
    async def revoke_token(self, token: str, now: float, tenant: str | None = None) -> bool: ...
    async def list_tokens(self, tenant: str) -> list[TokenInfo]: ...
    async def revoked_since(self, since: float) -> list[str]: ...
    async def list_humans(self, tenant: str) -> list[str]: ...
    async def create_session(self, token_hash: str, now: float, ttl: float) -> str: ...
    async def session_principal(self, session: str, now: float) -> Principal | None: ...
    async def end_session(self, session: str) -> None: ...

    # -- requests and deadlines
    async def apply(self, ops: list[Op]) -> list[Request | None | bool]: ...
    def apply_soon(self, batches: list[tuple[list[Op], Done]]) -> None:
        """:meth:`apply` for several callers at once, with no coroutine per caller: each
        ``done`` is called once its ops committed (or failed). The room host commits every
        room that decided in one loop iteration through it."""
        ...
    async def get_request(self, tenant: str, op_id: str) -> Request | None: ...
    async def load_room(self, tenant: str, conversation: str) -> list[Request]: ...
    async def inbox(self, tenant: str, handle: str) -> list[Request]: ...
    async def history(self, tenant: str, handle: str, limit: int) -> list[Request]: ...
    async def due(self, now: float, limit: int) -> list[Due]: ...
    async def counts(self) -> dict[str, int]: ...
    async def changed_since(self, since: float, limit: int = 10_000) -> list[Request]:
        """Requests created or resolved at or after ``since`` (oldest first): what another
        node may have changed, for the multi-node reconcile loop."""
        ...
    async def pending_usage(self, tenant: str) -> tuple[int, int]:
        """The tenant's pending requests: (how many, the sum of their payload bytes)."""
        ...

    # -- runs and their journal
    async def run_step(self, tenant: str, event: Event, now: float,
                       max_entries: int) -> Step:
        """Read the snapshot ``event`` needs, let ``hub.journal.handle`` decide, write its
        records; one transaction. Raises what ``handle`` raises (nothing is written)."""
        ...
    async def list_runs(self, tenant: str, status: RunStatus | None = None,
                        limit: int = 100) -> list[RunSummary]:
        """Runs of one tenant, most recently changed first."""
        ...
    async def run_pending(self, tenant: str, sender: str, limit: int = 500) -> list[Request]:
        """Open requests an agent waits on: the ones it sent, and every open interrupt or
        settlement of a run in its tenant (whoever resumes the run)."""
        ...

    # -- notifications: endpoints, the outbox, settings (hub/notify)
    # Delivery rows are written by ``apply`` (request.created / request.resolved) and
    # ``run_step`` (run.needs_attention) in the same transaction as their event, one per
    # enabled endpoint of the tenant that is for everyone or for the person concerned.
    async def add_endpoint(self, endpoint: Endpoint) -> Endpoint:
        """Add an endpoint. A push subscription already stored for the same person and URL
        is updated (new keys) and returned instead of duplicated."""
        ...
    async def list_endpoints(self, tenant: str | None = None, *, human: str | None = None,
                             channel: Channel | None = None) -> list[Endpoint]:
        """Endpoints (of every tenant if None) with their pending deliveries, oldest first."""
        ...
    async def remove_endpoint(self, endpoint_id: str, tenant: str | None = None,
                              human: str | None = None) -> bool:
        """Delete an endpoint and its deliveries, only within ``tenant`` / ``human`` when
        given. False if there was none."""
        ...
    async def claim_deliveries(self, now: float, lease: float, limit: int) -> list[Delivery]:
        """Up to ``limit`` deliveries due at ``now`` of enabled endpoints, oldest first,
        each leased for ``lease`` seconds (not claimed again meanwhile)."""
        ...
    async def release_deliveries(self) -> None:
        """End every lease: a single hub starting up owns every delivery again."""
        ...
    async def settle_delivery(self, delivery: Delivery, now: float, outcome: DeliveryOutcome,
                              error: str | None = None, next_at: float | None = None) -> None:
        """Record how an attempt ended, on the delivery and on its endpoint (last success,
        failing since, last error)."""
        ...
    async def disable_endpoint(self, endpoint_id: str, now: float, reason: str) -> None:
        """Stop delivering to an endpoint: its pending deliveries fail with ``reason``."""
        ...
    async def setting(self, name: str, default: str) -> str:
        """The hub-wide setting ``name``, stored as ``default`` if it has none yet (the
        first writer wins, so every node gets the same value)."""
        ...

    # -- housekeeping
    async def purge(self, before: float) -> int:
        """Delete what ended before ``before``: resolved requests, finished runs with their
        journals, expired sessions, settled deliveries; reclaim the space. Returns requests + runs deleted."""
        ...
    async def ping(self) -> bool: ...
    def statistics(self) -> dict[str, float]: ...
