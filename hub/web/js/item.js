// One request on screen: its article (question, context, default) and its answer controls —
// choice buttons, approve/reject with a comment, free text, a form from a JSON schema, a tool
// call. Answers leave through the `onAnswer(item, {value, status})` callback; this module
// sends nothing itself. Agent-written text reaches the DOM only as text nodes or through
// markdown.js.

import { Kind, Status } from "./protocol.js";
import { render as renderMarkdown, toPlainText } from "./markdown.js";
import { h, uid } from "./dom.js";
import { buildSchemaFields, normalizeTools } from "./forms.js";
import { clip, formatValue } from "./format.js";
import { buildHitlControls, hitlOf, renderAction } from "./hitl.js";

/**
 * An Item is one request on screen:
 *   req, el, countdownEl, verdictEl, controlsEl, choiceButtons, approveBtn, rejectBtn, comment,
 *   sending (a respond is in flight), uncertain (it was in flight when the socket dropped),
 *   resolved (shown briefly with its verdict), removeTimer, broken (could not be rendered).
 */

export function kindLabel(req) {
  return req.kind === Kind.APPROVAL ? "Approval request" : "Question";
}

/** The accessible name of a request's article (at most 400 characters). */
export function itemLabel(req) {
  const label = `${kindLabel(req)} from ${req.from || "an agent"}: ${toPlainText(req.question)}`;
  return label.length > 400 ? `${label.slice(0, 399)}…` : label;
}

/**
 * Build the article for one request. Throws if something in the request cannot be shown;
 * the list then shows brokenItem() in its place.
 * @param {object} req a request view from the hub
 * @param {(item: object, answer: {value: any, status?: string}) => void} onAnswer
 */
export function buildItem(req, onAnswer) {
  const el = h("article", {
    class: "item",
    role: "article",
    tabindex: "0",
    "aria-label": itemLabel(req),
    "data-op-id": req.op_id,
    "data-kind": req.kind,
    "data-deadline": String(req.deadline ?? ""),
  });
  const item = { req, el, sending: false, resolved: false, uncertain: false, choiceButtons: [] };

  item.countdownEl = h("time", { class: "countdown" });
  const meta = h(
    "header",
    { class: "item-meta" },
    req.kind === Kind.APPROVAL ? h("span", { class: "kind-tag" }, "Approval") : null,
    h("span", { class: "agent" }, String(req.from || "agent")),
    h("span", { class: "conv" }, `in ${req.conversation}`),
    item.countdownEl,
  );
  const question = h("div", { class: "question md" });
  question.append(renderMarkdown(req.question));
  el.append(meta, question);

  const hitl = hitlOf(req);
  const ctx = hitl ? renderAction(hitl) : renderContext(req.context);
  if (ctx) el.append(ctx);
  if (req.default !== null && req.default !== undefined) {
    el.append(h("p", { class: "default-note" }, `If nobody answers in time: ${formatValue(req.default)}`));
  }
  item.controlsEl = buildControls(item, onAnswer);
  item.verdictEl = h("p", { class: "verdict", "aria-live": "polite" });
  el.append(item.controlsEl, item.verdictEl);
  return item;
}

/**
 * The stand-in for a request that buildItem() could not render: it keeps its place (and its
 * count) in the list, says so, and goes away like any other item when the request resolves.
 * Built only from the op_id and the sender, as plain text.
 */
export function brokenItem(req, error) {
  const from = typeof req.from === "string" && req.from ? req.from : "an agent";
  const el = h("article", {
    class: "item broken",
    role: "article",
    tabindex: "0",
    "aria-label": `A request from ${from} that cannot be shown`,
    "data-op-id": req.op_id,
    "data-kind": typeof req.kind === "string" ? req.kind : "",
    "data-deadline": typeof req.deadline === "number" ? String(req.deadline) : "",
  });
  const item = { req, el, sending: false, resolved: false, uncertain: false, choiceButtons: [], broken: true };
  item.countdownEl = h("time", { class: "countdown" });
  item.controlsEl = h("div", { class: "controls" });
  item.verdictEl = h("p", { class: "verdict", "aria-live": "polite" });
  const why = error && error.message ? ` (${String(error.message).slice(0, 200)})` : "";
  el.append(
    h("header", { class: "item-meta" }, h("span", { class: "agent" }, from), item.countdownEl),
    h("p", { class: "broken-note" }, `This request cannot be shown here${why}. Its id is ${req.op_id}; the agent can cancel it, or it expires.`),
    item.controlsEl,
    item.verdictEl,
  );
  return item;
}

export function renderContext(ctx) {
  if (ctx === null || ctx === undefined) return null;
  if (typeof ctx === "string" && !ctx.trim()) return null;
  const details = h("details", { class: "context" });
  const messages = ctx && typeof ctx === "object" && Array.isArray(ctx.messages) ? ctx.messages : null;
  if (messages) {
    details.append(h("summary", {}, `Context: ${messages.length} earlier message${messages.length === 1 ? "" : "s"}`));
    const ol = h("ol", { class: "messages" });
    for (const m of messages) {
      const role = m && typeof m.role === "string" ? m.role : "message";
      const body = h("div", { class: "md" });
      const content = m ? m.content : null;
      if (typeof content === "string") body.append(renderMarkdown(content));
      else if (Array.isArray(content)) {
        for (const part of content) {
          if (part && part.type === "text" && typeof part.text === "string") body.append(renderMarkdown(part.text));
          else body.append(h("pre", { class: "json" }, clip(JSON.stringify(part, null, 2))));
        }
      } else if (content != null) body.append(h("pre", { class: "json" }, clip(JSON.stringify(content, null, 2))));
      if (m && Array.isArray(m.tool_calls)) {
        for (const tc of m.tool_calls) {
          const fn = (tc && tc.function) || {};
          body.append(h("pre", { class: "json" }, clip(`${fn.name || "tool"}(${fn.arguments || ""})`)));
        }
      }
      ol.append(h("li", { class: "message", "data-role": role }, h("span", { class: "role" }, role), body));
    }
    details.append(ol);
    const extra = { ...ctx };
    delete extra.messages;
    if (Object.keys(extra).length) details.append(h("pre", { class: "json" }, clip(JSON.stringify(extra, null, 2))));
  } else if (typeof ctx === "string") {
    details.append(h("summary", {}, "Context"));
    const body = h("div", { class: "md" });
    body.append(renderMarkdown(ctx));
    details.append(body);
  } else {
    details.append(h("summary", {}, "Context"));
    details.append(h("pre", { class: "json" }, clip(JSON.stringify(ctx, null, 2))));
  }
  return details;
}

function buildControls(item, onAnswer) {
  const req = item.req;
  const box = h("div", { class: "controls" });
  if (req.kind === Kind.APPROVAL) {
    const cid = uid("comment");
    const comment = h("textarea", { id: cid, class: "comment", rows: "2", placeholder: "Why? (sent to the agent)" });
    item.comment = comment;
    const approve = (approved) => onAnswer(item, {
      status: approved ? Status.ANSWERED : Status.DECLINED,
      value: { approved, comment: item.comment.value },
    });
    item.approveBtn = h("button", { type: "button", class: "approve", "aria-keyshortcuts": "a", onclick: () => approve(true) }, "Approve");
    item.rejectBtn = h("button", { type: "button", class: "reject", "aria-keyshortcuts": "r", onclick: () => approve(false) }, "Reject");
    box.append(
      h("div", { class: "field" }, h("label", { for: cid }, "Comment (optional)"), comment),
      h("div", { class: "row" }, item.approveBtn, item.rejectBtn),
    );
    return box;
  }
  const hitl = hitlOf(req);
  if (hitl) {
    // A framework's review (LangGraph, LangChain): only the decisions its config allows.
    box.append(buildHitlControls(item, hitl, onAnswer));
    return box;
  }
  const tools = normalizeTools(req.tools);
  if (tools.length) {
    // The agent may demand a tool call (OpenAI tool_choice "required"): then no free text.
    const ctx = req.context && typeof req.context === "object" ? req.context : {};
    const required = ctx.tool_choice === "required";
    if (!required) box.append(textForm(item, onAnswer));
    box.append(toolForm(item, onAnswer, tools, required));
    return box;
  }
  if (req.schema && typeof req.schema === "object") {
    box.append(schemaForm(item, onAnswer));
    return box;
  }
  if (Array.isArray(req.choices) && req.choices.length) {
    const group = h("div", { class: "choices", role: "group", "aria-label": "Choices" });
    req.choices.forEach((choice, i) => {
      const text = String(choice);
      const b = h(
        "button",
        { type: "button", "aria-label": text, "aria-keyshortcuts": i < 9 ? String(i + 1) : null, onclick: () => onAnswer(item, { value: choice }) },
        i < 9 ? h("span", { class: "key", "aria-hidden": "true" }, String(i + 1)) : null,
        h("span", {}, text),
      );
      item.choiceButtons.push(b);
      group.append(b);
    });
    box.append(group);
    return box;
  }
  box.append(textForm(item, onAnswer));
  return box;
}

function textForm(item, onAnswer) {
  const id = uid("answer");
  const ta = h("textarea", { id, name: "answer", rows: "3", placeholder: "Type your answer…" });
  const form = h(
    "form",
    { class: "answer-form", novalidate: true },
    h("div", { class: "field" }, h("label", { for: id }, "Answer"), ta),
    h("div", { class: "row" }, h("button", { type: "submit" }, "Send"), h("span", { class: "hint-inline", "aria-hidden": "true" }, "Ctrl+Enter")),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!ta.value.trim()) {
      setVerdict(item, "Type an answer first.", "warn");
      ta.focus();
      return;
    }
    onAnswer(item, { value: ta.value });
  });
  return form;
}

function schemaForm(item, onAnswer) {
  const fields = buildSchemaFields(item.req.schema);
  const form = h(
    "form",
    { class: "schema-form" },
    h("fieldset", {}, h("legend", {}, "Your answer"), fields.element),
    h("div", { class: "row" }, h("button", { type: "submit" }, "Send")),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const r = fields.read();
    if (!r.ok) {
      setVerdict(item, r.error, "bad");
      if (r.field) r.field.focus();
      return;
    }
    onAnswer(item, { value: r.value });
  });
  return form;
}

function toolForm(item, onAnswer, tools, only = false) {
  const sid = uid("tool");
  const select = h("select", { id: sid, name: "tool" });
  tools.forEach((t, i) => select.append(h("option", { value: String(i) }, t.name)));
  const desc = h("p", { class: "tool-desc" });
  const args = h("div", { class: "tool-args" });
  let fields = null;
  const pick = () => {
    const t = tools[Number(select.value) || 0];
    desc.textContent = t.description;
    desc.hidden = !t.description;
    fields = buildSchemaFields(t.parameters);
    args.replaceChildren(fields.element);
  };
  select.addEventListener("change", pick);
  pick();
  const form = h(
    "form",
    { class: "tool-form" },
    h(
      "fieldset",
      {},
      h("legend", {}, only ? "Answer with a tool call" : "Or answer with a tool call"),
      h("div", { class: "field" }, h("label", { for: sid }, "Tool"), select),
      desc,
      args,
      h("div", { class: "row" }, h("button", { type: "submit" }, "Call tool")),
    ),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const t = tools[Number(select.value) || 0];
    const r = fields.read();
    if (!r.ok) {
      setVerdict(item, r.error, "bad");
      if (r.field) r.field.focus();
      return;
    }
    onAnswer(item, { value: { tool_call: { name: t.name, arguments: r.value } } });
  });
  return form;
}

export function setVerdict(item, text, tone = "info") {
  item.verdictEl.className = `verdict ${tone}`;
  item.verdictEl.textContent = text;
}

export function setControlsDisabled(item, disabled) {
  const doc = item.el.ownerDocument;
  if (disabled && item.controlsEl.contains(doc.activeElement)) item.el.focus();
  for (const c of item.controlsEl.querySelectorAll("button, input, textarea, select")) c.disabled = disabled;
}
