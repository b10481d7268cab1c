"""The store: one interface (``hub.store.base``), backends beside it, one factory.

``open_store(target)`` picks the backend from the target: a file path is SQLite (the
embedded default); a ``postgresql://`` URL is reserved for the PostgreSQL backend. The
backend module is imported only when chosen, so nothing outside ``hub/store/`` imports one.
The returned store is not open yet: ``await store.open()`` (``HubService`` does).
"""

from __future__ import annotations

from hub.store.base import (
    Due,
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

__all__ = ["Due", "NewerDatabase", "Principal", "Role", "RunSummary", "Store", "StoreError",
           "TokenInfo", "UnsupportedStore", "hash_token", "new_token", "open_store",
           "token_hash_of"]

_PLANNED = {"postgresql", "postgres"}


def open_store(target: str, *, synchronous: str = "full") -> Store:
    """The store for ``target``: a file path (SQLite) or a URL whose scheme names a backend.

    ``synchronous`` is SQLite's durability mode (``full`` survives power loss, ``normal``
    survives kill -9). Raises :class:`UnsupportedStore` for a scheme this build lacks.
    """
    scheme, sep, _ = target.partition("://")
    if not sep:
        from hub.store.sqlite import SQLiteStore

        return SQLiteStore(target, synchronous=synchronous)
    if scheme.lower() in _PLANNED:
        raise UnsupportedStore(
            f"the PostgreSQL store is not part of this build yet: give a SQLite file path "
            f"instead of {scheme}://...")
    raise UnsupportedStore(f"unknown store {scheme}://...: give a SQLite file path")
