"""The store: one interface (``hub.store.base``), backends beside it, one factory.

``open_store(target)`` picks the backend from the target: a file path is SQLite (the
embedded default); a ``postgresql://`` (or ``postgres://``) URL is PostgreSQL, shared by
several hub nodes (needs the ``postgres`` extra: asyncpg). The backend module is imported
only when chosen, so nothing outside ``hub/store/`` imports one, and asyncpg is needed only
by those who use it.
The returned store is not open yet: ``await store.open()`` (``HubService`` does).
"""

from __future__ import annotations

from hub.store.base import (
    Delivery,
    Due,
    Endpoint,
    NewerDatabase,
    Principal,
    Role,
    RunSummary,
    Store,
    StoreError,
    TokenInfo,
    UnsupportedStore,
    hash_token,
    new_token,
    token_hash_of,
)

__all__ = ["Delivery", "Due", "Endpoint", "NewerDatabase", "Principal", "Role", "RunSummary", "Store", "StoreError",
           "TokenInfo", "UnsupportedStore", "hash_token", "new_token", "open_store",
           "token_hash_of"]

_POSTGRES = {"postgresql", "postgres"}


def open_store(target: str, *, synchronous: str = "full", commit_delay: float = 0.0,
               commit_siblings: int = 4, commit_gap: float = 0.0) -> Store:
    """The store for ``target``: a file path (SQLite) or a URL whose scheme names a backend.

    ``synchronous`` is SQLite's durability mode (``full`` survives power loss, ``normal``
    survives kill -9), ``commit_delay`` / ``commit_siblings`` / ``commit_gap`` its group
    commit under load (``SQLiteStore``); PostgreSQL's durability is the server's
    configuration. Raises :class:`UnsupportedStore` for a scheme this build lacks (or
    PostgreSQL without asyncpg); its message never shows a password.
    """
    scheme, sep, _ = target.partition("://")
    if not sep:
        from hub.store.sqlite import SQLiteStore

        return SQLiteStore(target, synchronous=synchronous, commit_delay=commit_delay,
                           commit_siblings=commit_siblings, commit_gap=commit_gap)
    if scheme.lower() in _POSTGRES:
        try:
            from hub.store.postgres import PostgresStore
        except ImportError as exc:
            raise UnsupportedStore(
                f"the PostgreSQL store needs asyncpg ({exc}): pip install 'a2h-hub[postgres]'"
            ) from None
        return PostgresStore(target)
    raise UnsupportedStore(f"unknown store {scheme}://...: give a SQLite file path or a "
                           "postgresql:// URL")
