// Shared set-up for the node tests of the inbox modules: a fake document installed as the
// global one (dom.js builds with it), a fake clock, and a fake Connection.
import { FakeDocument } from "./fake_dom.mjs";
import { State } from "../../../hub/web/js/connection.js";

export function installDocument() {
  const doc = new FakeDocument();
  globalThis.document = doc;
  return doc;
}

export class FakeClock {
  constructor(t = 1_700_000_000_000) {
    this.t = t;
    this.timers = new Map();
    this.nextId = 1;
    this.now = () => this.t;
    this.setTimeout = (fn, ms) => {
      const id = this.nextId++;
      this.timers.set(id, { at: this.t + ms, fn });
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

/** A Connection stand-in: request() answers from `replies` (a function or a queue of results/errors). */
export class FakeConn {
  constructor(clock, reply = () => ({})) {
    this.clock = clock;
    this.state = State.OPEN;
    this.sent = [];
    this.reply = reply;
  }
  hubNow() {
    return this.clock.t;
  }
  async request(type, payload) {
    this.sent.push({ type, ...payload });
    const r = await this.reply(type, payload);
    if (r instanceof Error) throw r;
    return r;
  }
}

/** An error as connection.js rejects with: a code, a message and maybe the request. */
export function hubError(code, extra = {}) {
  return Object.assign(new Error(code), { code, ...extra });
}

/** A pending request view as the hub sends it. */
export function pending(opId, extra = {}) {
  return {
    op_id: opId,
    status: "pending",
    kind: "question",
    from: "agent:ci",
    conversation: "tests",
    question: `Question ${opId}?`,
    deadline: null,
    created_at: 1,
    ...extra,
  };
}

/** Let awaited promises settle. */
export const settle = () => new Promise((r) => setImmediate(r));
