// node --test: hub/web/js/connection.js against a fake WebSocket and a fake clock.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Connection, State, backoffDelay, HubRequestError, CONNECTION_LOST } from "../../../hub/web/js/connection.js";

class FakeClock {
  constructor() {
    this.t = 1_000_000;
    this.timers = new Map();
    this.nextId = 1;
    this.now = () => this.t;
    this.setTimeout = (fn, ms) => {
      const id = this.nextId++;
      this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
      return id;
    };
    this.clearTimeout = (id) => this.timers.delete(id);
  }
  advance(ms) {
    const end = this.t + ms;
    for (;;) {
      const due = [...this.timers.entries()].filter(([, v]) => v.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.timers.delete(due[0]);
      this.t = due[1].at;
      due[1].fn();
    }
    this.t = end;
  }
}

function fakeSockets() {
  const sockets = [];
  class FakeWS {
    constructor(url) {
      this.url = url;
      this.sent = [];
      this.closed = null;
      sockets.push(this);
    }
    send(data) {
      if (this.closed) throw new Error("closed");
      this.sent.push(JSON.parse(data));
    }
    close(code, reason) {
      this.closed = { code, reason };
    }
    // test side
    open() {
      this.onopen && this.onopen({});
    }
    recv(frame) {
      this.onmessage && this.onmessage({ data: JSON.stringify(frame) });
    }
    serverClose(code, reason = "") {
      this.closed = { code, reason };
      this.onclose && this.onclose({ code, reason });
    }
    last(type) {
      return [...this.sent].reverse().find((f) => f.type === type);
    }
  }
  return { FakeWS, sockets };
}

const tick = () => new Promise((r) => setImmediate(r));

function setup(opts = {}) {
  const clock = new FakeClock();
  const { FakeWS, sockets } = fakeSockets();
  const events = [];
  const conn = new Connection({
    url: "ws://hub/ws",
    WebSocket: FakeWS,
    random: () => 0.5,
    now: clock.now,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    ...opts,
  });
  for (const name of ["state", "sync", "push", "inbox.add", "inbox.remove", "signedout", "hello"]) {
    conn.addEventListener(name, (e) => events.push([name, e.detail]));
  }
  return { clock, sockets, conn, events };
}

async function handshake(ws, items = [], now = 1000.0) {
  ws.open();
  ws.recv({ type: "hello", protocol: 1, role: "human", tenant: "default", handle: "me", now, heartbeat: 20 });
  const inbox = ws.last("inbox");
  assert.ok(inbox, "the inbox is read after hello");
  ws.recv({ type: "ok", id: inbox.id, items });
  await tick();
}

const states = (events) => events.filter(([n]) => n === "state").map(([, d]) => d.state);

test("connects, reads the inbox after hello, then reports open", async () => {
  const { sockets, conn, events } = setup();
  conn.start();
  assert.equal(conn.state, State.CONNECTING);
  assert.equal(sockets[0].url, "ws://hub/ws");
  await handshake(sockets[0], [{ op_id: "a" }]);
  assert.equal(conn.state, State.OPEN);
  const names = events.map(([n]) => n);
  assert.ok(names.indexOf("sync") < names.lastIndexOf("state"), "sync comes before open");
  assert.deepEqual(events.find(([n]) => n === "sync")[1].items, [{ op_id: "a" }]);
});

test("clock skew from hello.now", async () => {
  const { sockets, conn, clock } = setup();
  conn.start();
  await handshake(sockets[0], [], clock.t / 1000 + 3600); // hub is one hour ahead
  assert.equal(Math.round((conn.hubNow() - clock.t) / 1000), 3600);
});

test("requests resolve with ok and reject with the hub's error", async () => {
  const { sockets, conn } = setup();
  conn.start();
  await handshake(sockets[0]);
  const ws = sockets[0];
  const p1 = conn.request("respond", { op_id: "x", value: "yes" });
  const f1 = ws.last("respond");
  assert.equal(typeof f1.id, "number");
  assert.deepEqual({ ...f1, id: 0 }, { type: "respond", id: 0, op_id: "x", value: "yes" });
  ws.recv({ type: "ok", id: f1.id, request: { op_id: "x", status: "answered" } });
  assert.equal((await p1).request.status, "answered");

  const p2 = conn.request("respond", { op_id: "y", value: "no" });
  const f2 = ws.last("respond");
  assert.notEqual(f2.id, f1.id);
  ws.recv({ type: "error", id: f2.id, code: "already_resolved", message: "done", retryable: false, request: { status: "expired" } });
  await assert.rejects(p2, (e) => e instanceof HubRequestError && e.code === "already_resolved" && e.request.status === "expired");
});

test("pushes arriving during the inbox read are delivered after the sync, in order", async () => {
  const { sockets, conn, events } = setup();
  conn.start();
  const ws = sockets[0];
  ws.open();
  ws.recv({ type: "hello", protocol: 1, now: 1000, heartbeat: 20 });
  ws.recv({ type: "inbox.add", request: { op_id: "b" } });
  ws.recv({ type: "inbox.remove", op_id: "a", request: { op_id: "a" } });
  assert.equal(events.filter(([n]) => n === "push").length, 0);
  ws.recv({ type: "ok", id: ws.last("inbox").id, items: [{ op_id: "a" }] });
  await tick();
  const order = events.filter(([n]) => ["sync", "inbox.add", "inbox.remove"].includes(n)).map(([n]) => n);
  assert.deepEqual(order, ["sync", "inbox.add", "inbox.remove"]);
});

test("reconnects with jittered exponential backoff and re-reads the inbox", async () => {
  const { sockets, conn, clock, events } = setup();
  conn.start();
  await handshake(sockets[0]);
  const p = conn.request("history", {});
  sockets[0].serverClose(1006);
  await assert.rejects(p, (e) => e.code === CONNECTION_LOST);
  assert.equal(conn.state, State.CLOSED);
  // attempt 0 with random()=0.5: step 250 -> 125 + 62.5
  assert.equal(conn.retryIn, 187.5);
  clock.advance(187);
  assert.equal(sockets.length, 1);
  clock.advance(1);
  assert.equal(sockets.length, 2);
  sockets[1].serverClose(1006); // refused again: attempt 1 -> 375
  assert.equal(conn.retryIn, 375);
  clock.advance(375);
  assert.equal(sockets.length, 3);
  await handshake(sockets[2], [{ op_id: "fresh" }]);
  assert.equal(conn.state, State.OPEN);
  const syncs = events.filter(([n]) => n === "sync");
  assert.deepEqual(syncs[syncs.length - 1][1].items, [{ op_id: "fresh" }]);
  // after a good connection the backoff starts over
  sockets[2].serverClose(1006);
  assert.equal(conn.retryIn, 187.5);
});

test("backoffDelay grows, caps, and jitters within [step/2, step)", () => {
  const cfg = { base: 250, cap: 10000 };
  assert.equal(backoffDelay(0, cfg, () => 0), 125);
  assert.equal(backoffDelay(3, cfg, () => 0), 1000);
  assert.equal(backoffDelay(20, cfg, () => 0), 5000);
  assert.equal(backoffDelay(20, cfg, () => 0.999999) < 10000, true);
});

test("close 4001 signs out and stops retrying", async () => {
  const { sockets, conn, clock, events } = setup();
  conn.start();
  await handshake(sockets[0]);
  sockets[0].serverClose(4001, "revoked");
  assert.equal(conn.state, State.SIGNED_OUT);
  assert.deepEqual(events.find(([n]) => n === "signedout")[1], { reason: "revoked" });
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});

test("close 4000 (resync) reconnects at once", async () => {
  const { sockets, conn, clock } = setup();
  conn.start();
  await handshake(sockets[0]);
  sockets[0].serverClose(4000, "resync");
  assert.ok(conn.retryIn <= 250);
  clock.advance(250);
  assert.equal(sockets.length, 2);
});

test("close 1012 (restart) reconnects after a random pause in the restart window", async () => {
  const { sockets, conn, clock } = setup();
  conn.start();
  await handshake(sockets[0]);
  sockets[0].serverClose(1012, "restart");
  assert.equal(conn.retryIn, 250 + 0.5 * 1750);
  clock.advance(1125);
  assert.equal(sockets.length, 2);
});

test("a refused socket plus a failed auth check means signed out", async () => {
  let calls = 0;
  const { sockets, conn } = setup({ authCheck: async () => (calls++, false) });
  conn.start();
  sockets[0].serverClose(1006);
  await tick();
  assert.equal(calls, 1);
  assert.equal(conn.state, State.SIGNED_OUT);
});

test("an auth check that cannot reach the hub keeps retrying", async () => {
  const { sockets, conn, clock } = setup({ authCheck: async () => { throw new Error("down"); } });
  conn.start();
  sockets[0].serverClose(1006);
  await tick();
  assert.equal(conn.state, State.CLOSED);
  clock.advance(1000);
  assert.equal(sockets.length, 2);
});

test("a silent connection is dropped after two heartbeats", async () => {
  const { sockets, conn, clock } = setup();
  conn.start();
  await handshake(sockets[0]);
  clock.advance(20000);
  assert.ok(sockets[0].last("ping"), "pings after one quiet heartbeat");
  clock.advance(20000);
  assert.equal(conn.state, State.CLOSED);
});

test("stop() closes and never reconnects", async () => {
  const { sockets, conn, clock } = setup();
  conn.start();
  await handshake(sockets[0]);
  conn.stop();
  assert.equal(conn.state, State.IDLE);
  assert.ok(sockets[0].closed);
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});

test("requests while disconnected fail fast", async () => {
  const { conn } = setup();
  await assert.rejects(conn.request("history", {}), (e) => e.code === CONNECTION_LOST);
});
