// The inbox's one WebSocket to the hub: request/response by id, pushes as events, and
// reconnection. No DOM code here — only WebSocket, timers and EventTarget — so node's test
// runner can drive it with a fake socket (tests/browser/connection.test.mjs).
//
// Theory of operation
//
//   idle ──start()──▶ connecting ──hello + inbox read──▶ open
//                        ▲   │                              │
//                        │   └──────── socket closed ───────┤
//                        │                                  ▼
//                        └───────── timer (backoff) ─── closed
//
//   closed ──close 4001, or auth check says no──▶ signed-out   (terminal until start())
//   any    ──stop()──▶ idle
//
// "open" is announced only after the inbox has been re-read on the new socket, so whoever
// listens sees the true state from the store after every (re)connect: a `sync` event with the
// pending items comes first, then the pushes that arrived while the read was in flight, in order.
//
// Reconnect delays use "equal jitter" exponential backoff: half the step is fixed, half is
// random, so a hub restart does not bring every tab back in the same millisecond.
// Close codes: 4000 (resync) reconnects at once; 1012 (hub restarting) and a `reconnect` push
// reconnect after a random pause; 4001 (revoked) stops and reports `signedout`.
//
// Events: state {state, attempt, retryIn, code?, reason?}, hello, sync {items}, push (every
// push frame) and one event per push type ("inbox.add", "inbox.remove", ...), signedout
// {reason: "revoked" | "unauthorized"}, huberror (an error frame that answers no request).

import { CloseCode, ErrorCode, T } from "./protocol.js";

export const State = Object.freeze({
  IDLE: "idle",
  CONNECTING: "connecting",
  OPEN: "open",
  CLOSED: "closed",
  SIGNED_OUT: "signed-out",
});

/** An `error` frame from the hub, or a request that could not complete (`connection_lost`, `timeout`). */
export class HubRequestError extends Error {
  constructor(code, message, { request = null, retryable = false } = {}) {
    super(message || code);
    this.name = "HubRequestError";
    this.code = code;
    this.request = request;
    this.retryable = retryable;
  }
}

export const CONNECTION_LOST = "connection_lost";
export const TIMEOUT = "timeout";

const DEFAULTS = Object.freeze({
  backoffBase: 250, // ms, first retry step
  backoffCap: 10000, // ms, largest step
  restartJitter: [250, 2000], // ms window after 1012 / a reconnect push
  requestTimeout: 15000, // ms for one request's reply
  helloTimeout: 10000, // ms from socket open to hello
});

/** The default WebSocket URL: the page's own host, ws: or wss: matching the page. */
export function defaultUrl(loc = globalThis.location) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/ws`;
}

/** Equal-jitter backoff: step = min(cap, base·2^attempt); delay in [step/2, step). */
export function backoffDelay(attempt, { base, cap }, random = Math.random) {
  const step = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return step / 2 + random() * (step / 2);
}

export class Connection extends EventTarget {
  /**
   * @param {object} [opts]
   * @param {string} [opts.url] WebSocket URL (default: this page's host, path /ws).
   * @param {Function} [opts.WebSocket] constructor, injectable for tests.
   * @param {() => Promise<boolean>} [opts.authCheck] asked after a socket failed before it
   *   opened; resolving false means "not signed in" (→ signed-out, no more retries).
   */
  constructor(opts = {}) {
    super();
    this.url = opts.url || defaultUrl();
    this._WS = opts.WebSocket || globalThis.WebSocket;
    this._random = opts.random || Math.random;
    this._now = opts.now || Date.now;
    this._setTimeout = opts.setTimeout || globalThis.setTimeout.bind(globalThis);
    this._clearTimeout = opts.clearTimeout || globalThis.clearTimeout.bind(globalThis);
    this._authCheck = opts.authCheck || null;
    this._cfg = { ...DEFAULTS, ...(opts.config || {}) };

    this._state = State.IDLE;
    this._ws = null;
    this._gen = 0; // bumps on every new socket; stale callbacks compare and bail out
    this._nextId = 1;
    this._pending = new Map(); // id -> {resolve, reject, timer}
    this._attempt = 0;
    this._retryTimer = null;
    this._retryAt = null;
    this._heartbeatTimer = null;
    this._helloTimer = null;
    this._syncing = false;
    this._buffered = [];
    this._restartHint = false;
    this.hello = null;
    /** hub clock minus local clock, in ms (from hello.now). */
    this.skewMs = 0;
  }

  get state() {
    return this._state;
  }

  /** Milliseconds until the next reconnect attempt, or null. */
  get retryIn() {
    return this._retryAt == null ? null : Math.max(0, this._retryAt - this._now());
  }

  /** The hub's clock now, in epoch milliseconds (local clock corrected by hello.now). */
  hubNow() {
    return this._now() + this.skewMs;
  }

  start() {
    if (this._state === State.CONNECTING || this._state === State.OPEN) return;
    this._attempt = 0;
    this._connect();
  }

  /** Close for good (sign-out, page teardown). */
  stop() {
    this._cancelRetry();
    this._teardown(1000, "client stopped");
    this._failPending(CONNECTION_LOST, "connection stopped");
    this._setState(State.IDLE);
  }

  /** Skip the backoff wait (the browser came back online, the tab became visible). */
  reconnectNow() {
    if (this._state === State.CLOSED) {
      this._cancelRetry();
      this._connect();
    }
  }

  /**
   * Send one client frame and wait for its `ok` (resolves with the frame) or `error`
   * (rejects with HubRequestError).
   */
  request(type, fields = {}) {
    if (this._state !== State.OPEN && !(this._syncing && type === T.INBOX)) {
      return Promise.reject(new HubRequestError(CONNECTION_LOST, "not connected"));
    }
    return this._send(type, fields);
  }

  // ------------------------------------------------------------------------- internals

  _send(type, fields) {
    const id = this._nextId++;
    const frame = { ...fields, type, id };
    return new Promise((resolve, reject) => {
      const timer = this._setTimeout(() => {
        if (this._pending.delete(id)) reject(new HubRequestError(TIMEOUT, "no reply from the hub"));
      }, this._cfg.requestTimeout);
      this._pending.set(id, { resolve, reject, timer });
      try {
        this._ws.send(JSON.stringify(frame));
      } catch (err) {
        this._pending.delete(id);
        this._clearTimeout(timer);
        reject(new HubRequestError(CONNECTION_LOST, String(err && err.message ? err.message : err)));
      }
    });
  }

  _setState(state, extra = {}) {
    this._state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, attempt: this._attempt, retryIn: this.retryIn, ...extra } }));
  }

  _emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }

  _connect() {
    const gen = ++this._gen;
    this._retryAt = null;
    this._setState(State.CONNECTING);
    let ws;
    try {
      ws = new this._WS(this.url);
    } catch (err) {
      this._onClose({ code: 1006, reason: String(err), opened: false });
      return;
    }
    this._ws = ws;
    let opened = false;
    ws.onopen = () => {
      if (gen !== this._gen) return;
      opened = true;
      this._helloTimer = this._setTimeout(() => {
        if (gen === this._gen) this._drop(gen, 1006, "no hello from the hub");
      }, this._cfg.helloTimeout);
    };
    ws.onmessage = (ev) => {
      if (gen !== this._gen) return;
      this._onMessage(gen, ev.data);
    };
    ws.onerror = () => {
      // Always followed by a close event; nothing to do here.
    };
    ws.onclose = (ev) => {
      if (gen !== this._gen) return;
      this._onClose({ code: ev.code, reason: ev.reason, opened });
    };
  }

  _onMessage(gen, data) {
    if (typeof data !== "string") return; // the hub only sends text frames
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
    this._kickHeartbeat(gen);

    if (frame.type === T.OK || frame.type === T.ERROR) {
      const p = this._pending.get(frame.id);
      if (!p) {
        // An error about no request of ours (e.g. too_many_sockets before a close): report it.
        if (frame.type === T.ERROR) this._emit("huberror", frame);
        return;
      }
      this._pending.delete(frame.id);
      this._clearTimeout(p.timer);
      if (frame.type === T.OK) p.resolve(frame);
      else
        p.reject(
          new HubRequestError(frame.code || ErrorCode.INTERNAL, frame.message, {
            request: frame.request || null,
            retryable: !!frame.retryable,
          }),
        );
      return;
    }
    if (frame.type === T.HELLO) {
      this._onHello(gen, frame);
      return;
    }
    if (frame.type === T.RECONNECT) {
      // The hub is about to go away (graceful shutdown): come back after a random pause.
      this._restartHint = true;
      return;
    }
    if (this._syncing) this._buffered.push(frame);
    else this._dispatchPush(frame);
  }

  _dispatchPush(frame) {
    this._emit("push", frame);
    this._emit(frame.type, frame);
  }

  async _onHello(gen, hello) {
    this._clearTimeout(this._helloTimer);
    this._helloTimer = null;
    this.hello = hello;
    if (typeof hello.now === "number") this.skewMs = hello.now * 1000 - this._now();
    this._emit("hello", hello);
    // Re-read the inbox so the page shows the store's truth after every (re)connect.
    this._syncing = true;
    this._buffered = [];
    let reply;
    try {
      reply = await this._send(T.INBOX, {});
    } catch (err) {
      if (gen !== this._gen) return;
      this._syncing = false;
      this._drop(gen, 1006, `inbox read failed: ${err.code || err}`);
      return;
    }
    if (gen !== this._gen) return;
    this._syncing = false;
    this._attempt = 0;
    this._emit("sync", { items: Array.isArray(reply.items) ? reply.items : [] });
    const buffered = this._buffered;
    this._buffered = [];
    for (const frame of buffered) this._dispatchPush(frame);
    this._setState(State.OPEN);
    this._kickHeartbeat(gen);
  }

  // App-level ping when the line has been quiet for one heartbeat; no traffic for two
  // heartbeats means the TCP connection is dead even if the browser has not noticed.
  _kickHeartbeat(gen) {
    if (!this.hello || this._state === State.IDLE) return;
    const beat = Math.max(1, Number(this.hello.heartbeat) || 20) * 1000;
    this._clearTimeout(this._heartbeatTimer);
    this._heartbeatTimer = this._setTimeout(() => {
      if (gen !== this._gen) return;
      this._send(T.PING, {}).catch(() => {});
      this._heartbeatTimer = this._setTimeout(() => {
        if (gen === this._gen) this._drop(gen, 1006, "heartbeat timeout");
      }, beat);
    }, beat);
  }

  /** Give up on the current socket as if it had closed with `code`. */
  _drop(gen, code, reason) {
    if (gen !== this._gen) return;
    this._onClose({ code, reason, opened: true });
  }

  _teardown(code, reason) {
    this._gen++;
    this._clearTimeout(this._heartbeatTimer);
    this._clearTimeout(this._helloTimer);
    this._heartbeatTimer = this._helloTimer = null;
    this._syncing = false;
    this._buffered = [];
    const ws = this._ws;
    this._ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
      try {
        ws.close(code >= 3000 && code < 5000 ? 1000 : code, reason);
      } catch {
        // already closed
      }
    }
  }

  _failPending(code, message) {
    for (const [, p] of this._pending) {
      this._clearTimeout(p.timer);
      p.reject(new HubRequestError(code, message));
    }
    this._pending.clear();
  }

  // Callers have checked that the socket is the current one.
  async _onClose({ code, reason, opened }) {
    this._teardown(1000, "closed"); // bumps _gen: late events of the old socket are ignored
    this._failPending(CONNECTION_LOST, `connection closed (${code})`);
    if (this._state === State.IDLE || this._state === State.SIGNED_OUT) return;

    if (code === CloseCode.REVOKED) {
      this._signedOut("revoked");
      return;
    }
    let delay;
    if (code === CloseCode.RESYNC) {
      this._attempt = 0;
      delay = this._random() * this._cfg.backoffBase;
    } else if (code === CloseCode.SERVICE_RESTART || this._restartHint) {
      const [lo, hi] = this._cfg.restartJitter;
      delay = lo + this._random() * (hi - lo);
    } else {
      delay = backoffDelay(this._attempt, { base: this._cfg.backoffBase, cap: this._cfg.backoffCap }, this._random);
    }
    this._restartHint = false;
    this._attempt += 1;
    this._retryAt = this._now() + delay;
    const myGen = this._gen;
    this._setState(State.CLOSED, { code, reason });
    this._retryTimer = this._setTimeout(() => {
      this._retryTimer = null;
      if (this._gen === myGen && this._state === State.CLOSED) this._connect();
    }, delay);

    // A socket refused before it opened is what an expired session looks like to a browser
    // (the HTTP 403 is invisible here): ask whether we are still signed in.
    if (!opened && this._authCheck) {
      let ok = true;
      try {
        ok = await this._authCheck();
      } catch {
        ok = true; // the hub is unreachable: keep retrying
      }
      if (!ok && this._gen === myGen && this._state === State.CLOSED) this._signedOut("unauthorized");
    }
  }

  _signedOut(reason) {
    this._cancelRetry();
    this._setState(State.SIGNED_OUT, { reason });
    this._emit("signedout", { reason });
  }

  _cancelRetry() {
    if (this._retryTimer != null) this._clearTimeout(this._retryTimer);
    this._retryTimer = null;
    this._retryAt = null;
  }
}
