// node --test: hub/web/js/item.js — one request's article and its answer forms.
import { test } from "node:test";
import assert from "node:assert/strict";
import { installDocument, pending } from "./inbox_env.mjs";
import { brokenItem, buildItem, itemLabel, renderContext, setControlsDisabled, setVerdict } from "../../../hub/web/js/item.js";
import { findAll, serialize } from "./fake_dom.mjs";

function build(req) {
  installDocument();
  const answers = [];
  const item = buildItem(req, (it, answer) => answers.push(answer));
  return { item, answers };
}

test("a question with choices: numbered buttons that answer with the choice", () => {
  const { item, answers } = build(pending("a", { choices: ["yes", "no", 3] }));
  assert.equal(item.choiceButtons.length, 3);
  assert.equal(item.choiceButtons[0].getAttribute("aria-keyshortcuts"), "1");
  item.choiceButtons[2].click();
  assert.deepEqual(answers, [{ value: 3 }]);
  assert.equal(item.el.getAttribute("aria-label"), "Question from agent:ci: Question a?");
  assert.equal(item.el.dataset.opId, "a");
});

test("an approval: approve and reject carry the comment and the status", () => {
  const { item, answers } = build(pending("a", { kind: "approval" }));
  item.comment.value = "looks fine";
  item.approveBtn.click();
  item.comment.value = "";
  item.rejectBtn.click();
  assert.deepEqual(answers, [
    { status: "answered", value: { approved: true, comment: "looks fine" } },
    { status: "declined", value: { approved: false, comment: "" } },
  ]);
  assert.match(item.el.textContent, /Approval/);
});

test("free text, a schema form and a tool call form answer through the same callback", () => {
  let { item, answers } = build(pending("a"));
  item.el.querySelector("textarea").value = "my answer";
  item.el.querySelector("form").requestSubmit();
  assert.deepEqual(answers, [{ value: "my answer" }]);

  ({ item, answers } = build(pending("s", { schema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } })));
  const form = item.el.querySelector("form.schema-form");
  form.requestSubmit();
  assert.deepEqual(answers, []);
  assert.match(item.verdictEl.textContent, /n: enter a number/);
  item.el.querySelector("input").value = "7";
  form.requestSubmit();
  assert.deepEqual(answers, [{ value: { n: 7 } }]);

  ({ item, answers } = build(pending("t", {
    tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } }],
    context: { tool_choice: "required" },
  })));
  assert.equal(item.el.querySelectorAll("form").length, 1, "tool_choice required: no free text form");
  item.el.querySelector("input").value = "x";
  item.el.querySelector("form.tool-form").requestSubmit();
  assert.deepEqual(answers, [{ value: { tool_call: { name: "lookup", arguments: { q: "x" } } } }]);
});

test("context: chat messages, strings as Markdown, anything else as JSON — all as text", () => {
  installDocument();
  const msgs = renderContext({ messages: [{ role: "user", content: "<b>hi</b>" }, { role: "tool", content: { a: 1 } }], extra: 1 });
  assert.match(serialize(msgs), /Context: 2 earlier messages/);
  assert.equal(findAll(msgs, "b").length, 0);
  assert.match(msgs.textContent, /<b>hi<\/b>/);
  assert.match(msgs.textContent, /"extra": 1/);
  assert.equal(renderContext("  "), null);
  assert.equal(renderContext(null), null);
  assert.match(serialize(renderContext("**bold**")), /<strong>bold<\/strong>/);
  assert.match(renderContext([1, 2]).textContent, /\[\n {2}1,/);
});

test("default value, label length, verdicts and disabling", () => {
  const { item } = build(pending("a", { default: { x: 1 }, question: "q".repeat(1000) }));
  assert.match(item.el.textContent, /If nobody answers in time: \{"x":1\}/);
  assert.equal(itemLabel(pending("a", { question: "q".repeat(1000) })).length, 400);
  setVerdict(item, "Nope", "bad");
  assert.equal(item.verdictEl.className, "verdict bad");
  setControlsDisabled(item, true);
  assert.ok(item.controlsEl.querySelectorAll("button, textarea").every((c) => c.disabled));
});

test("the placeholder for a request that cannot be shown uses only its id and sender, as text", () => {
  installDocument();
  const item = brokenItem({ op_id: "op<1>", from: "<script>x</script>", deadline: "soon" }, new Error("bad <value>"));
  assert.equal(item.broken, true);
  assert.equal(findAll(item.el, "script").length, 0);
  assert.match(item.el.textContent, /cannot be shown here \(bad <value>\)/);
  assert.match(item.el.textContent, /op<1>/);
  assert.equal(item.el.dataset.deadline, "");
  assert.deepEqual(item.choiceButtons, []);
});
