"""``a2h``: serve the hub, manage tokens, ask from a shell.

Every ``serve`` flag has an environment twin: ``--room-idle`` is ``A2H_ROOM_IDLE``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from dataclasses import fields
from typing import Any

from hub.config import Settings, coerce

EXIT_ANSWERED = 0
EXIT_ERROR = 1
EXIT_DECLINED = 10
EXIT_EXPIRED = 11
EXIT_CANCELLED = 12
EXIT_PENDING = 13

_HELP = {
    "host": "address to listen on", "port": "port to listen on (0: any free port)",
    "db": "SQLite database file", "sync": "SQLite synchronous mode: full or normal",
    "commit_delay": "seconds a SQLite commit under load waits after the previous one "
                    "started, so more writes share its fsync (0: off)",
    "commit_siblings": "callers in the previous SQLite commit that make the next one wait",
    "commit_gap": "seconds without a new write after which a waiting SQLite commit stops "
                  "waiting (0: wait out --commit-delay)",
    "store": "store URL shared by several nodes, postgresql://USER@HOST:PORT/DB "
             "(default: the SQLite --db)",
    "bus": "bus between nodes, nats://HOST:PORT (default: this node serves alone)",
    "room_idle": "seconds before an idle room is dropped from memory",
    "room_mailbox": "messages a room queues before answering 'overloaded'",
    "max_frame": "largest WebSocket frame in bytes (bigger closes with 1009)",
    "outbox_bytes": "bytes a socket may fall behind before it is closed with 'resync'",
    "retention": "seconds resolved requests are kept", "alarm_sweep":
    "seconds between sweeps for overdue deadlines", "session_ttl": "browser session seconds",
    "heartbeat": "WebSocket ping interval, seconds (0: off)",
    "sse_keepalive": "seconds between keep-alive comments on streamed chat completions",
    "mcp_progress_interval": "seconds between MCP progress notifications of a waiting call",
    "allowed_origins": "extra origins allowed for browser sockets, comma-separated",
    "forwarded_allow_ips": "proxies trusted for X-Forwarded-* headers",
    "log_level": "debug, info, warning or error",
    "max_conns_per_ip": "open connections one client address may hold (0: no limit)",
    "header_timeout": "seconds a client has to send a request's headers",
    "max_pending_bytes_per_tenant": "bytes the pending requests of one tenant may hold",
    "metrics_public": "serve /metrics without an admin token",
    "room_ask_rate": "asks per second one room (conversation) admits; more is 'overloaded' (0: off)",
    "room_ask_burst": "asks one room admits at once before its rate applies",
    "bootstrap_tenant": "tenant created on the first start of an empty store",
    "bootstrap_human": "human created on the first start of an empty store",
}


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("A2H_" + name.upper(), default)


def build_parser() -> argparse.ArgumentParser:
    from hub import __version__

    p = argparse.ArgumentParser(prog="a2h", description="A2H hub: agents ask, humans answer.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the hub")
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        serve.add_argument(flag, dest=f.name, default=None,
                           help=f"{_HELP.get(f.name, '')} (env A2H_{f.name.upper()})")

    token = sub.add_parser("token", help="create or revoke tokens")
    tsub = token.add_subparsers(dest="token_command", required=True)
    create = tsub.add_parser("create", help="print one new token on stdout")
    create.add_argument("--db", default=_env("db", "./a2h.db"))
    create.add_argument("--store", default=_env("store", ""),
                        help="postgresql://USER@HOST:PORT/DB instead of --db (env A2H_STORE)")
    create.add_argument("--tenant", default="default")
    who = create.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", metavar="NAME")
    who.add_argument("--human", metavar="HANDLE")
    who.add_argument("--admin", metavar="NAME", nargs="?", const="admin")
    create.add_argument("--expires-in", type=float, default=None, help="seconds")
    revoke = tsub.add_parser("revoke", help="revoke a token")
    revoke.add_argument("token")
    revoke.add_argument("--db", default=_env("db", "./a2h.db"))
    revoke.add_argument("--store", default=_env("store", ""),
                        help="postgresql://USER@HOST:PORT/DB instead of --db (env A2H_STORE)")

    notify = sub.add_parser("notify", help="webhooks and ntfy topics (docs/notifications.md)")
    nsub = notify.add_subparsers(dest="notify_command", required=True)
    nadd = nsub.add_parser("add", help="add an endpoint; a webhook's signing secret is "
                                       "printed alone on stdout, once")
    nadd.add_argument("--db", default=_env("db", "./a2h.db"))
    nadd.add_argument("--store", default=_env("store", ""),
                        help="postgresql://USER@HOST:PORT/DB instead of --db (env A2H_STORE)")
    nadd.add_argument("--tenant", default="default")
    nadd.add_argument("--human", metavar="HANDLE", default=None,
                      help="only this person's requests (default: everyone in the tenant)")
    where = nadd.add_mutually_exclusive_group(required=True)
    where.add_argument("--webhook", metavar="URL", help="a Standard Webhooks receiver")
    where.add_argument("--ntfy", metavar="URL", help="an ntfy topic, e.g. https://ntfy.sh/T")
    nadd.add_argument("--ntfy-token", default=None, help="access token of a protected topic")
    nlist = nsub.add_parser("list", help="endpoints, their pending deliveries and errors")
    nlist.add_argument("--db", default=_env("db", "./a2h.db"))
    nlist.add_argument("--store", default=_env("store", ""),
                        help="postgresql://USER@HOST:PORT/DB instead of --db (env A2H_STORE)")
    nlist.add_argument("--tenant", default=None, help="only this tenant (default: all)")
    nlist.add_argument("--json", action="store_true", help="one JSON object per line")
    nremove = nsub.add_parser("remove", help="remove an endpoint and its pending deliveries")
    nremove.add_argument("id")
    nremove.add_argument("--db", default=_env("db", "./a2h.db"))
    nremove.add_argument("--store", default=_env("store", ""),
                        help="postgresql://USER@HOST:PORT/DB instead of --db (env A2H_STORE)")

    ask = sub.add_parser("ask", help="ask a human and print the answer")
    ask.add_argument("question")
    ask.add_argument("--to", required=True)
    ask.add_argument("--choices", default=None, help="comma-separated")
    ask.add_argument("--conversation", default="cli")
    ask.add_argument("--approval", action="store_true", help="ask for an approval")
    ask.add_argument("--wait", type=float, default=None,
                     help="give up after this many seconds (default: until resolved)")
    ask.add_argument("--expires-in", type=float, default=None)
    ask.add_argument("--op-id", default=None)
    ask.add_argument("--url", default=_env("url", "http://127.0.0.1:8000"))
    ask.add_argument("--token", default=_env("token"))

    sub.add_parser("mcp", help="serve the MCP tools on stdio (env A2H_URL, A2H_TOKEN)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "token":
            return token_command(args)
        if args.command == "ask":
            return asyncio.run(ask_command(args))
        if args.command == "notify":
            return notify_command(args)
        if args.command == "mcp":
            return mcp_command()
    except KeyboardInterrupt:
        return 130
    return EXIT_ERROR


# ---------------------------------------------------------------------------- token


def token_command(args: argparse.Namespace) -> int:
    """Create or revoke a token through the store, whether or not a hub runs on it."""
    import time

    from hub.errors import Invalid
    from hub.protocol import check_name
    from hub.store import Role, StoreError, UnsupportedStore, open_store

    if args.token_command == "create":
        try:
            check_name("tenant", args.tenant)
            check_name("name", args.agent or args.human or args.admin)
        except Invalid as exc:
            print(f"a2h: {exc.message}", file=sys.stderr)
            return 2

    async def run() -> int:
        store = open_store(args.store or args.db)
        await store.open()
        try:
            if args.token_command == "create":
                if args.agent:
                    role, name = Role.AGENT, args.agent
                elif args.human:
                    role, name = Role.HUMAN, args.human
                else:
                    role, name = Role.ADMIN, args.admin
                expires = None if args.expires_in is None else time.time() + args.expires_in
                print(await store.create_token(args.tenant, role, name, expires))
                return 0
            ok = await store.revoke_token(args.token, time.time())
            print("revoked" if ok else "no such active token", file=sys.stderr)
            return 0 if ok else EXIT_ERROR
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except (StoreError, UnsupportedStore) as exc:  # incl. NewerDatabase, unreachable
        print(f"a2h: {exc}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------- notify


def notify_command(args: argparse.Namespace) -> int:
    """Add, list or remove notification endpoints through the store, whether or not a hub
    runs on it (a running hub sees them at its next look at the outbox)."""
    import time

    import orjson

    from hub.errors import HubError
    from hub.notify import endpoints
    from hub.store import StoreError, UnsupportedStore, open_store

    async def run() -> int:
        store = open_store(args.store or args.db)
        await store.open()
        try:
            if args.notify_command == "add":
                now = time.time()
                if args.webhook:
                    ep, secret = endpoints.webhook(args.tenant, args.human, args.webhook, now)
                    await store.add_endpoint(ep)
                    print(f"added webhook {ep.id}: sign-check with this secret (shown once)",
                          file=sys.stderr)
                    print(secret)
                else:
                    ep = endpoints.ntfy_topic(args.tenant, args.human, args.ntfy,
                                              args.ntfy_token, now)
                    await store.add_endpoint(ep)
                    print(f"added ntfy topic {ep.id}", file=sys.stderr)
                    print(ep.id)
                return 0
            if args.notify_command == "list":
                for ep in await store.list_endpoints(args.tenant):
                    if args.json:
                        print(orjson.dumps(ep.view()).decode())
                    else:
                        print(describe_endpoint(ep.view()))
                return 0
            ok = await store.remove_endpoint(args.id)
            print("removed" if ok else "no such endpoint", file=sys.stderr)
            return 0 if ok else EXIT_ERROR
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except HubError as exc:
        print(f"a2h notify: {exc}", file=sys.stderr)
        return 2
    except (StoreError, UnsupportedStore) as exc:  # incl. NewerDatabase, unreachable
        print(f"a2h: {exc}", file=sys.stderr)
        return 2


def describe_endpoint(view: dict[str, Any]) -> str:
    """One endpoint in one line (two when something is wrong): what an admin needs."""
    who = f"{view['tenant']}/{view['human']}" if view["human"] else f"{view['tenant']}/*"
    if view["disabled_at"] is not None:
        state = "DISABLED"
    elif view["failing_since"] is not None:
        state = "failing"
    else:
        state = "ok"
    line = (f"{view['id']}  {view['channel']:<7} {who:<24} {state:<8} "
            f"pending={view['pending']}  {view['url']}")
    why = view["disabled_reason"] or view["last_error"]
    return line + (f"\n    {why}" if why else "")


# ---------------------------------------------------------------------------- ask


async def ask_command(args: argparse.Namespace) -> int:
    import orjson

    from client_sdk import A2HError, Hub

    if not args.token:
        print("a2h ask: give --token or set A2H_TOKEN (an agent token)", file=sys.stderr)
        return EXIT_ERROR
    choices = [c.strip() for c in args.choices.split(",") if c.strip()] if args.choices else None
    try:
        async with Hub(args.url, token=args.token) as hub:
            per_wait = 60.0 if args.wait is None else min(60.0, args.wait)
            answer = await hub.ask(args.to, args.question, conversation=args.conversation,
                                   choices=choices, wait=per_wait, expires_in=args.expires_in,
                                   op_id=args.op_id,
                                   kind="approval" if args.approval else "question")
            loop = asyncio.get_running_loop()
            end = None if args.wait is None else loop.time() + args.wait
            while answer.pending and (end is None or loop.time() < end):
                left = 60.0 if end is None else min(60.0, max(0.0, end - loop.time()))
                answer = await hub.wait(answer.op_id, left)
    except A2HError as exc:
        print(f"a2h ask: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    if answer.pending:
        print(f"a2h ask: still pending; re-attach with op_id {answer.op_id}", file=sys.stderr)
        return EXIT_PENDING
    value = answer.value
    if isinstance(value, str):
        print(value)
    elif value is not None:
        print(orjson.dumps(value).decode())
    codes = {"answered": EXIT_ANSWERED, "declined": EXIT_DECLINED, "expired": EXIT_EXPIRED,
             "cancelled": EXIT_CANCELLED}
    if answer.status != "answered":
        print(f"a2h ask: {answer.status}", file=sys.stderr)
    return codes.get(answer.status, EXIT_ERROR)


# ---------------------------------------------------------------------------- mcp


def mcp_command() -> int:
    """``a2h mcp``: the MCP tools on stdio (hub/mcp_stdio.py)."""
    from client_sdk import A2HError

    token = _env("token")
    if not token:
        print("a2h mcp: set A2H_TOKEN (an agent token) and A2H_URL", file=sys.stderr)
        return EXIT_ERROR
    try:
        from hub.mcp_stdio import serve_stdio
    except ImportError as exc:
        print(f"a2h mcp: {exc}; install the extra: pip install 'a2h-hub[mcp]'",
              file=sys.stderr)
        return EXIT_ERROR
    try:
        asyncio.run(serve_stdio(_env("url", "http://127.0.0.1:8000") or "", token,
                                progress_interval=Settings.from_env().mcp_progress_interval,
                                to=_env("to")))
    except A2HError as exc:
        print(f"a2h mcp: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    return 0


# ---------------------------------------------------------------------------- serve


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for f in fields(Settings):
        raw = getattr(args, f.name, None)
        if raw is not None:
            overrides[f.name] = coerce(f.name, raw)
    return Settings.from_env(**overrides)


def bootstrap(settings: Settings) -> tuple[str, str] | None:
    """On an empty store: create the default tenant, a human and an agent token."""
    from hub.store import open_store

    async def run() -> tuple[str, str] | None:
        store = open_store(settings.store or settings.db, synchronous=settings.sync,
                           commit_delay=settings.commit_delay,
                           commit_siblings=settings.commit_siblings,
                           commit_gap=settings.commit_gap)
        await store.open()
        try:
            return await store.bootstrap(settings.bootstrap_tenant, settings.bootstrap_human)
        finally:
            await store.close()

    return asyncio.run(run())


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from hub import BUILD
    from hub.logs import configure as configure_logging
    from hub.server import create_app
    from hub.server.connections import ConnectionGuard, protocols
    from hub.store import StoreError, UnsupportedStore

    settings = settings_from_args(args)
    configure_logging(settings.log_level)
    try:
        first = bootstrap(settings)
    except (StoreError, UnsupportedStore) as exc:  # incl. NewerDatabase, unreachable
        print(f"a2h: {exc}", file=sys.stderr)
        return 2
    if "://" in settings.store and not settings.bus:
        # A shared store with no bus: other nodes' commits reach this node's sockets only
        # through the periodic reconcile, and this node's never wake theirs.
        print("a2h: no --bus given: this node serves alone (other nodes' pushes cannot "
              "reach its sockets); run every node with --bus nats://HOST:PORT", flush=True)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        print(f"a2h: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    base = f"http://{settings.host}:{port}"
    app = create_app(settings)
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:  # pragma: no cover
        loop = "asyncio"
    guard = ConnectionGuard(max_per_ip=settings.max_conns_per_ip,
                            header_timeout=settings.header_timeout)
    http_protocol, ws_protocol = protocols(guard)
    config = uvicorn.Config(
        app, http=http_protocol, ws=ws_protocol, ws_per_message_deflate=False,
        ws_max_size=settings.max_frame,
        ws_ping_interval=settings.heartbeat or None, ws_ping_timeout=settings.heartbeat or None,
        loop=loop, lifespan="on", log_level=settings.log_level.lower(), access_log=False,
        log_config=None, proxy_headers=True, forwarded_allow_ips=settings.forwarded_allow_ips,
        timeout_graceful_shutdown=5,
    )
    hub = app.state.hub
    app.state.connection_guard = guard

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            # Graceful shutdown: stop accepting (uvicorn), tell every client to reconnect
            # after a jittered pause, let those frames drain (bounded), then uvicorn closes
            # the sockets with 1012 and waits for the tasks to finish.
            hub.announce_restart()
            await hub.gateway.drain(timeout=1.0)
            await super().shutdown(sockets)

    server = Server(config)

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            if first is not None:
                human, agent = first
                print(f"\n  A2H hub is up. Open the inbox of '{settings.bootstrap_human}':\n"
                      f"    {base}/#token={human}\n\n"
                      f"  Agent token (tenant '{settings.bootstrap_tenant}'):\n    {agent}\n"
                      f"  Shown once: only their hashes are stored.\n", flush=True)
            tune_gc()
            # the build: the hot modules compiled (fresh .native/) or interpreted, and why
            print(f"a2h: serving on {base} ({BUILD.describe()})", flush=True)
        await task

    if loop == "uvloop":
        import uvloop

        uvloop.run(run())
    else:  # pragma: no cover - uvloop is a dependency on every supported platform
        asyncio.run(run())
    return 0


def tune_gc() -> None:
    """Keep the cyclic GC off the tail latency.

    A busy hub holds ~180 GC-tracked objects per socket and per live request (coroutines
    of the ASGI stack, tasks, futures, requests); with CPython's default thresholds
    (700, 10, 10) a full collection runs every few seconds and pauses the event loop for
    80-120 ms at 1,000 sockets (bench: docs/performance.md). Freeze what start-up built
    (never garbage) and collect the young generation less often and the old one rarely.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


if __name__ == "__main__":
    sys.exit(main())
