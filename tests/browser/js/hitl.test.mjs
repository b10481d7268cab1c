// node --test: hub/web/js/hitl.js — framework reviews (LangGraph Agent Inbox, LangChain HITL
// middleware) drawn with only the decisions their config allows, answered in their own shape.
import { test } from "node:test";
import assert from "node:assert/strict";
import { installDocument, pending } from "./inbox_env.mjs";
import { buildItem } from "../../../hub/web/js/item.js";
import { hitlOf, parseArgs } from "../../../hub/web/js/hitl.js";
import { findAll } from "./fake_dom.mjs";

function review(format, decisions, extra = {}) {
  return pending("r", {
    question: "Run this **shell command**?",
    schema: { anyOf: [{ type: "object" }] },
    context: { hitl: { format, action: "run_command", args: { command: "ls <b>" }, description: null, decisions, index: 0, count: 1, ...extra } },
  });
}

function build(req) {
  installDocument();
  const answers = [];
  const item = buildItem(req, (it, answer) => answers.push(answer));
  const button = (decision) => item.el.querySelector(`button[data-decision=${decision}]`);
  return { item, answers, button };
}

test("hitlOf: only known formats with a name and allowed decisions", () => {
  assert.equal(hitlOf(pending("a")), null);
  assert.equal(hitlOf(pending("a", { context: { hitl: { format: "other", action: "x", decisions: ["accept"] } } })), null);
  assert.equal(hitlOf(pending("a", { context: { hitl: { format: "agent-inbox", action: "x", decisions: ["approve"] } } })), null);
  const h = hitlOf(review("agent-inbox", ["accept", "bogus"], { args: [1] }));
  assert.deepEqual(h.decisions, ["accept"]);
  assert.deepEqual(h.args, {});
});

test("Agent Inbox: accept, respond, ignore and edit in HumanResponse shape", () => {
  const { item, answers, button } = build(review("agent-inbox", ["accept", "edit", "response", "ignore"]));
  assert.match(item.el.textContent, /Proposed call: run_command/);
  assert.match(item.el.textContent, /"command": "ls <b>"/); // as text, never markup
  assert.equal(findAll(item.el, "b").length, 0);
  assert.equal(item.el.querySelector("form.schema-form"), null, "no generic schema form");
  button("accept").click();
  button("response").click(); // empty message: refused here
  assert.match(item.verdictEl.textContent, /Type a message first/);
  item.comment.value = "use pwd instead";
  button("response").click();
  button("ignore").click();
  const editor = item.el.querySelector("textarea.json-editor");
  editor.value = "{nope";
  item.el.querySelector("form.hitl-edit").requestSubmit();
  assert.match(item.verdictEl.textContent, /not valid JSON/);
  editor.value = '{"command": "pwd"}';
  item.el.querySelector("form.hitl-edit").requestSubmit();
  assert.deepEqual(answers, [
    { value: { type: "accept", args: null } },
    { value: { type: "response", args: "use pwd instead" } },
    { value: { type: "ignore", args: null } },
    { value: { type: "edit", args: { action: "run_command", args: { command: "pwd" } } } },
  ]);
  assert.equal(item.approveBtn, button("accept"), "the a shortcut accepts");
  assert.equal(item.rejectBtn, button("ignore"), "the r shortcut ignores");
});

test("Agent Inbox: only what the config allows is drawn", () => {
  const { item, button } = build(review("agent-inbox", ["accept"]));
  assert.ok(button("accept"));
  for (const d of ["edit", "response", "ignore"]) assert.equal(button(d), null, d);
  assert.equal(item.el.querySelector("textarea"), null);
  assert.equal(item.rejectBtn, undefined);
});

test("LangChain HITL: approve, reject with or without a reason, respond, edit", () => {
  const { item, answers, button } = build(review("langchain-hitl", ["approve", "edit", "reject", "respond"]));
  button("approve").click();
  button("reject").click();
  item.comment.value = "  keep the report ";
  button("reject").click();
  button("respond").click();
  const editor = item.el.querySelector("textarea.json-editor");
  assert.deepEqual(JSON.parse(editor.value), { command: "ls <b>" });
  editor.value = "[1]";
  item.el.querySelector("form.hitl-edit").requestSubmit();
  assert.match(item.verdictEl.textContent, /must be a JSON object/);
  editor.value = '{"command": "ls"}';
  item.el.querySelector("form.hitl-edit").requestSubmit();
  assert.deepEqual(answers, [
    { value: { type: "approve" } },
    { value: { type: "reject" } },
    { value: { type: "reject", message: "keep the report" } },
    { value: { type: "respond", message: "  keep the report " } },
    { value: { type: "edit", edited_action: { name: "run_command", args: { command: "ls" } } } },
  ]);
});

test("LangChain HITL approve/reject only: a reason field, no respond, no editor", () => {
  const { item, button } = build(review("langchain-hitl", ["approve", "reject"]));
  assert.ok(button("approve") && button("reject"));
  assert.equal(button("respond"), null);
  assert.equal(item.el.querySelector("form.hitl-edit"), null);
  assert.match(item.el.textContent, /Why\? \(optional/);
});

test("parseArgs", () => {
  assert.deepEqual(parseArgs('{"a": 1}'), { ok: true, value: { a: 1 } });
  assert.equal(parseArgs("null").ok, false);
  assert.equal(parseArgs("").ok, false);
});
