// node --test: hub/web/js/history.js, format.js and status.js.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, FakeConn, installDocument, hubError } from "./inbox_env.mjs";
import { HISTORY_LIMIT, HistoryView, historyEntry } from "../../../hub/web/js/history.js";
import { clip, formatAnswer, formatDuration, formatRemaining, formatValue, isoTime } from "../../../hub/web/js/format.js";
import { connText, retryText } from "../../../hub/web/js/status.js";
import { State } from "../../../hub/web/js/connection.js";

const done = (opId, extra = {}) => ({
  op_id: opId, status: "answered", from: "agent:ci", conversation: "c", question: `Q ${opId}`,
  value: "yes", actor: "human:ann", resolved_at: 1_700_000_000, human_seconds: 4.25, ...extra,
});

test("format: values, answers, durations, countdowns, clipping, times", () => {
  assert.equal(formatValue(null), "—");
  assert.equal(formatValue({ a: 1 }), '{"a":1}');
  assert.equal(formatAnswer({ status: "expired", value: null }), "— (expired)");
  assert.equal(formatAnswer({ status: "expired", value: "no" }), "no (default, on expiry)");
  assert.equal(formatAnswer({ status: "cancelled" }), "— (cancelled)");
  assert.equal(formatAnswer({ status: "answered", value: { approved: false, comment: "later" } }), "Rejected: “later”");
  assert.equal(formatAnswer({ status: "answered", value: { tool_call: { name: "f", arguments: { x: 1 } } } }), 'Tool call f({"x":1})');
  assert.equal(formatDuration(4.25), "4.3 s");
  assert.equal(formatDuration(75), "1 min 15 s");
  assert.equal(formatDuration(7260), "2 h 1 min");
  assert.equal(formatDuration(Infinity), "—");
  assert.equal(formatRemaining(400), "1s");
  assert.equal(formatRemaining(61_000), "1m 01s");
  assert.equal(formatRemaining(3 * 86400_000), "3d");
  assert.equal(clip("abcdef", 3), "abc\n… (3 more characters)");
  assert.equal(isoTime(0), "1970-01-01T00:00:00.000Z");
  assert.equal(isoTime(1e300), null);
  assert.equal(isoTime("x"), null);
});

test("status: the connection indicator's words", () => {
  assert.equal(connText(State.CONNECTING, false), "Connecting…");
  assert.equal(connText(State.CONNECTING, true), "Reconnecting…");
  assert.equal(connText(State.OPEN, true), "Connected");
  assert.equal(retryText(2100, ""), "in 3 s");
  assert.equal(retryText(null, "overloaded"), "(overloaded) ");
});

function setup(reply) {
  const doc = installDocument();
  const conn = new FakeConn(new FakeClock(), reply);
  const view = new HistoryView({ listEl: doc.createElement("ol"), messageEl: doc.createElement("p"), conn: () => conn });
  return { conn, view, ids: () => view.listEl.children.map((li) => li.dataset.opId) };
}

test("loads over the socket, then keeps current; a bad entry is a placeholder", async () => {
  const weird = done("weird", { resolved_at: 1e300 });
  const poisoned = done("poisoned");
  Object.defineProperty(poisoned, "question", { enumerable: true, get() { throw new Error("no"); } });
  const { conn, view, ids } = setup(() => ({ items: [done("b"), poisoned, weird, done("a")] }));
  view.add(done("ignored")); // not loaded yet: nothing to keep current
  await view.load();
  assert.deepEqual(conn.sent, [{ type: "history", limit: HISTORY_LIMIT }]);
  assert.deepEqual(ids(), ["b", "poisoned", "weird", "a"]);
  assert.match(view.listEl.children[1].textContent, /cannot be shown/);
  assert.match(view.listEl.children[2].textContent, /When—/);
  view.add(done("c"));
  view.add(done("c"));
  assert.deepEqual(ids(), ["c", "b", "poisoned", "weird", "a"]);
  assert.match(historyEntry(done("x")).textContent, /Answeryes.*Byhuman:ann.*Took4\.3 s/);
});

test("not connected, empty, and a failed load say so", async () => {
  let { conn, view } = setup(() => ({ items: [] }));
  conn.state = State.CLOSED;
  await view.load();
  assert.match(view.messageEl.textContent, /Not connected/);
  conn.state = State.OPEN;
  await view.load();
  assert.equal(view.messageEl.textContent, "Nothing answered yet.");
  ({ view } = setup(() => hubError("unavailable")));
  await view.load();
  assert.equal(view.messageEl.textContent, "Could not load history (unavailable).");
});
