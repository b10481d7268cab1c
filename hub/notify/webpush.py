"""Web Push: the hub's VAPID key (RFC 8292), encrypted messages (RFC 8291, aes128gcm via
``pywebpush``), and what a notification says.

The VAPID key is made on the first start and kept in the store (``hub_settings``), so every
node and every restart signs with the same key and browsers' subscriptions stay valid.
A subscription is an :class:`~hub.store.base.Endpoint` of channel ``push``: its URL is the
push service's endpoint, its secret the browser's keys ``{"p256dh", "auth"}`` as JSON.

The service worker (web/sw.js) receives the JSON from :func:`single` or :func:`summary`.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

#: hub_settings key of the VAPID private key (PKCS#8 PEM)
VAPID_SETTING = "vapid_private_key"
#: characters of a question shown in a notification
BODY_CHARS = 240
#: seconds a push service keeps a message for an offline browser
TTL = 24 * 3600
#: seconds a VAPID token is valid (RFC 8292: at most 24 h)
TOKEN_SECONDS = 12 * 3600


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def new_private_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


class VapidKey:
    """The hub's application server key."""

    def __init__(self, pem: str) -> None:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the stored VAPID key is not an EC key")
        self._key = key
        raw = key.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
        #: what ``PushManager.subscribe`` takes as ``applicationServerKey``
        self.public_key = b64url(raw)

    def authorization(self, endpoint: str, subject: str, now: float) -> str:
        """The ``Authorization: vapid t=<JWT>, k=<key>`` header for a push to ``endpoint``."""
        parts = urlsplit(endpoint)
        claims = {"aud": f"{parts.scheme}://{parts.netloc}", "exp": int(now) + TOKEN_SECONDS,
                  "sub": subject}
        signing_input = (b64url(orjson.dumps({"typ": "JWT", "alg": "ES256"})) + "."
                         + b64url(orjson.dumps(claims)))
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"vapid t={signing_input}.{b64url(sig)}, k={self.public_key}"


def encrypt(endpoint: str, keys: dict[str, str], payload: bytes) -> bytes:
    """The aes128gcm body (RFC 8188/8291) for one subscription, through pywebpush."""
    from pywebpush import WebPusher

    pusher = WebPusher({"endpoint": endpoint, "keys": keys})
    body: bytes = pusher.encode(payload, "aes128gcm")["body"]
    return body


def request_headers(vapid: VapidKey, endpoint: str, subject: str, now: float,
                    urgency: str = "high") -> dict[str, str]:
    return {"authorization": vapid.authorization(endpoint, subject, now),
            "content-encoding": "aes128gcm", "content-type": "application/octet-stream",
            "ttl": str(TTL), "urgency": urgency}


# ---------------------------------------------------------------------------- what it says


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= BODY_CHARS else text[:BODY_CHARS - 1] + "…"


def answers(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Notification actions that answer at once: approve/reject for an approval, the
    choices of a question with two of them (and no form). Each carries the body the
    service worker POSTs to ``/api/requests/{op_id}/respond``."""
    if view.get("schema") or view.get("tools"):
        return []
    if view.get("kind") == "approval":
        return [{"action": "approve", "title": "Approve",
                 "answer": {"status": "answered", "value": {"approved": True, "comment": ""}}},
                {"action": "reject", "title": "Reject",
                 "answer": {"status": "declined", "value": {"approved": False, "comment": ""}}}]
    choices = view.get("choices")
    if isinstance(choices, list) and len(choices) == 2:
        return [{"action": f"choice-{i}", "title": _short(c)[:40],
                 "answer": {"status": "answered", "value": c}} for i, c in enumerate(choices)]
    return []


def single(view: dict[str, Any]) -> dict[str, Any]:
    """The notification for one request."""
    what = "Approval" if view.get("kind") == "approval" else "Question"
    op_id = str(view["op_id"])
    return {"type": "request", "op_id": op_id, "tag": f"a2h:{op_id}",
            "title": f"{what} from {view.get('from') or 'an agent'}",
            "body": _short(view.get("question") or ""),
            "url": f"/#item={quote(op_id, safe='')}", "actions": answers(view)}


def summary(views: list[dict[str, Any]]) -> dict[str, Any]:
    """One notification for several new requests."""
    lines = [_short(v.get("question") or "")[:80] for v in views[:4]]
    if len(views) > 4:
        lines.append(f"… and {len(views) - 4} more")
    return {"type": "summary", "count": len(views), "tag": "a2h:summary",
            "title": f"{len(views)} new requests", "body": "\n".join(lines), "url": "/",
            "op_ids": [str(v["op_id"]) for v in views], "actions": []}
