"""Standard Webhooks (https://www.standardwebhooks.com): secrets and signatures.

A message is signed as ``HMAC-SHA256(key, f"{webhook-id}.{webhook-timestamp}.{body}")``,
sent as ``webhook-signature: v1,<base64>``. The key is the secret's base64 part (after
``whsec_``). The timestamp is the attempt's (receivers refuse stale ones), the id and the
body are the event's, the same on every retry: receivers deduplicate by ``webhook-id``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"


def new_secret() -> str:
    """A signing secret: ``whsec_`` + 24 random bytes, base64."""
    return PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "user-agent": "a2h-hub",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }
