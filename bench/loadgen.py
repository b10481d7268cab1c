"""One load-generator process: ``python -m bench.loadgen``, configured by its first stdin line.

The orchestrator (``bench.scenarios``) starts several of these next to the server under
test, so the load never shares an event loop (or a GIL) with the server. Each process runs
one *mode* on uvloop and talks to the orchestrator in JSON lines: commands on stdin
(``{"cmd": ...}``), events on stdout (``{"event": ...}``).

Modes:

- ``cycles``  agents ask in a closed loop (one ask in flight per agent, the next one as
  soon as the answer arrives, or paced at ``rate`` asks/s per agent) and/or humans answer
  every ``inbox.add`` at once. Latencies are stamped across processes with
  ``time.monotonic_ns()`` (system-wide on Linux): the agent puts its send time into the
  ask's ``context`` (the human reads it from the pushed request: *ask → inbox*), the human
  puts its send time into the answer's ``value`` (the agent reads it from the ``resolved``
  push: *answer → agent*).
- ``idle``    open many sockets; on ``ask`` every agent asks once and then just waits.
- ``burst``   create many pending requests as fast as possible (recovery; with a large
  ``context``, the flood of ``python -m bench flood``).
- ``probe``   one agent: create pending requests, then time ``wait`` round trips one at a
  time (rebuild-on-touch after eviction vs a live room).
- ``flood``   bursts of asks into one conversation (overload).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections import Counter
from typing import Any

import orjson

from bench._sys import raise_nofile
from bench._ws import open_conn
from client_sdk import new_op_id

now_ns = time.monotonic_ns
QUESTION = "Deploy build 4711 to production?"


class Control:
    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.reader = asyncio.StreamReader(limit=2**24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(self.reader), sys.stdin)

    async def recv(self) -> dict[str, Any]:
        assert self.reader is not None
        line = await self.reader.readline()
        if not line:
            return {"cmd": "exit"}
        return orjson.loads(line)  # type: ignore[no-any-return]

    @staticmethod
    def emit(obj: dict[str, Any]) -> None:
        sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
        sys.stdout.buffer.flush()


async def connect_all(cfg: dict[str, Any], roles: list[Any], tokens: list[str],
                      concurrency: int = 64) -> tuple[int, int]:
    """Open one connection per role (``role.conn``), ``concurrency`` handshakes at a time."""
    sem = asyncio.Semaphore(concurrency)
    failed = 0
    first_error = ""

    async def one(role: Any, token: str) -> None:
        nonlocal failed, first_error
        async with sem:
            for attempt in range(3):
                try:
                    role.conn = await open_conn(cfg["base"], cfg["dialect"], token,
                                                role.on_message, cfg.get("timeout", 60.0))
                    return
                except Exception as exc:  # noqa: BLE001 - report, retry, then count
                    if attempt == 2:
                        failed += 1
                        first_error = first_error or repr(exc)
                    else:
                        await asyncio.sleep(0.2)

    await asyncio.gather(*(one(r, t) for r, t in zip(roles, tokens)))
    if first_error:
        Control.emit({"event": "log", "msg": f"connect failures: {failed}: {first_error}"})
    return len(roles) - failed, failed


def _tokens(a: dict[str, Any], n: int) -> list[str]:
    """One token per agent (``tokens``), or one shared ``token``."""
    toks = a.get("tokens") or [a.get("token", "")]
    return [toks[i % len(toks)] for i in range(n)]


# ---------------------------------------------------------------------------- cycles


class Window:
    """Shared state of one process's measurement."""

    def __init__(self) -> None:
        self.m0 = self.m1 = self.stop = 0
        self.running = False
        self.cycles = 0
        self.asks = 0
        self.lat_a: list[int] = []   # ask -> inbox.add at the human, µs
        self.lat_b: list[int] = []   # answer sent -> resolved at the agent, µs
        self.rtt: list[int] = []     # ask sent -> resolved at the agent, µs
        self.errors: Counter[str] = Counter()
        self.answered = 0
        self.limit = 0
        self.finished_agents = 0
        self.done: asyncio.Future[None] | None = None


class Agent:
    __slots__ = ("w", "idx", "conn", "human", "conv", "new_conv", "prefix", "seq", "op", "t_ask",
                 "interval", "active", "n", "wait")

    def __init__(self, w: Window, idx: int, human: str, prefix: str, new_conv: bool,
                 rate: float, wait: float = 60.0) -> None:
        self.w = w
        self.idx = idx
        self.conn: Any = None
        self.human = human
        self.prefix = prefix
        self.conv = f"{prefix}c{idx}"
        self.new_conv = new_conv
        self.seq = 0
        self.op = ""
        self.t_ask = 0
        self.interval = int(1e9 / rate) if rate > 0 else 0
        self.active = False
        self.n = 0
        self.wait = wait

    def ask(self) -> None:
        w = self.w
        t = now_ns()
        if t >= w.stop or (w.limit and self.n >= w.limit) or self.conn.closed:
            self._finish()
            return
        self.seq += 1
        self.n += 1
        op = new_op_id()  # as an agent on the SDK makes them
        self.op = op
        self.t_ask = t
        conv = f"{self.prefix}r{self.idx}-{self.seq}" if self.new_conv else self.conv
        w.asks += 1
        self.conn.send({"type": "ask", "id": self.seq, "op_id": op, "to": self.human,
                        "question": QUESTION, "conversation": conv, "wait": self.wait,
                        "context": {"t": t}})

    def _finish(self) -> None:
        if self.active:
            self.active = False
            w = self.w
            w.finished_agents += 1

    def _next(self) -> None:
        if self.interval:
            delay = (self.t_ask + self.interval - now_ns()) / 1e9
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self.ask)
                return
        self.ask()

    def on_message(self, m: dict[str, Any]) -> None:
        typ = m["type"]
        if typ == "resolved":
            r = m["request"]
            if r["op_id"] != self.op:
                return
            t = now_ns()
            w = self.w
            if w.m0 <= t < w.m1:
                w.cycles += 1
                w.lat_b.append((t - int(r["value"])) // 1000)
                w.rtt.append((t - self.t_ask) // 1000)
            self._next()
        elif typ == "error":
            self.w.errors[m.get("code", "?")] += 1
            # Not answered: try the next ask a little later (errors are counted, not hidden).
            asyncio.get_running_loop().call_later(0.01, self.ask)


class Human:
    __slots__ = ("w", "conn", "seq")

    def __init__(self, w: Window) -> None:
        self.w = w
        self.conn: Any = None
        self.seq = 0

    def on_message(self, m: dict[str, Any]) -> None:
        typ = m["type"]
        if typ == "inbox.add":
            r = m["request"]
            t = now_ns()
            w = self.w
            ctx = r.get("context")
            if ctx and w.m0 <= t < w.m1:
                w.lat_a.append((t - ctx["t"]) // 1000)
            self.seq += 1
            w.answered += 1
            self.conn.send({"type": "respond", "id": self.seq, "op_id": r["op_id"],
                            "value": str(now_ns())})
        elif typ == "error":
            self.w.errors["human:" + m.get("code", "?")] += 1


async def mode_cycles(cfg: dict[str, Any], ctl: Control) -> None:
    w = Window()
    humans = [Human(w) for _ in cfg.get("humans", [])]
    h_tokens = [h["token"] for h in cfg.get("humans", [])]
    a = cfg.get("agents") or {}
    handles = a.get("humans", [])
    agents = [Agent(w, a.get("index0", 0) + i, handles[i % len(handles)] if handles else "",
                    a.get("prefix", "a"), a.get("new_conv", False), a.get("rate", 0.0),
                    a.get("wait", 60.0))
              for i in range(a.get("count", 0))]
    t0 = now_ns()
    ok_h, bad_h = await connect_all(cfg, humans, h_tokens)
    ok_a, bad_a = await connect_all(cfg, agents, _tokens(a, len(agents)))
    ctl.emit({"event": "ready", "connected": ok_h + ok_a, "failed": bad_h + bad_a,
              "connect_s": (now_ns() - t0) / 1e9})
    agents = [x for x in agents if x.conn is not None]
    while True:
        cmd = await ctl.recv()
        c = cmd["cmd"]
        if c == "run":
            w.m0, w.m1, w.stop = cmd["m0"], cmd["m1"], cmd["stop"]
            w.limit = cmd.get("limit", 0)
            w.cycles = w.asks = w.answered = w.finished_agents = 0
            w.lat_a, w.lat_b, w.rtt = [], [], []
            w.errors.clear()
            for ag in agents:
                ag.n = 0
            loop = asyncio.get_running_loop()
            w.done = loop.create_future()
            for ag in agents:
                ag.active = True
            # Spread the first asks so the start is not one burst: over ~50 ms in a closed
            # loop, over one whole interval when paced (else every agent asks in phase).
            spread = 1.0 / a["rate"] if a.get("rate") else 0.05
            for i, ag in enumerate(agents):
                loop.call_later(spread * i / max(1, len(agents)), ag.ask)
            if agents:
                loop.create_task(_watch_done(w, len(agents), ctl))
        elif c == "finish":
            ctl.emit({"event": "result", "cycles": w.cycles, "asks": w.asks,
                      "answered": w.answered, "lat_a": w.lat_a, "lat_b": w.lat_b,
                      "rtt": w.rtt, "errors": dict(w.errors),
                      "cpu_s": time.process_time()})
        elif c == "exit":
            for x in agents + humans:  # type: ignore[operator]
                if x.conn is not None:
                    x.conn.close()
            await asyncio.sleep(0.05)
            return


async def _watch_done(w: Window, n: int, ctl: Control) -> None:
    while w.finished_agents < n:
        await asyncio.sleep(0.02)
    ctl.emit({"event": "done", "t": now_ns(), "asks": w.asks})


# ---------------------------------------------------------------------------- idle


class Waiter:
    """An agent that asks once and then waits for the answer that does not come."""

    __slots__ = ("conn", "acked", "errors", "fut")

    def __init__(self) -> None:
        self.conn: Any = None
        self.acked = False
        self.errors: Counter[str] | None = None
        self.fut: asyncio.Future[None] | None = None

    def on_message(self, m: dict[str, Any]) -> None:
        typ = m["type"]
        if typ == "ok":
            self.acked = True
            if self.fut is not None and not self.fut.done():
                self.fut.set_result(None)
        elif typ == "error":
            if self.errors is not None:
                self.errors[m.get("code", "?")] += 1
            if self.fut is not None and not self.fut.done():
                self.fut.set_result(None)


class Idle:
    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Any = None

    def on_message(self, m: dict[str, Any]) -> None:
        pass


async def _ask_once(x: Waiter, i: int, sem: asyncio.Semaphore, errors: Counter[str],
                    handles: list[str], prefix: str, expires_in: float) -> None:
    async with sem:
        x.errors = errors
        x.fut = asyncio.get_running_loop().create_future()
        x.conn.send({"type": "ask", "id": 1, "op_id": f"{prefix}{i}",
                     "to": handles[i % len(handles)] if handles else "",
                     "question": QUESTION, "conversation": f"{prefix}c{i}",
                     "wait": 60, "expires_in": expires_in})
        try:
            await asyncio.wait_for(x.fut, 60)
        except TimeoutError:
            errors["timeout"] += 1


async def mode_idle(cfg: dict[str, Any], ctl: Control) -> None:
    a = cfg.get("agents") or {}
    waiters = [Waiter() for _ in range(a.get("count", 0))]
    idles = [Idle() for _ in cfg.get("humans", [])]
    t0 = now_ns()
    ok_h, bad_h = await connect_all(cfg, idles, [h["token"] for h in cfg.get("humans", [])],
                                    cfg.get("concurrency", 64))
    ok_a, bad_a = await connect_all(cfg, waiters, _tokens(a, len(waiters)),
                                    cfg.get("concurrency", 64))
    ctl.emit({"event": "ready", "connected": ok_h + ok_a, "failed": bad_h + bad_a,
              "connect_s": (now_ns() - t0) / 1e9})
    live = [x for x in waiters if x.conn is not None]
    handles = a.get("humans", [])
    prefix = a.get("prefix", "i")
    while True:
        cmd = await ctl.recv()
        if cmd["cmd"] == "ask":
            errors: Counter[str] = Counter()
            sem = asyncio.Semaphore(cmd.get("window", 256))
            expires_in = cmd.get("expires_in", 600)
            t1 = now_ns()
            await asyncio.gather(*(_ask_once(x, a.get("index0", 0) + i, sem, errors, handles,
                                             prefix, expires_in) for i, x in enumerate(live)))
            ctl.emit({"event": "asked", "acked": sum(x.acked for x in live),
                      "errors": dict(errors), "ask_s": (now_ns() - t1) / 1e9})
        elif cmd["cmd"] == "exit":
            for x in live + idles:  # type: ignore[operator]
                if x.conn is not None:
                    x.conn.close()
            await asyncio.sleep(0.2)
            return


# ---------------------------------------------------------------------------- burst


class Burster:
    """Keeps ``window`` asks in flight on one socket until its share is acknowledged."""

    __slots__ = ("conn", "todo", "next", "window", "prefix", "human", "expires_in", "acked",
                 "errors", "max_deadline", "fut", "inflight", "idx", "context")

    def __init__(self, idx: int, todo: int, window: int, prefix: str, human: str,
                 expires_in: float, context: Any = None) -> None:
        self.conn: Any = None
        self.idx = idx
        self.todo = todo
        self.next = 0
        self.window = window
        self.prefix = prefix
        self.human = human
        self.expires_in = expires_in
        self.context = context  # the same object in every ask (the flood: ~48 KiB)
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.max_deadline = 0.0
        self.fut: asyncio.Future[None] | None = None
        self.inflight = 0

    def pump(self) -> None:
        frames = []
        while self.inflight < self.window and self.next < self.todo:
            self.next += 1
            self.inflight += 1
            op = f"{self.prefix}{self.idx}-{self.next}"
            frames.append({"type": "ask", "id": self.next, "op_id": op, "to": self.human,
                           "question": QUESTION, "conversation": f"{self.prefix}c{self.idx}-{self.next}",
                           "wait": 0, "expires_in": self.expires_in, "context": self.context})
        if frames:
            self.conn.send_many(frames)

    def on_message(self, m: dict[str, Any]) -> None:
        typ = m["type"]
        if typ == "ok":
            self.acked += 1
            self.max_deadline = max(self.max_deadline, m["request"]["deadline"])
        elif typ == "error":
            self.errors[m.get("code", "?")] += 1
        else:
            return
        self.inflight -= 1
        if self.acked + sum(self.errors.values()) >= self.todo:
            if self.fut is not None and not self.fut.done():
                self.fut.set_result(None)
        else:
            self.pump()


async def mode_burst(cfg: dict[str, Any], ctl: Control) -> None:
    total, conns = cfg["total"], cfg["conns"]
    share = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]
    bs = [Burster(i, share[i], cfg.get("window", 64), cfg.get("prefix", "b"), cfg["human"],
                  cfg["expires_in"], cfg.get("context")) for i in range(conns)]
    ok, bad = await connect_all(cfg, bs, [cfg["token"]] * conns)
    ctl.emit({"event": "ready", "connected": ok, "failed": bad})
    while True:
        cmd = await ctl.recv()
        if cmd["cmd"] == "run":
            loop = asyncio.get_running_loop()
            t0 = now_ns()
            for b in bs:
                b.fut = loop.create_future()
                b.pump()
            await asyncio.wait_for(asyncio.gather(*(b.fut for b in bs if b.fut)), 300)
            errors: Counter[str] = Counter()
            for b in bs:
                errors.update(b.errors)
            ctl.emit({"event": "done", "acked": sum(b.acked for b in bs), "errors": dict(errors),
                      "max_deadline": max(b.max_deadline for b in bs),
                      "elapsed_s": (now_ns() - t0) / 1e9})
        elif cmd["cmd"] == "exit":
            for b in bs:
                if b.conn is not None:
                    b.conn.close()
            await asyncio.sleep(0.05)
            return


# ---------------------------------------------------------------------------- probe


class Prober:
    __slots__ = ("conn", "futs", "ids")

    def __init__(self) -> None:
        self.conn: Any = None
        self.futs: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)

    def on_message(self, m: dict[str, Any]) -> None:
        if m["type"] in ("ok", "error"):
            fut = self.futs.pop(m.get("id"), None)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(m)

    async def call(self, frame: dict[str, Any]) -> dict[str, Any]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.futs[frame["id"]] = fut
        self.conn.send(frame)
        return await asyncio.wait_for(fut, 30)


async def _probe_ask(p: Prober, i: int, sem: asyncio.Semaphore, errors: Counter[str],
                     ops: list[str], prefix: str, human: str, expires_in: float) -> None:
    async with sem:
        op = f"{prefix}{i}"
        r = await p.call({"type": "ask", "id": next(p.ids), "op_id": op, "to": human,
                          "question": QUESTION, "conversation": f"{prefix}c{i}",
                          "wait": 0, "expires_in": expires_in})
        if r["type"] == "ok":
            ops.append(op)
        else:
            errors[r.get("code", "?")] += 1


async def mode_probe(cfg: dict[str, Any], ctl: Control) -> None:
    p = Prober()
    await connect_all(cfg, [p], [cfg["token"]])
    ctl.emit({"event": "ready", "connected": int(p.conn is not None)})
    ops: list[str] = []
    while True:
        cmd = await ctl.recv()
        if cmd["cmd"] == "ask":
            sem = asyncio.Semaphore(64)
            errors: Counter[str] = Counter()
            await asyncio.gather(*(_probe_ask(p, i, sem, errors, ops, cmd.get("prefix", "p"),
                                              cfg["human"], cmd.get("expires_in", 600))
                                   for i in range(cmd["count"])))
            ctl.emit({"event": "asked", "acked": len(ops), "errors": dict(errors)})
        elif cmd["cmd"] == "probe":
            # Two wait round trips per request, back to back: the first touches the room
            # (rebuilding it if it was evicted), the second finds it live.
            first: list[int] = []
            second: list[int] = []
            errors = Counter()
            for op in ops[: cmd.get("limit", len(ops))]:
                for out in (first, second):
                    t = now_ns()
                    r = await p.call({"type": "wait", "id": next(p.ids), "op_id": op, "wait": 0})
                    out.append((now_ns() - t) // 1000)
                    if r["type"] != "ok":
                        errors[r.get("code", "?")] += 1
            ctl.emit({"event": "probed", "first": first, "second": second,
                      "errors": dict(errors)})
        elif cmd["cmd"] == "exit":
            if p.conn is not None:
                p.conn.close()
            await asyncio.sleep(0.05)
            return


# ---------------------------------------------------------------------------- flood


class Flooder:
    __slots__ = ("conn", "sent", "codes", "retryable_false")

    def __init__(self) -> None:
        self.conn: Any = None
        self.sent = 0
        self.codes: Counter[str] = Counter()
        self.retryable_false = 0

    def on_message(self, m: dict[str, Any]) -> None:
        typ = m["type"]
        if typ == "ok":
            self.codes["ok"] += 1
        elif typ == "error":
            code = m.get("code", "?")
            self.codes[code] += 1
            if code == "overloaded" and m.get("retryable") is False:
                self.retryable_false += 1


async def _flood(f: Flooder, cfg: dict[str, Any], stop: int, burst: int,
                 interval: float) -> None:
    loop = asyncio.get_running_loop()
    nxt = loop.time()
    while now_ns() < stop:
        frames = []
        for _ in range(burst):
            f.sent += 1
            frames.append({"type": "ask", "id": f.sent, "op_id": f"flood-{f.sent}",
                           "to": cfg["human"], "question": QUESTION,
                           "conversation": cfg["conversation"], "wait": 0, "expires_in": 3600})
        f.conn.send_many(frames)
        nxt += interval
        await asyncio.sleep(max(0.0, nxt - loop.time()))


async def mode_flood(cfg: dict[str, Any], ctl: Control) -> None:
    f = Flooder()
    tasks: set[asyncio.Task[None]] = set()
    await connect_all(cfg, [f], [cfg["token"]])
    ctl.emit({"event": "ready", "connected": int(f.conn is not None)})
    while True:
        cmd = await ctl.recv()
        if cmd["cmd"] == "run":
            task = asyncio.get_running_loop().create_task(
                _flood(f, cfg, cmd["stop"], cmd["burst"], cmd["interval_ms"] / 1000))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif cmd["cmd"] == "finish":
            ctl.emit({"event": "result", "sent": f.sent, "codes": dict(f.codes),
                      "overloaded_not_retryable": f.retryable_false})
        elif cmd["cmd"] == "exit":
            if f.conn is not None:
                f.conn.close()
            await asyncio.sleep(0.05)
            return


MODES = {"cycles": mode_cycles, "idle": mode_idle, "burst": mode_burst, "probe": mode_probe,
         "flood": mode_flood}


async def amain() -> None:
    ctl = Control()
    await ctl.start()
    cfg = await ctl.recv()  # the first line is the configuration
    await MODES[cfg["mode"]](cfg, ctl)


def main() -> int:
    raise_nofile()
    import uvloop

    uvloop.run(amain())
    return 0


if __name__ == "__main__":
    sys.exit(main())
