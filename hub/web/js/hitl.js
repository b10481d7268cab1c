// Human-in-the-loop reviews from agent frameworks (client_sdk/integrations/langgraph.py): one
// proposed action — a tool call's name and arguments — with the decisions its config allows.
// The request's context carries
//   hitl: {format: "agent-inbox" | "langchain-hitl", action, args, description, decisions, index, count}
// and its schema accepts exactly the decisions listed, in the framework's own shape, which the
// hub's core checks; this module only draws them:
//   agent-inbox     accept {type, args: null} · edit {type, args: {action, args}} ·
//                   response {type, args: text} · ignore {type, args: null}
//   langchain-hitl  approve {type} · edit {type, edited_action: {name, args}} ·
//                   reject {type, message?} · respond {type, message}
// Agent-written text reaches the DOM only as text nodes.

import { h, uid } from "./dom.js";
import { clip } from "./format.js";

const FORMATS = {
  "agent-inbox": {
    yes: "accept",
    no: "ignore",
    say: "response",
    labels: { accept: "Accept", edit: "Send edited call", response: "Send response", ignore: "Ignore" },
    decide: {
      accept: () => ({ type: "accept", args: null }),
      ignore: () => ({ type: "ignore", args: null }),
      response: (text) => ({ type: "response", args: text }),
      edit: (action, args) => ({ type: "edit", args: { action, args } }),
    },
  },
  "langchain-hitl": {
    yes: "approve",
    no: "reject",
    say: "respond",
    labels: { approve: "Approve", edit: "Send edited call", respond: "Respond instead", reject: "Reject" },
    decide: {
      approve: () => ({ type: "approve" }),
      reject: (text) => (text ? { type: "reject", message: text } : { type: "reject" }),
      respond: (text) => ({ type: "respond", message: text }),
      edit: (name, args) => ({ type: "edit", edited_action: { name, args } }),
    },
  },
};

/** The review a request describes, or null when it is not one this module can draw. */
export function hitlOf(req) {
  const ctx = req && req.context;
  const hitl = ctx && typeof ctx === "object" ? ctx.hitl : null;
  if (!hitl || typeof hitl !== "object" || !FORMATS[hitl.format]) return null;
  if (typeof hitl.action !== "string" || !Array.isArray(hitl.decisions)) return null;
  const decisions = hitl.decisions.filter((d) => typeof d === "string" && d in FORMATS[hitl.format].decide);
  if (!decisions.length) return null;
  const args = hitl.args && typeof hitl.args === "object" && !Array.isArray(hitl.args) ? hitl.args : {};
  return { format: hitl.format, action: hitl.action, args, decisions };
}

/** The proposed call, shown in the article: the action's name and its arguments. */
export function renderAction(hitl) {
  return h(
    "div",
    { class: "hitl-action" },
    h("p", { class: "hitl-name" }, "Proposed call: ", h("code", {}, hitl.action)),
    h("pre", { class: "json hitl-args" }, clip(JSON.stringify(hitl.args, null, 2))),
  );
}

/**
 * The answer controls of a review: only the decisions allowed. Answers leave through
 * `onAnswer(item, {value})`; item.approveBtn / item.rejectBtn get the yes / no buttons, so
 * the inbox's keyboard shortcuts (a / r) work here too.
 */
export function buildHitlControls(item, hitl, onAnswer) {
  const f = FORMATS[hitl.format];
  const allowed = new Set(hitl.decisions);
  const box = h("div", { class: "hitl" });
  const send = (value) => onAnswer(item, { value });
  const row = h("div", { class: "row" });

  if (allowed.has(f.yes)) {
    item.approveBtn = h("button", { type: "button", class: "approve", "aria-keyshortcuts": "a", "data-decision": f.yes, onclick: () => send(f.decide[f.yes]()) }, f.labels[f.yes]);
    row.append(item.approveBtn);
  }

  let message = null;
  if (allowed.has(f.say) || (allowed.has(f.no) && f.no === "reject")) {
    const mid = uid("hitl-message");
    message = h("textarea", { id: mid, class: "comment hitl-message", rows: "2", placeholder: "Sent to the agent" });
    item.comment = message;
    box.append(h("div", { class: "field" }, h("label", { for: mid }, allowed.has(f.say) ? "Message to the agent" : "Why? (optional, sent to the agent)"), message));
  }
  if (allowed.has(f.say)) {
    row.append(
      h("button", {
        type: "button",
        class: "respond",
        "data-decision": f.say,
        onclick: () => {
          if (!message.value.trim()) {
            setWarn(item, "Type a message first.");
            message.focus();
            return;
          }
          send(f.decide[f.say](message.value));
        },
      }, f.labels[f.say]),
    );
  }
  if (allowed.has(f.no)) {
    item.rejectBtn = h("button", {
      type: "button",
      class: "reject",
      "aria-keyshortcuts": "r",
      "data-decision": f.no,
      onclick: () => send(f.decide[f.no](message ? message.value.trim() : "")),
    }, f.labels[f.no]);
    row.append(item.rejectBtn);
  }
  box.append(row);
  if (allowed.has("edit")) box.append(editForm(item, hitl, f, send));
  return box;
}

function editForm(item, hitl, f, send) {
  const id = uid("hitl-args");
  const ta = h("textarea", { id, class: "json-editor", rows: "6", spellcheck: "false", name: "args" });
  ta.value = JSON.stringify(hitl.args, null, 2);
  const form = h(
    "form",
    { class: "hitl-edit", novalidate: true },
    h(
      "details",
      {},
      h("summary", {}, "Edit the arguments"),
      h("div", { class: "field" }, h("label", { for: id }, `Arguments of ${hitl.action} (JSON)`), ta),
      h("div", { class: "row" }, h("button", { type: "submit", "data-decision": "edit" }, f.labels.edit)),
    ),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const r = parseArgs(ta.value);
    if (!r.ok) {
      setWarn(item, r.error, "bad");
      ta.focus();
      return;
    }
    send(f.decide.edit(hitl.action, r.value));
  });
  return form;
}

/** The edited arguments: a JSON object, or why not. */
export function parseArgs(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `The arguments are not valid JSON: ${err.message}` };
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    return { ok: false, error: "The arguments must be a JSON object ({…})." };
  }
  return { ok: true, value };
}

function setWarn(item, text, tone = "warn") {
  item.verdictEl.className = `verdict ${tone}`;
  item.verdictEl.textContent = text;
}
