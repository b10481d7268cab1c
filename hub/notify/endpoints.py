"""Making endpoints from what an admin (CLI, admin API) or a browser gives: validated once,
here, for every entry point.

Raises :class:`~hub.errors.Invalid` naming the field at fault.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

import orjson

from hub.errors import Invalid
from hub.notify import webhooks
from hub.notify.events import Channel, new_endpoint_id
from hub.protocol import check_name
from hub.store import Endpoint

#: Longest URL of an endpoint (push services' URLs run to ~500 characters).
MAX_URL = 2000
#: Push subscriptions one person may hold (browsers, devices).
MAX_PUSH_PER_HUMAN = 20
_B64URL = re.compile(r"^[A-Za-z0-9_-]{1,200}={0,2}$")


def check_url(field: str, value: object) -> str:
    """An absolute http(s) URL without credentials, fragment or control characters."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_URL or not value.isprintable() \
            or " " in value:
        raise Invalid(f"{field} must be an http or https URL of at most {MAX_URL} characters",
                      param=field)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment \
            or parts.username or parts.password:
        raise Invalid(f"{field} must be an http or https URL with a host (no user:password@, "
                      "no #fragment)", param=field)
    return value


def webhook(tenant: str, human: str | None, url: object, now: float) -> tuple[Endpoint, str]:
    """A webhook endpoint and its signing secret (``whsec_…``, to show once)."""
    secret = webhooks.new_secret()
    return Endpoint(id=new_endpoint_id(), tenant=check_name("tenant", tenant),
                    human=_human(human), channel=Channel.WEBHOOK, url=check_url("webhook", url),
                    secret=secret, created_at=now), secret


def ntfy_topic(tenant: str, human: str | None, url: object, token: object,
               now: float) -> Endpoint:
    """An ntfy topic (its URL, e.g. ``https://ntfy.sh/my-topic``), with an optional access
    token for a protected topic."""
    if token is not None and (not isinstance(token, str) or not 0 < len(token) <= 500
                              or not token.isprintable() or " " in token):
        raise Invalid("token must be an ntfy access token", param="token")
    return Endpoint(id=new_endpoint_id(), tenant=check_name("tenant", tenant),
                    human=_human(human), channel=Channel.NTFY, url=check_url("ntfy", url),
                    secret=token, created_at=now)


def push_subscription(tenant: str, human: str, body: dict[str, Any], now: float) -> Endpoint:
    """A browser's ``PushSubscription.toJSON()``: ``{endpoint, keys: {p256dh, auth}}``."""
    url = check_url("endpoint", body.get("endpoint"))
    keys = body.get("keys")
    if not isinstance(keys, dict) or not all(
            isinstance(keys.get(k), str) and _B64URL.match(keys[k]) for k in ("p256dh", "auth")):
        raise Invalid("keys must be {p256dh, auth}, base64url (PushSubscription.toJSON())",
                      param="keys")
    secret = orjson.dumps({"p256dh": keys["p256dh"], "auth": keys["auth"]}).decode()
    return Endpoint(id=new_endpoint_id(), tenant=tenant, human=human, channel=Channel.PUSH,
                    url=url, secret=secret, created_at=now)


def check_push_service(url: str) -> None:
    """A push endpoint a browser registers must look like a push service's: https on a
    public host name. The hub POSTs to it, so anything else would let a signed-in person
    point the hub at internal addresses (request forgery).

    Raises:
        Invalid: http, an IP literal, localhost, or a private/reserved address.
    """
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    literal = True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        literal = False
    if not url.startswith("https://") or literal or host == "localhost" \
            or host.endswith((".localhost", ".local", ".internal")) or "." not in host:
        raise Invalid("endpoint must be a push service's https URL on a public host name",
                      param="endpoint")


def _human(human: str | None) -> str | None:
    return None if human is None else check_name("human", human)
