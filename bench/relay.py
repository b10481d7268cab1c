"""The baselines: the hub's ask → answer relay with nothing else — no store, no auth, no rooms.

``python -m bench.relay --kind starlette|socketio --port 0`` prints
``relay: serving on http://127.0.0.1:PORT`` and serves until SIGTERM, under the same uvicorn
settings as ``a2h serve`` (``ws="websockets-sansio"``, permessage-deflate off, uvloop,
httptools, no access log, the same ping interval).

Both speak the hub's frames, so one load client drives all three servers:

- agent ``ask`` → ``ok`` (the request view, pending) to the agent, ``inbox.add`` to the
  human's sockets;
- human ``respond`` → ``ok`` to the human, ``resolved`` to the asking socket,
  ``inbox.remove`` to the human's sockets.

Identity is taken from the token without any lookup: ``agent:NAME`` or ``human:HANDLE``.

- ``starlette`` (the limit): a Starlette WebSocket endpoint, one receive loop per socket,
  ``await send_text`` straight from it; the only state is two dicts.
- ``socketio`` (the peer): python-socketio's ``AsyncServer`` (ASGI mode, websocket
  transport, default settings, stdlib json) with rooms: a human's socket joins
  ``inbox:<handle>``, an asking socket joins ``op:<op_id>`` until the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Any

import orjson

HEARTBEAT = 20.0


def request_view(frame: dict[str, Any], sender: str, now: float) -> dict[str, Any]:
    """The same wire shape as the hub's request view (docs/protocol.md)."""
    return {
        "op_id": frame["op_id"], "conversation": frame.get("conversation"), "to": frame["to"],
        "from": sender, "kind": frame.get("kind", "question"), "question": frame["question"],
        "choices": frame.get("choices"), "context": frame.get("context"),
        "default": frame.get("default"), "schema": None, "tools": None, "status": "pending",
        "value": None, "actor": None, "created_at": now, "deadline": now + 70.0,
        "resolved_at": None, "human_seconds": None,
    }


def _identity(token: str) -> tuple[str, str]:
    role, _, name = token.partition(":")
    return (role if role in ("agent", "human") else "agent"), (name or "anon")


def _resolve(req: dict[str, Any], frame: dict[str, Any], handle: str, now: float) -> None:
    req["status"] = frame.get("status", "answered")
    req["value"] = frame.get("value")
    req["actor"] = f"human:{handle}"
    req["resolved_at"] = now
    req["human_seconds"] = round(now - req["created_at"], 3)


# ---------------------------------------------------------------------------- Starlette


def starlette_app() -> Any:
    import time

    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    humans: dict[str, set[WebSocket]] = {}
    pending: dict[str, tuple[WebSocket, dict[str, Any]]] = {}

    def dumps(obj: Any) -> str:
        return orjson.dumps(obj).decode()

    async def endpoint(ws: WebSocket) -> None:
        auth = ws.headers.get("authorization", "")
        role, name = _identity(auth.partition(" ")[2])
        await ws.accept()
        if role == "human":
            humans.setdefault(name, set()).add(ws)
        await ws.send_text(dumps({"type": "hello", "protocol": 1, "role": role,
                                  "tenant": "default", "handle": name, "now": time.time(),
                                  "heartbeat": HEARTBEAT}))
        try:
            while True:
                frame = orjson.loads(await ws.receive_text())
                typ = frame.get("type")
                fid = frame.get("id")
                if typ == "ask" and role == "agent":
                    req = request_view(frame, f"agent:{name}", time.time())
                    pending[req["op_id"]] = (ws, req)
                    await ws.send_text(dumps({"type": "ok", "id": fid, "request": req}))
                    text = dumps({"type": "inbox.add", "request": req})
                    for h in list(humans.get(req["to"], ())):
                        await h.send_text(text)
                elif typ == "respond" and role == "human":
                    hit = pending.pop(frame.get("op_id"), None)
                    if hit is None:
                        await ws.send_text(dumps({"type": "error", "id": fid,
                                                  "code": "not_found", "message": "no such request",
                                                  "retryable": False}))
                        continue
                    agent, req = hit
                    _resolve(req, frame, name, time.time())
                    await ws.send_text(dumps({"type": "ok", "id": fid, "request": req}))
                    try:
                        await agent.send_text(dumps({"type": "resolved", "request": req}))
                    except Exception:
                        pass
                    text = dumps({"type": "inbox.remove", "op_id": req["op_id"], "request": req})
                    for h in list(humans.get(name, ())):
                        await h.send_text(text)
                else:
                    await ws.send_text(dumps({"type": "ok", "id": fid}))
        except WebSocketDisconnect:
            pass
        finally:
            if role == "human":
                humans.get(name, set()).discard(ws)

    return Starlette(routes=[WebSocketRoute("/ws", endpoint)])


# ---------------------------------------------------------------------------- Socket.IO


def socketio_app() -> Any:
    import time

    import socketio  # type: ignore[import-untyped]

    sio = socketio.AsyncServer(async_mode="asgi", transports=["websocket"],
                               ping_interval=HEARTBEAT, ping_timeout=HEARTBEAT)
    pending: dict[str, dict[str, Any]] = {}

    @sio.event
    async def connect(sid: str, environ: dict[str, Any], auth: Any) -> None:
        token = auth.get("token", "") if isinstance(auth, dict) else ""
        role, name = _identity(token)
        await sio.save_session(sid, {"role": role, "name": name})
        if role == "human":
            await sio.enter_room(sid, f"inbox:{name}")

    @sio.on("msg")
    async def msg(sid: str, frame: dict[str, Any]) -> None:
        s = await sio.get_session(sid)
        role, name = s["role"], s["name"]
        typ = frame.get("type")
        fid = frame.get("id")
        if typ == "ask" and role == "agent":
            req = request_view(frame, f"agent:{name}", time.time())
            op_id = req["op_id"]
            pending[op_id] = req
            await sio.enter_room(sid, f"op:{op_id}")
            await sio.emit("msg", {"type": "ok", "id": fid, "request": req}, to=sid)
            await sio.emit("msg", {"type": "inbox.add", "request": req}, room=f"inbox:{req['to']}")
        elif typ == "respond" and role == "human":
            op_id = frame.get("op_id")
            req = pending.pop(op_id, None)
            if req is None:
                await sio.emit("msg", {"type": "error", "id": fid, "code": "not_found",
                                       "message": "no such request", "retryable": False}, to=sid)
                return
            _resolve(req, frame, name, time.time())
            await sio.emit("msg", {"type": "ok", "id": fid, "request": req}, to=sid)
            await sio.emit("msg", {"type": "resolved", "request": req}, room=f"op:{op_id}")
            await sio.close_room(f"op:{op_id}")
            await sio.emit("msg", {"type": "inbox.remove", "op_id": op_id, "request": req},
                           room=f"inbox:{name}")
        else:
            await sio.emit("msg", {"type": "ok", "id": fid}, to=sid)

    return socketio.ASGIApp(sio)


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    ap = argparse.ArgumentParser(prog="python -m bench.relay")
    ap.add_argument("--kind", choices=("starlette", "socketio"), required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    app = starlette_app() if args.kind == "starlette" else socketio_app()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    # The same settings as hub.cli.serve.
    config = uvicorn.Config(
        app, ws="websockets-sansio", ws_per_message_deflate=False, ws_max_size=64 * 1024,
        ws_ping_interval=HEARTBEAT, ws_ping_timeout=HEARTBEAT, loop="uvloop", lifespan="off",
        log_level="warning", access_log=False, timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(f"relay: serving on http://{args.host}:{port}", flush=True)
        await task

    import uvloop

    uvloop.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
