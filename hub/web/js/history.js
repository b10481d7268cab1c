// The History view: the person's resolved requests, newest first. Loaded on demand over the
// socket, then kept current from the resolutions the list sees. One entry that cannot be
// rendered becomes a placeholder; it never empties the view.

import { State } from "./connection.js";
import { T } from "./protocol.js";
import { render as renderMarkdown } from "./markdown.js";
import { h } from "./dom.js";
import { formatAnswer, formatDuration, isoTime } from "./format.js";

export const HISTORY_LIMIT = 100;

/** One resolved request as a list entry. Throws on a request it cannot show (see entry()). */
export function historyEntry(req) {
  const question = h("div", { class: "question md" });
  question.append(renderMarkdown(req.question));
  const iso = isoTime(req.resolved_at);
  const when = iso ? new Date(iso) : null;
  return h(
    "li",
    { class: "history-item", "data-op-id": req.op_id },
    h(
      "div",
      { class: "item-meta" },
      h("span", { class: "status-tag", "data-status": req.status }, req.status),
      h("span", { class: "agent" }, String(req.from || "")),
      h("span", { class: "conv" }, `in ${req.conversation}`),
    ),
    question,
    h(
      "dl",
      {},
      h("dt", {}, "Answer"),
      h("dd", { class: "answer" }, formatAnswer(req)),
      h("dt", {}, "By"),
      h("dd", { class: "actor" }, String(req.actor || "—")),
      h("dt", {}, "When"),
      h("dd", {}, when ? h("time", { datetime: iso }, when.toLocaleString()) : "—"),
      h("dt", {}, "Took"),
      h("dd", { class: "took" }, formatDuration(req.human_seconds)),
    ),
  );
}

/** historyEntry(), or a placeholder naming the op_id if this entry cannot be rendered. */
export function entry(req) {
  try {
    return historyEntry(req);
  } catch (err) {
    console.error("inbox: cannot render history entry", req && req.op_id, err);
    return h("li", { class: "history-item broken", "data-op-id": String(req && req.op_id) },
      `This entry cannot be shown here (${String(req && req.op_id)}).`);
  }
}

export class HistoryView {
  /**
   * @param {object} deps
   * @param {HTMLElement} deps.listEl, deps.messageEl
   * @param {() => object|null} deps.conn the Connection, if any
   */
  constructor({ listEl, messageEl, conn }) {
    this.listEl = listEl;
    this.messageEl = messageEl;
    this.conn = conn;
    this.items = null; // request views, once loaded
  }

  clear() {
    this.items = null;
    this.listEl.replaceChildren();
  }

  async load() {
    const conn = this.conn();
    if (!conn || conn.state !== State.OPEN) {
      this.messageEl.textContent = "Not connected: history loads when the connection is back.";
      return;
    }
    this.messageEl.textContent = "Loading…";
    try {
      const reply = await conn.request(T.HISTORY, { limit: HISTORY_LIMIT });
      this.items = Array.isArray(reply.items) ? reply.items : [];
      this.render();
    } catch (err) {
      this.messageEl.textContent = `Could not load history (${err && err.code ? err.code : err}).`;
    }
  }

  /** A request just resolved: put it on top, if history is loaded. */
  add(req) {
    if (!this.items || !req || typeof req.op_id !== "string") return;
    if (this.items.some((r) => r.op_id === req.op_id)) return;
    this.items.unshift(req);
    if (this.items.length > HISTORY_LIMIT) this.items.length = HISTORY_LIMIT;
    this.render();
  }

  render() {
    this.messageEl.textContent = this.items.length ? "" : "Nothing answered yet.";
    this.listEl.replaceChildren(...this.items.map(entry));
  }
}
