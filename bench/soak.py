"""``python -m bench soak``: the long random-SIGKILL soak (issue 15).

The test suite runs a short one (``tests/test_crash_points.py::test_random_kill_soak``);
this one runs longer, with more agents and more kills, and reports figures.

Theory of operation. One real hub (``a2h serve``, :mod:`bench._servers`) on one database
file. ``agents`` agents, each a real SDK client (``client_sdk.Hub``) with its own token and
its own conversation, ask in a closed loop; every question carries a nonce and the expected
answer is derived from it (``_expected``), so a human who reads only the question can give
it and a wrong or crossed answer is caught. ``humans`` humans answer every inbox item
through the SDK. A killer SIGKILLs the hub ``kills`` times at seeded random moments of the
asking window and restarts it after a seeded pause, on the same database and port. An ask
that was cut off is re-sent with the same ``op_id`` until it resolves (the protocol makes
that a re-attach, never a second request). After the window, agents stop asking, settle
what is in flight (bounded by ``drain``), and the books are checked against the database:

- ``lost``: asked, never answered (no answer reached the agent);
- ``duplicated``: more than one row for an op_id, rows nobody asked for, or two different
  answers for one op_id (the agent's, the human's reply and the stored row disagree);
- ``wrong``: an answer whose value (or actor) is not the one the question implies;
- ``inbox_left``: items still in any human's inbox, or requests still pending.

Any of those not 0 is a failure: ``python -m bench soak`` exits 1.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import _sys
from bench._servers import Server, wait_healthy
from bench.scenarios import log

_NONCE = re.compile(r"code for ([0-9a-f]{16})\?")


@dataclass
class SoakConfig:
    seconds: float = 60.0   # the asking window; kills happen inside it
    kills: int = 4
    agents: int = 20
    humans: int = 2
    seed: int = 1515
    wait: float = 10.0      # each ask's ``wait``; a pending reply is re-asked (same op_id)
    drain: float = 60.0     # after the window, how long in-flight asks may take to settle
    pause: tuple[float, float] = (0.05, 0.5)  # seconds the hub stays dead, min/max


def _expected(nonce: str) -> str:
    return hashlib.blake2b(nonce.encode(), digest_size=6).hexdigest()


def _question(op: str, nonce: str) -> str:
    return f"Soak check {op}: what is the code for {nonce}?"


@dataclass
class _Books:
    asked: dict[str, str] = field(default_factory=dict)       # op_id -> expected value
    to: dict[str, str] = field(default_factory=dict)          # op_id -> human handle
    got: dict[str, tuple[str, Any, Any]] = field(default_factory=dict)  # status, value, actor
    got_twice: int = 0
    human_said: dict[str, Any] = field(default_factory=dict)  # op_id -> value in reply
    human_mismatch: list[str] = field(default_factory=list)
    rtt_ns: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    responds: Counter[str] = field(default_factory=Counter)
    kills: list[dict[str, Any]] = field(default_factory=list)
    reconnects: int = 0
    dead_clients: list[str] = field(default_factory=list)
    last_answer: float = 0.0


def _dead(hub: Any) -> str | None:
    """Why the SDK client's reader task ended while the client is open, or None if it runs.

    A client whose reader died never reconnects: its asks wait for a connection that never
    comes (issue 15, item 3: a reconnect handshake cut off by the next kill). The soak
    counts these (``sdk_dead_clients``) and opens a new client, so that what it measures
    about the hub is not hidden behind a stuck client."""
    reader = getattr(hub, "_reader", None)
    if reader is None or not reader.done():
        return None
    exc = None if reader.cancelled() else reader.exception()
    return repr(exc) if exc is not None else "reader ended"


async def _agent(k: int, url: str, token: str, cfg: SoakConfig, books: _Books,
                 ask_until: float, settle_until: float) -> None:
    from client_sdk import Hub
    from client_sdk.errors import A2HError, RetryableError

    rng = random.Random(cfg.seed * 1_000_003 + k)
    human = f"h{k % cfg.humans}"
    conversation = f"soak-{k}"
    loop = asyncio.get_running_loop()
    hub = Hub(url, token, max_backoff=0.5)
    await hub.connect()
    try:
        j = 0
        while loop.time() < ask_until:
            op = f"s{cfg.seed}-a{k}-{j}"
            j += 1
            nonce = f"{rng.getrandbits(64):016x}"
            books.asked[op] = _expected(nonce)
            books.to[op] = human
            question = _question(op, nonce)
            t0 = _sys.now_ns()
            while True:
                if loop.time() > settle_until:
                    return  # bounded: this op stays unanswered and is counted lost
                why = _dead(hub)
                if why is not None:
                    books.dead_clients.append(f"agent {k}: {why}")
                    books.reconnects += hub.reconnects
                    await hub.close()
                    hub = Hub(url, token, max_backoff=0.5)
                    try:
                        await hub.connect()
                    except A2HError as exc:
                        books.errors[f"agent reopen {type(exc).__name__}"] += 1
                        await asyncio.sleep(0.2)
                        continue
                try:
                    ans = await asyncio.wait_for(
                        hub.ask(human, question, conversation=conversation, op_id=op,
                                wait=cfg.wait), cfg.wait + 45)
                except (RetryableError, TimeoutError) as exc:
                    books.errors[f"agent {type(exc).__name__}"] += 1
                    await asyncio.sleep(0.1 + rng.random() * 0.2)
                    continue
                except A2HError as exc:  # not retryable: a finding, not a reason to stop
                    books.errors[f"agent {type(exc).__name__} {exc.code}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                if ans.pending:
                    books.errors["agent ask came back pending"] += 1
                    continue  # the wait ran out (a restart): ask again, same op_id
                if op in books.got:
                    books.got_twice += 1
                books.got[op] = (ans.status, ans.value, ans.actor)
                books.rtt_ns.append(_sys.now_ns() - t0)
                books.last_answer = loop.time()
                break
    finally:
        books.reconnects += hub.reconnects
        await hub.close()


async def _human(handle: str, url: str, token: str, books: _Books,
                 stop: asyncio.Event) -> None:
    from client_sdk import Hub
    from client_sdk.errors import A2HError, AlreadyResolved

    inflight: set[str] = set()

    async def answer(hub: Hub, op: str, question: str) -> None:
        m = _NONCE.search(question)
        value = _expected(m.group(1)) if m else "?"
        try:
            res = await asyncio.wait_for(hub.respond(op, value), 30)
            books.responds["answered"] += 1
            said = res.value
        except AlreadyResolved as exc:
            books.responds["already_resolved"] += 1
            said = exc.answer.value if exc.answer is not None else None
        except (A2HError, TimeoutError) as exc:  # the hub died under it: the next poll retries
            books.responds[type(exc).__name__] += 1
            return
        finally:
            inflight.discard(op)
        prev = books.human_said.setdefault(op, said)
        if prev != said or said != value:
            books.human_mismatch.append(op)

    hub = Hub(url, token, max_backoff=0.5)
    await hub.connect()
    tasks: set[asyncio.Task[None]] = set()
    try:
        while not stop.is_set():
            why = _dead(hub)
            if why is not None:  # see _dead: reopen, and count it
                books.dead_clients.append(f"human {handle}: {why}")
                books.reconnects += hub.reconnects
                await hub.close()
                hub = Hub(url, token, max_backoff=0.5)
                try:
                    await hub.connect()
                except A2HError:
                    await asyncio.sleep(0.2)
                    continue
            try:
                items = await asyncio.wait_for(hub.inbox(), 5)
            except (A2HError, TimeoutError):
                await asyncio.sleep(0.05)  # the hub is down: poll again shortly
                continue
            for item in items:
                if item.op_id not in inflight:
                    inflight.add(item.op_id)
                    t = asyncio.get_running_loop().create_task(
                        answer(hub, item.op_id, item.question))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
            await asyncio.sleep(0.02)
    finally:
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        books.reconnects += hub.reconnects
        await hub.close()


async def _killer(server: Server, cfg: SoakConfig, books: _Books, t_start: float) -> None:
    rng = random.Random(cfg.seed)
    at = sorted(rng.uniform(0.05, 0.9) * cfg.seconds for _ in range(cfg.kills))
    pauses = [rng.uniform(*cfg.pause) for _ in range(cfg.kills)]
    loop = asyncio.get_running_loop()
    for when, pause in zip(at, pauses):
        await asyncio.sleep(max(0.0, t_start + when - loop.time()))
        t_kill = _sys.now_ns()
        at_s = round(loop.time() - t_start, 2)
        server.kill()
        await asyncio.sleep(pause)
        t_spawn = _sys.now_ns()
        server.start(wait=False)
        t_up = await asyncio.to_thread(wait_healthy, server, 60.0)
        books.kills.append({"at_s": at_s, "pause_s": round(pause, 3),
                            "serving_after_restart_s": round((t_up - t_spawn) / 1e9, 3),
                            "down_s": round((t_up - t_kill) / 1e9, 3),
                            "answered_before": len(books.got)})
        log(f"soak: kill {len(books.kills)}/{cfg.kills} at {books.kills[-1]['at_s']} s, "
            f"down {books.kills[-1]['down_s']} s")


def _rows(db: Path) -> list[tuple[str, str, str, Any, Any]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return list(conn.execute("SELECT tenant, op_id, status, value, actor FROM requests"))
    finally:
        conn.close()


async def _inboxes(url: str, tokens: dict[str, str], humans: list[str]) -> dict[str, int]:
    from client_sdk import Hub

    out = {}
    for h in humans:
        async with Hub(url, tokens[f"human:{h}"]) as hub:
            out[h] = len(await asyncio.wait_for(hub.inbox(), 30))
    return out


async def _soak(cfg: SoakConfig, server: Server, tokens: dict[str, str]) -> tuple[_Books, float]:
    books = _Books()
    loop = asyncio.get_running_loop()
    t_start = loop.time()
    ask_until = t_start + cfg.seconds
    settle_until = ask_until + cfg.drain
    stop = asyncio.Event()
    humans = [asyncio.create_task(_human(f"h{i}", server.url, tokens[f"human:h{i}"], books,
                                         stop)) for i in range(cfg.humans)]
    chaos = asyncio.create_task(_killer(server, cfg, books, t_start))
    try:
        await asyncio.gather(*(
            _agent(k, server.url, tokens[f"agent:soak{k}"], cfg, books, ask_until, settle_until)
            for k in range(cfg.agents)))
        await chaos
    finally:
        chaos.cancel()
        stop.set()
        await asyncio.gather(chaos, *humans, return_exceptions=True)
    books.last_answer -= t_start
    return books, loop.time() - t_start


def run_soak(cfg: SoakConfig) -> dict[str, Any]:
    """Run the soak; return its JSON-ready figures (``failures`` empty when it held)."""
    _sys.raise_nofile()
    workdir = Path(tempfile.mkdtemp(prefix="a2h-soak-"))
    server = Server("hub", workdir=workdir)
    humans = [f"h{i}" for i in range(cfg.humans)]
    tokens = server.tokens(agents=[f"soak{k}" for k in range(cfg.agents)], humans=humans)
    log(f"soak: {cfg.agents} agents, {cfg.humans} humans, {cfg.seconds:.0f} s, {cfg.kills} "
        f"SIGKILLs, seed {cfg.seed}; database {server.db}")
    t_wall = time.time()
    server.start()
    try:
        books, elapsed = asyncio.run(asyncio.wait_for(
            _soak(cfg, server, tokens), cfg.seconds + cfg.drain + 120))
        inbox = asyncio.run(_inboxes(server.url, tokens, humans))
    finally:
        server.stop()
    rows = _rows(server.db)

    per_op = Counter(op for _, op, *_ in rows)
    stored = {op: (status, orjson.loads(value) if value is not None else None, actor)
              for _, op, status, value, actor in rows}
    extra_rows = sorted(set(per_op) - set(books.asked))
    dup_rows = sorted(op for op, n in per_op.items() if n > 1)
    crossed = sorted(op for op, (_, v, _) in books.got.items()
                     if op in stored and stored[op][1] != v)
    lost = sorted(set(books.asked) - set(books.got))
    wrong = sorted(op for op, (status, value, actor) in books.got.items()
                   if status != "answered" or value != books.asked[op]
                   or actor != f"human:{books.to[op]}")
    pending_rows = sum(1 for s, _, _ in stored.values() if s == "pending")
    figures = {
        "asked": len(books.asked),
        "answered": len(books.got),
        "lost": len(lost),
        "duplicated": len(dup_rows) + len(extra_rows) + len(crossed) + books.got_twice
        + len(set(books.human_mismatch)),
        "wrong": len(wrong),
        "inbox_left": sum(inbox.values()) + pending_rows,
    }
    busy = books.last_answer
    failures = [k for k in ("lost", "duplicated", "wrong", "inbox_left") if figures[k]]
    if figures["asked"] == 0:
        failures.append("asked")
    out: dict[str, Any] = {
        "config": asdict(cfg),
        "figures": figures,
        "failures": failures,
        "ok": not failures,
        "seconds": round(elapsed, 1),
        "answers_per_s": round(len(books.got) / busy, 1) if busy > 0 else None,
        "ask_to_answer_ms": _sys.percentiles(books.rtt_ns, 1e-6),
        "kills": books.kills,
        "down_s": _sys.percentiles([k["down_s"] for k in books.kills]),
        "serving_after_restart_s": _sys.percentiles(
            [k["serving_after_restart_s"] for k in books.kills]),
        "stored_rows": len(rows),
        "stored_status": dict(Counter(s for s, _, _ in stored.values())),
        "pending_rows": pending_rows,
        "inbox_items": inbox,
        "human_responds": dict(books.responds),
        "retried_errors": dict(books.errors),
        "sdk_reconnects": books.reconnects,
        "sdk_dead_clients": len(books.dead_clients),
        "sdk_dead_client_reasons": dict(Counter(r.split(": ", 1)[1]
                                                for r in books.dead_clients)),
        "detail": {"lost": lost[:20], "wrong": wrong[:20], "duplicated_rows": dup_rows[:20],
                   "extra_rows": extra_rows[:20], "crossed": crossed[:20],
                   "human_mismatch": sorted(set(books.human_mismatch))[:20]},
        "meta": {"database": str(server.db),
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_wall))},
    }
    return out


def summary(doc: dict[str, Any]) -> str:
    f, c = doc["figures"], doc["config"]
    lines = [
        f"soak: {c['agents']} agents, {c['humans']} humans, {doc['seconds']} s, "
        f"{len(doc['kills'])}/{c['kills']} SIGKILLs (seed {c['seed']})",
        f"  asked {f['asked']}, answered {f['answered']}, lost {f['lost']}, "
        f"duplicated {f['duplicated']}, wrong {f['wrong']}, inbox left {f['inbox_left']}",
        f"  {doc['answers_per_s']} answers/s; ask->answer ms p50 {doc['ask_to_answer_ms']['p50']}"
        f" p99 {doc['ask_to_answer_ms']['p99']} max {doc['ask_to_answer_ms']['max']}",
        f"  down per kill s p50 {doc['down_s']['p50']} max {doc['down_s']['max']}; SDK "
        f"reconnects {doc['sdk_reconnects']}; human responds {doc['human_responds']}",
        f"  retried errors {doc['retried_errors']}",
        f"  SDK clients whose reader died and were reopened: {doc['sdk_dead_clients']} "
        f"{doc['sdk_dead_client_reasons']}",
        "  OK" if doc["ok"] else f"  FAILED: {', '.join(doc['failures'])} {doc['detail']}",
    ]
    return "\n".join(lines)
