// node --test: hub/web/js/list.js — the inbox list's order, live updates, verdicts, and that one
// request that cannot be rendered never hides the others (issue 15, defect 2).
import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, FakeConn, hubError, installDocument, pending, settle } from "./inbox_env.mjs";
import {
  BRIEF_MS, InboxList, Tombstones, acceptedText, alreadyResolvedText, compareRequests, countdownText,
  describeResolution, pageTitle,
} from "../../../hub/web/js/list.js";
import { CONNECTION_LOST } from "../../../hub/web/js/connection.js";

function setup({ reply, me = { tenant: "t", handle: "ann", role: "human" } } = {}) {
  const doc = installDocument();
  const clock = new FakeClock();
  const conn = new FakeConn(clock, reply);
  const history = [];
  const notified = [];
  const listEl = doc.createElement("div");
  const emptyEl = doc.createElement("p");
  const countEl = doc.createElement("span");
  const list = new InboxList({
    doc, listEl, emptyEl, countEl,
    conn: () => conn,
    me: () => me,
    notify: (req) => notified.push(req.op_id),
    resolved: (req) => history.push(req.op_id),
    now: clock.now,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
  });
  const shown = () => listEl.children.map((el) => el.dataset.opId);
  return { doc, clock, conn, list, listEl, emptyEl, countEl, history, notified, shown };
}

test("pure parts: order, tombstones, verdict texts, countdowns, titles", () => {
  const reqs = [pending("c"), pending("b", { deadline: 20 }), pending("a", { deadline: 10, created_at: 5 }),
    pending("a2", { deadline: 10, created_at: 4 })];
  assert.deepEqual(reqs.sort(compareRequests).map((r) => r.op_id), ["a2", "a", "b", "c"]);

  const t = new Tombstones(4);
  for (const id of ["1", "2", "3", "4", "5"]) t.add(id);
  assert.equal(t.has("1"), false);
  assert.equal(t.has("2"), false);
  assert.equal(t.has("5"), true);

  const me = { handle: "ann" };
  assert.equal(describeResolution({ status: "expired" }, me), "Expired: the deadline passed.");
  assert.equal(describeResolution({ status: "cancelled" }, me), "Cancelled by the agent.");
  assert.equal(describeResolution({ status: "answered", actor: "human:bob" }, me), "Answered by human:bob.");
  assert.equal(describeResolution({ status: "declined", actor: "human:ann" }, me), "Rejected in another tab.");
  assert.equal(describeResolution({ status: "answered", actor: "human:ann", value: "x" }, me, { mine: "x" }),
    "Accepted: your answer was recorded.");
  assert.equal(alreadyResolvedText({ status: "expired" }, me), "Too late: the request had already expired.");
  assert.equal(alreadyResolvedText({ status: "answered", actor: "human:bob" }, me), "Already resolved: answered by human:bob.");
  assert.equal(alreadyResolvedText(null, me), "Already resolved.");
  assert.equal(acceptedText("approval", { request: { status: "declined" } }), "Accepted: rejected.");
  assert.equal(acceptedText("question", {}), "Accepted: your answer was recorded.");
  assert.equal(countdownText(null, 0), "no deadline");
  assert.equal(countdownText(100, 40_000), "expires in 1m 00s");
  assert.equal(countdownText(100, 100_000), "expiring…");
  assert.equal(pageTitle(0), "A2H Inbox");
  assert.equal(pageTitle(3), "(3) A2H Inbox");
});

test("items are placed by deadline, counted in the title, and a late add of a resolved one is ignored", () => {
  const { list, shown, doc, countEl, emptyEl, notified } = setup();
  list.onSync([pending("late", { deadline: 2e9 }), pending("none")]);
  list.onAdd(pending("soon", { deadline: 1.8e9 }), true);
  assert.deepEqual(shown(), ["soon", "late", "none"]);
  assert.equal(doc.title, "(3) A2H Inbox");
  assert.equal(countEl.textContent, "3");
  assert.equal(emptyEl.hidden, true); // "nothing is waiting" is hidden
  assert.deepEqual(notified, ["soon"]);
  // The deadline moved: the item moves with it.
  list.onAdd(pending("none", { deadline: 1.7e9 }), false);
  assert.deepEqual(shown(), ["none", "soon", "late"]);

  list.onRemove({ op_id: "soon", request: { op_id: "soon", status: "expired" } });
  list.onAdd(pending("soon", { deadline: 1.8e9 }), true);
  assert.equal(list.items.get("soon").resolved, true);
  assert.equal(doc.title, "(2) A2H Inbox");
});

test("a resolution shows its verdict, then the item goes after a moment", () => {
  const { list, shown, clock, history } = setup();
  list.onSync([pending("a")]);
  list.onRemove({ op_id: "a", request: { op_id: "a", status: "answered", actor: "human:bob" } });
  const item = list.items.get("a");
  assert.equal(item.verdictEl.textContent, "Answered by human:bob.");
  assert.ok(item.el.classList.contains("resolved"));
  assert.deepEqual(history, ["a"]);
  clock.advance(BRIEF_MS - 1);
  assert.deepEqual(shown(), ["a"]);
  clock.advance(1);
  assert.deepEqual(shown(), []);
});

test("one request that cannot be rendered is a placeholder; the others are shown", () => {
  const { list, shown, doc } = setup();
  const poisoned = pending("bad", { deadline: 1.8e9 });
  // A context that throws when read (as a too-deep or otherwise strange value might).
  Object.defineProperty(poisoned, "context", { enumerable: true, get() { throw new RangeError("too deep"); } });
  const hugeDeadline = pending("huge", { deadline: 1e300 }); // new Date(...).toISOString() would throw
  list.onSync([pending("first", { deadline: 1.7e9 }), poisoned, hugeDeadline, pending("last")]);
  assert.deepEqual(shown(), ["first", "bad", "huge", "last"]);
  const bad = list.items.get("bad");
  assert.equal(bad.broken, true);
  assert.ok(bad.el.classList.contains("broken"));
  assert.match(bad.el.textContent, /cannot be shown here \(too deep\)/);
  assert.match(bad.el.textContent, /bad/);
  assert.equal(list.items.get("huge").broken, undefined);
  assert.equal(list.items.get("first").el.querySelectorAll("textarea").length, 1);
  assert.equal(doc.title, "(4) A2H Inbox");
  list.tick(); // countdowns over every item, the strange ones included, do not throw
  // The placeholder resolves like any other item.
  list.onRemove({ op_id: "bad", request: { op_id: "bad", status: "cancelled" } });
  assert.equal(bad.verdictEl.textContent, "Cancelled by the agent.");
  // And a live add of a broken request does not stop later ones.
  const alsoBad = pending("bad2");
  Object.defineProperty(alsoBad, "question", { enumerable: true, get() { throw new Error("no"); } });
  list.onAdd(alsoBad, true);
  list.onAdd(pending("after"), true);
  assert.ok(shown().includes("bad2") && shown().includes("after"));
});

test("answering: sending, accepted, and the verdict of the reply", async () => {
  const { list, conn, history } = setup({
    reply: (type, p) => ({ request: { op_id: p.op_id, status: "answered", value: p.value } }),
  });
  list.onSync([pending("a", { choices: ["yes", "no"] })]);
  const item = list.items.get("a");
  item.choiceButtons[0].click();
  assert.equal(item.verdictEl.textContent, "Sending…");
  assert.ok(item.choiceButtons.every((b) => b.disabled));
  await settle();
  assert.deepEqual(conn.sent, [{ type: "respond", op_id: "a", value: "yes", status: "answered" }]);
  assert.equal(item.verdictEl.textContent, "Accepted: your answer was recorded.");
  assert.deepEqual(history, ["a"]);
  item.choiceButtons[1].click(); // resolved: nothing more is sent
  await settle();
  assert.equal(conn.sent.length, 1);
});

test("answering: already resolved, refused, and lost with the connection", async () => {
  const replies = [
    hubError("already_resolved", { request: { status: "answered", actor: "human:bob" } }),
    hubError("invalid"),
    hubError(CONNECTION_LOST),
  ];
  const { list, clock } = setup({ reply: () => replies.shift() || { items: [] } });
  list.onSync([pending("a"), pending("b"), pending("c")]);
  const [a, b, c] = ["a", "b", "c"].map((id) => list.items.get(id));
  for (const item of [a, b, c]) {
    const form = item.el.querySelector("form");
    item.el.querySelector("textarea").value = "hi";
    form.requestSubmit();
    await settle();
  }
  assert.equal(a.verdictEl.textContent, "Already resolved: answered by human:bob.");
  assert.equal(b.verdictEl.textContent, "Not accepted: invalid");
  assert.equal(b.el.querySelector("textarea").disabled, false);
  assert.equal(c.uncertain, true);
  // Reconnected: "c" is still pending, so the answer never arrived; "b" is gone.
  list.onSync([pending("c")]);
  assert.equal(c.verdictEl.textContent, "Not delivered: the connection dropped. Try again.");
  assert.equal(c.el.querySelector("textarea").disabled, false);
  assert.equal(list.items.has("b"), false);
  clock.advance(BRIEF_MS);
  assert.equal(list.items.has("a"), false);
});

test("an empty answer is not sent", async () => {
  const { list, conn } = setup();
  list.onSync([pending("a")]);
  const item = list.items.get("a");
  item.el.querySelector("form").requestSubmit();
  await settle();
  assert.equal(conn.sent.length, 0);
  assert.equal(item.verdictEl.textContent, "Type an answer first.");
});
