"""Stand-ins for the outside world of notifications, on loopback: a webhook / ntfy receiver
and a push service with a browser's subscription keys (decrypting as a browser would).

Both are stdlib HTTP servers in a thread, so the hub's own sends are real HTTP over real
sockets, whether the hub runs in-process or as an ``a2h serve`` subprocess.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    """Records every POST. ``statuses`` are answered in order (then ``default``); while
    ``hang`` is set the receiver answers nothing until ``release()``."""

    statuses: list[int] = field(default_factory=list)
    default: int = 200
    hits: list[Hit] = field(default_factory=list)
    hanging: int = 0
    hang: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                hit = Hit(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with outer._lock:
                    outer.hits.append(hit)
                    status = outer.statuses.pop(0) if outer.statuses else outer.default
                    hang = outer.hang
                    if hang:
                        outer.hanging += 1
                if hang:
                    outer._released.wait(30)
                    with outer._lock:
                        outer.hanging -= 1
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------- a browser's side


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class BrowserKeys:
    """A push subscription's keys as a browser makes them (P-256 key pair, auth secret)."""

    def __post_init__(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.p256dh = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)

    def subscription(self, endpoint: str) -> dict[str, Any]:
        return {"endpoint": endpoint,
                "keys": {"p256dh": b64url(self.p256dh), "auth": b64url(self.auth)}}

    def decrypt(self, body: bytes) -> Any:
        """RFC 8291 (aes128gcm, RFC 8188) as the browser does it, then the JSON."""
        import http_ece

        return orjson.loads(http_ece.decrypt(body, private_key=self.private_key,
                                             auth_secret=self.auth, version="aes128gcm"))


def check_vapid(authorization: str, audience: str, now: float) -> str:
    """Verify a ``vapid t=<JWT>, k=<key>`` header as a push service does (RFC 8292: ES256
    over the JWT with the key in ``k``, ``aud`` the push service's origin, ``exp`` in the
    next 24 h). Returns the key (base64url)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    scheme, _, params = authorization.partition(" ")
    assert scheme == "vapid", authorization
    fields = dict(p.strip().split("=", 1) for p in params.split(","))
    token, key = fields["t"], fields["k"]
    header, claims, sig = token.split(".")
    assert orjson.loads(unb64url(header)) == {"typ": "JWT", "alg": "ES256"}
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
    raw = unb64url(sig)
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))  # raises
    body = orjson.loads(unb64url(claims))
    assert body["aud"] == audience, body
    assert now < body["exp"] <= now + 24 * 3600, body
    assert body["sub"].startswith(("mailto:", "https:")), body
    return key


def hits_of(receiver: Receiver, path: str) -> Iterator[Hit]:
    return (h for h in list(receiver.hits) if h.path == path)
