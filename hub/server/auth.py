"""Who is calling: tokens (Bearer) for programs, a session cookie for browsers.

The tenant and, for humans, the handle come from here only (invariant 9). A browser's
WebSocket must also come from the hub's own origin (or an allowed one): a cookie alone
would let any site open a socket in the user's name (cross-site WebSocket hijacking).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from hub.service import HubService
from hub.store import Principal

SESSION_COOKIE = "a2h_session"


def bearer(conn: HTTPConnection) -> str | None:
    value = conn.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def origin_allowed(conn: HTTPConnection, allowed: list[str]) -> bool:
    """True if the request's Origin is the hub itself or in the allow-list."""
    origin = conn.headers.get("origin")
    if origin is None:
        return False
    if origin in allowed:
        return True
    host = conn.headers.get("host", "")
    parts = urlsplit(origin)
    return bool(host) and parts.netloc == host and parts.scheme in ("http", "https")


def cross_site(conn: HTTPConnection, allowed: list[str]) -> bool:
    """A state-changing browser request from another site (Origin present and foreign)."""
    if "origin" not in conn.headers:
        fetch_site = conn.headers.get("sec-fetch-site")
        return fetch_site not in (None, "same-origin", "none")
    return not origin_allowed(conn, allowed)


async def authenticate(conn: HTTPConnection, hub: HubService, *,
                       websocket: bool) -> Principal | None:
    now = hub.clock.now()
    token = bearer(conn)
    if token is not None:
        return await hub.store.principal(token, now)
    session = conn.cookies.get(SESSION_COOKIE)
    if session:
        if websocket and not origin_allowed(conn, hub.settings.allowed_origins):
            return None
        return await hub.store.session_principal(session, now)
    return None
