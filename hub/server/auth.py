"""Who is calling: tokens (Bearer) for programs, a session cookie for browsers.

The tenant and, for humans, the handle come from here only (invariant 9). Every HTTP
handler and the WebSocket endpoint call :func:`authenticate`, which returns the
:class:`Principal` or raises:

- :class:`~hub.errors.Unauthorized` (401): no token or session, or one that is unknown,
  revoked or expired;
- :class:`~hub.errors.Denied` (403): a role the call does not accept, or a browser
  request from another site riding on the session cookie.

A cookie alone is no proof of intent, so cookie-authenticated calls are checked for their
origin: a state-changing HTTP call (``state_changing=True``) is refused when it comes from
another site, and a browser *WebSocket* (``conn.scope["type"] == "websocket"``) must come
from the hub's own origin or an allowed one — otherwise any site could open a socket in the
user's name (cross-site WebSocket hijacking). Calls with ``cookies=False`` accept bearer
tokens only (the admin API, ``/v1``, ``/metrics``), so no cross-site request reaches them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from hub.errors import Denied, Unauthorized
from hub.store import Principal, Role

if TYPE_CHECKING:
    from hub.service import HubService

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


def hub_of(conn: HTTPConnection) -> HubService:
    hub: HubService = conn.app.state.hub
    return hub


async def authenticate(conn: HTTPConnection, *roles: Role, state_changing: bool = False,
                       cookies: bool = True) -> Principal:
    """Who is calling, refused unless their role is one of ``roles`` (any role if none).

    Args:
        conn: the HTTP request or the WebSocket (before accept; a cookie socket must come
            from the hub's own origin or an allowed one).
        roles: the roles this call accepts.
        state_changing: the call changes state: refuse a cookie-authenticated request
            from another site.
        cookies: accept the browser session cookie (else bearer tokens only).

    Returns:
        The caller.

    Raises:
        Unauthorized: no token or session, or a bad, revoked or expired one.
        Denied: a role not in ``roles``, or a cross-site browser request.
    """
    return await _authenticate(conn, roles, state_changing=state_changing, cookies=cookies)


async def _authenticate(conn: HTTPConnection, roles: tuple[Role, ...], *,
                        state_changing: bool, cookies: bool) -> Principal:
    hub = hub_of(conn)
    allowed = hub.settings.allowed_origins
    now = hub.clock.now()
    token = bearer(conn)
    who: Principal | None = None
    if token is not None:
        who = await hub.store.principal(token, now)
    elif conn.scope["type"] == "websocket":
        session = conn.cookies.get(SESSION_COOKIE) if cookies else None
        if session:
            if not origin_allowed(conn, allowed):
                raise Denied("a browser socket must come from the hub's own origin")
            who = await hub.store.session_principal(session, now)
    else:
        if state_changing and cross_site(conn, allowed):
            raise Denied("cross-site request refused")
        session = conn.cookies.get(SESSION_COOKIE) if cookies else None
        if session:
            who = await hub.store.session_principal(session, now)
    if who is None:
        how = "'Authorization: Bearer <token>'" if not cookies else \
            "'Authorization: Bearer <token>' or sign in"
        raise Unauthorized(f"send {how} with a valid, unrevoked token")
    if roles and who.role not in roles:
        wanted = " or ".join(r.value for r in roles)
        raise Denied(f"this call needs a token of role {wanted}, not {who.role.value}")
    return who
