// node --test: hub/web/js/keyboard.js — what each key does, and where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, FakeConn, installDocument, pending } from "./inbox_env.mjs";
import { isTextField, keyAction, keyboardHandler } from "../../../hub/web/js/keyboard.js";
import { InboxList } from "../../../hub/web/js/list.js";
import { fakeEvent } from "./fake_dom.mjs";

test("keyAction maps keys to actions, and letters are text inside text fields", () => {
  const q = { inText: false, kind: "question" };
  assert.deepEqual(keyAction({ key: "j" }, q), { type: "move", step: 1 });
  assert.deepEqual(keyAction({ key: "k" }, { inText: false, kind: null }), { type: "move", step: -1 });
  assert.deepEqual(keyAction({ key: "3" }, q), { type: "choose", index: 2 });
  assert.equal(keyAction({ key: "0" }, q), null);
  assert.equal(keyAction({ key: "a" }, q), null);
  assert.deepEqual(keyAction({ key: "a" }, { inText: false, kind: "approval" }), { type: "approve" });
  assert.deepEqual(keyAction({ key: "r" }, { inText: false, kind: "approval" }), { type: "reject" });
  assert.equal(keyAction({ key: "3" }, { inText: false, kind: null }), null);
  assert.equal(keyAction({ key: "j" }, { inText: true, kind: "question" }), null);
  assert.equal(keyAction({ key: "j", ctrlKey: true }, q), null);
  assert.equal(keyAction({ key: "1", altKey: true }, q), null);
  assert.deepEqual(keyAction({ key: "Enter", ctrlKey: true }, { inText: true, kind: "question" }), { type: "submit" });
  assert.deepEqual(keyAction({ key: "Enter", metaKey: true }, q), { type: "submit" });
});

test("isTextField", () => {
  const doc = installDocument();
  const input = (type) => Object.assign(doc.createElement("input"), { type });
  assert.equal(isTextField(doc.createElement("textarea")), true);
  assert.equal(isTextField(input("text")), true);
  assert.equal(isTextField(input("checkbox")), false);
  assert.equal(isTextField(doc.createElement("button")), false);
  assert.equal(isTextField(null), false);
});

test("the handler moves focus with j/k, chooses with digits, sends with Ctrl+Enter", () => {
  const doc = installDocument();
  const clock = new FakeClock();
  const conn = new FakeConn(clock, () => ({}));
  const listEl = doc.createElement("div");
  const list = new InboxList({
    doc, listEl, emptyEl: doc.createElement("p"), countEl: doc.createElement("span"),
    conn: () => conn, me: () => null, now: clock.now, setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout,
  });
  list.onSync([pending("a", { deadline: 1.8e9, choices: ["x", "y"] }), pending("b", { deadline: 1.9e9 })]);
  let active = true;
  const onKey = keyboardHandler({ doc, list, active: () => active });
  const press = (key, props = {}) => {
    const e = fakeEvent("keydown", { key, target: doc.activeElement, ...props });
    onKey(e);
    return e;
  };
  assert.equal(press("j").defaultPrevented, true);
  assert.equal(doc.activeElement, list.items.get("a").el);
  press("j");
  assert.equal(doc.activeElement, list.items.get("b").el);
  press("j"); // stays on the last
  assert.equal(doc.activeElement, list.items.get("b").el);
  press("k");
  assert.equal(doc.activeElement, list.items.get("a").el);

  press("2");
  assert.deepEqual(conn.sent, [{ type: "respond", op_id: "a", value: "y", status: "answered" }]);

  const ta = list.items.get("b").el.querySelector("textarea");
  ta.focus();
  ta.value = "typed";
  assert.equal(press("j").defaultPrevented, false, "j is a letter in a text field");
  assert.equal(press("Enter", { ctrlKey: true }).defaultPrevented, true);
  assert.deepEqual(conn.sent[1], { type: "respond", op_id: "b", value: "typed", status: "answered" });

  active = false; // signed out, or on the History view
  doc.activeElement = null;
  assert.equal(press("j").defaultPrevented, false);
});
