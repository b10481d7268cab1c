// The inbox page: sign-in, the list of pending requests, answering, history, keyboard and
// notifications. The socket and reconnection live in connection.js; this module only turns
// its events into DOM and user actions into requests.
//
// Every request view shown here comes from the hub; agent-written text (question, context,
// choices, schema titles) reaches the DOM only as text nodes or through markdown.js.

import { Connection, State, CONNECTION_LOST, TIMEOUT } from "./connection.js";
import { ErrorCode, Kind, Status, T } from "./protocol.js";
import { render as renderMarkdown, toPlainText } from "./markdown.js";
import { h, uid } from "./dom.js";
import { buildSchemaFields, normalizeTools } from "./forms.js";

/** How long a resolved request stays on screen with its verdict before it goes. */
const BRIEF_MS = 2000;
const TITLE = "A2H Inbox";
const HISTORY_LIMIT = 100;
const TICK_MS = 250;
/** A request this far past its deadline and not yet removed makes us re-read deadlines. */
const OVERDUE_MS = 3000;
const REFRESH_MS = 5000;

const $ = (id) => document.getElementById(id);

const app = {
  conn: null,
  me: null, // {tenant, handle, role}
  /** op_id -> Item, pending and briefly-shown resolved ones */
  items: new Map(),
  /** op_ids known to be terminal: a late inbox.add for them is ignored */
  tombstones: new Set(),
  view: "inbox",
  history: null, // array of request views once loaded
  ticker: null,
  connTicker: null,
};

// ============================================================================ sign-in

function tokenFromHash() {
  const hash = location.hash.replace(/^#/, "");
  if (!hash) return null;
  const params = new URLSearchParams(hash);
  return params.get("token");
}

function clearHash() {
  history.replaceState(null, "", location.pathname + location.search);
}

async function postSession(token) {
  let res;
  try {
    res = await fetch("/api/session", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token }),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch {
    return { ok: false, message: "Can't reach the hub. Check that it is running, then try again." };
  }
  if (res.ok) return { ok: true };
  if (res.status === 401) {
    return { ok: false, message: "That token was not accepted: it is mistyped, revoked or expired. Ask for a new sign-in link." };
  }
  if (res.status === 403) {
    return { ok: false, message: "That token does not belong to a person (it is an agent or admin token). Use a human token." };
  }
  if (res.status === 429) return { ok: false, message: "Too many sign-in attempts. Wait a moment and try again." };
  return { ok: false, message: `Sign-in failed (HTTP ${res.status}).` };
}

/** {ok: true, me} | {ok: false, status} (status 0: the hub is unreachable). */
async function fetchMe() {
  try {
    const res = await fetch("/api/me", { credentials: "same-origin", cache: "no-store" });
    if (!res.ok) return { ok: false, status: res.status };
    return { ok: true, me: await res.json() };
  } catch {
    return { ok: false, status: 0 };
  }
}

async function signInWith(token) {
  const result = await postSession(token);
  if (!result.ok) {
    showSignIn(result.message);
    return;
  }
  await enter();
}

/** With a session cookie (maybe): show the inbox, or the sign-in page. */
async function enter() {
  const me = await fetchMe();
  if (me.ok) {
    if (me.me.role && me.me.role !== "human") {
      showSignIn("This session does not belong to a person. Sign in with a human token.");
      return;
    }
    startApp(me.me);
  } else if (me.status === 0) {
    showSignIn("Can't reach the hub. Check that it is running, then reload this page.");
  } else {
    showSignIn("");
  }
}

async function signOut() {
  stopApp();
  try {
    await fetch("/api/session", { method: "DELETE", credentials: "same-origin", cache: "no-store" });
  } catch {
    // The cookie is HttpOnly; if the hub is down it stays until it expires. Say so.
    showSignIn("Signed out of this page, but the hub could not be reached to end the session.", true);
    return;
  }
  showSignIn("You are signed out.", true);
}

function showSignIn(message, neutral = false) {
  stopApp();
  $("signin").hidden = false;
  $("inbox-view").hidden = true;
  $("history-view").hidden = true;
  document.querySelector(".views").hidden = true;
  $("account").hidden = true;
  $("conn-box").hidden = true;
  const msg = $("signin-message");
  msg.textContent = message || "";
  msg.classList.toggle("neutral", neutral);
  document.title = `Sign in · ${TITLE}`;
  $("token-input").value = "";
  $("token-input").focus();
}

// ============================================================================ app lifecycle

function startApp(me) {
  stopApp();
  app.me = me;
  $("signin").hidden = true;
  document.querySelector(".views").hidden = false;
  $("account").hidden = false;
  $("conn-box").hidden = false;
  $("whoami").textContent = me.handle ? `Signed in as ${me.handle}` : "";
  updateNotificationButton();
  showView("inbox");
  updateEmpty();
  updateTitle();

  const conn = new Connection({ authCheck: stillSignedIn });
  app.conn = conn;
  conn.addEventListener("state", onState);
  conn.addEventListener("sync", (e) => onSync(e.detail.items));
  conn.addEventListener(T.INBOX_ADD, (e) => onAdd(e.detail.request, true));
  conn.addEventListener(T.INBOX_REMOVE, (e) => onRemove(e.detail));
  conn.addEventListener("huberror", (e) => {
    app.connNote = e.detail && e.detail.message ? String(e.detail.message) : "";
  });
  conn.addEventListener("signedout", (e) => {
    showSignIn(
      e.detail.reason === "revoked"
        ? "Your access was revoked or has expired. Sign in again with a new link."
        : "Your session has ended. Sign in again.",
    );
  });
  conn.start();
  app.ticker = setInterval(tick, TICK_MS);
}

function stopApp() {
  if (app.conn) app.conn.stop();
  app.conn = null;
  clearInterval(app.ticker);
  clearInterval(app.connTicker);
  app.ticker = app.connTicker = null;
  for (const item of app.items.values()) clearTimeout(item.removeTimer);
  app.items.clear();
  app.tombstones.clear();
  app.history = null;
  app.everOpen = false;
  $("list").replaceChildren();
  $("history-list").replaceChildren();
}

async function stillSignedIn() {
  const me = await fetchMe();
  if (me.ok) return true;
  if (me.status === 0) throw new Error("unreachable");
  return !(me.status === 401 || me.status === 403);
}

// ============================================================================ connection state

function onState(e) {
  const { state } = e.detail;
  const box = $("conn-box");
  const label = $("conn");
  box.dataset.state = state;
  label.dataset.state = state;
  const text = {
    [State.IDLE]: "Not connected",
    [State.CONNECTING]: app.everOpen ? "Reconnecting…" : "Connecting…",
    [State.OPEN]: "Connected",
    [State.CLOSED]: "Disconnected — reconnecting",
    [State.SIGNED_OUT]: "Signed out",
  }[state];
  if (label.textContent !== text) label.textContent = text;
  if (state === State.OPEN) {
    app.everOpen = true;
    app.connNote = "";
  }
  $("retry-now").hidden = state !== State.CLOSED;
  clearInterval(app.connTicker);
  app.connTicker = null;
  if (state === State.CLOSED) {
    updateRetry();
    app.connTicker = setInterval(updateRetry, 500);
  } else {
    $("conn-retry").textContent = "";
  }
  if (state === State.OPEN && app.view === "history") loadHistory();
}

function updateRetry() {
  const ms = app.conn && app.conn.retryIn;
  const when = ms == null ? "" : `in ${Math.ceil(ms / 1000)} s`;
  $("conn-retry").textContent = app.connNote ? `(${app.connNote}) ${when}` : when;
}

// ============================================================================ the list

/**
 * An Item is one request on screen:
 *   req, el, countdownEl, verdictEl, controlsEl, choiceButtons, approveBtn, rejectBtn,
 *   sending (a respond is in flight), uncertain (it was in flight when the socket dropped),
 *   resolved (shown briefly with its verdict), removeTimer.
 */

function sortKey(req) {
  return [typeof req.deadline === "number" ? req.deadline : Infinity, req.created_at || 0, req.op_id];
}

function compare(a, b) {
  const ka = sortKey(a);
  const kb = sortKey(b);
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] < kb[i]) return -1;
    if (ka[i] > kb[i]) return 1;
  }
  return 0;
}

function pendingItems() {
  return [...app.items.values()].filter((it) => !it.resolved);
}

function onSync(items) {
  const seen = new Set();
  for (const req of items) {
    if (!req || typeof req.op_id !== "string") continue;
    seen.add(req.op_id);
    onAdd(req, false);
  }
  for (const item of [...app.items.values()]) {
    if (item.resolved || seen.has(item.req.op_id)) {
      if (item.uncertain && seen.has(item.req.op_id)) {
        // Our answer never reached the hub: the request is still open.
        item.uncertain = false;
        item.sending = false;
        setControlsDisabled(item, false);
        setVerdict(item, "Not delivered: the connection dropped. Try again.", "warn");
      }
      continue;
    }
    // Resolved while this page was disconnected.
    tombstone(item.req.op_id);
    // After this sync event the connection reports "open"; ask history then.
    if (item.uncertain) setTimeout(() => settleUncertain(item), 0);
    else dropItem(item);
  }
  updateEmpty();
  updateTitle();
}

async function settleUncertain(item) {
  // We sent an answer and lost the connection before the verdict: find out from history.
  item.uncertain = false;
  let req = null;
  try {
    const reply = await app.conn.request(T.HISTORY, { limit: 50 });
    req = (reply.items || []).find((r) => r.op_id === item.req.op_id) || null;
  } catch {
    // fall through
  }
  if (req) finalize(item, describeResolution(req, { mine: item.sentValue }), toneOf(req));
  else finalize(item, "No longer pending.", "info");
}

function onAdd(req, live) {
  if (!req || typeof req.op_id !== "string" || req.status !== Status.PENDING) return;
  if (app.tombstones.has(req.op_id)) return;
  const existing = app.items.get(req.op_id);
  if (existing) {
    if (!existing.resolved && existing.req.deadline !== req.deadline) {
      existing.req = req;
      existing.el.dataset.deadline = String(req.deadline ?? "");
      placeItem(existing);
    }
    return;
  }
  const item = buildItem(req);
  app.items.set(req.op_id, item);
  placeItem(item);
  renderCountdown(item);
  updateEmpty();
  updateTitle();
  if (live) notify(req);
}

function onRemove(frame) {
  const req = frame.request && typeof frame.request === "object" ? frame.request : null;
  const opId = frame.op_id || (req && req.op_id);
  if (typeof opId !== "string") return;
  tombstone(opId);
  if (req && app.history) addToHistory(req);
  const item = app.items.get(opId);
  if (!item || item.resolved) return;
  if (item.sending) {
    // Our own respond is in flight: its reply says whether we won; wait for it.
    item.removedBy = req;
    return;
  }
  if (req) finalize(item, describeResolution(req), toneOf(req));
  else finalize(item, "No longer pending.", "info");
}

function tombstone(opId) {
  app.tombstones.add(opId);
  if (app.tombstones.size > 5000) {
    // Sets iterate in insertion order: forget the oldest half.
    let n = 2500;
    for (const old of app.tombstones) {
      if (n-- <= 0) break;
      app.tombstones.delete(old);
    }
  }
}

function describeResolution(req, { mine = undefined } = {}) {
  const actor = typeof req.actor === "string" ? req.actor : "";
  const self = app.me && actor === `human:${app.me.handle}`;
  switch (req.status) {
    case Status.EXPIRED:
      return "Expired: the deadline passed.";
    case Status.CANCELLED:
      return "Cancelled by the agent.";
    case Status.ANSWERED:
    case Status.DECLINED:
      if (self && mine !== undefined && JSON.stringify(req.value) === JSON.stringify(mine)) {
        return "Accepted: your answer was recorded.";
      }
      if (self) return req.status === Status.DECLINED ? "Rejected in another tab." : "Answered in another tab.";
      return `${req.status === Status.DECLINED ? "Rejected" : "Answered"} by ${actor || "someone else"}.`;
    default:
      return "No longer pending.";
  }
}

function toneOf(req) {
  return req.status === Status.EXPIRED || req.status === Status.CANCELLED ? "warn" : "info";
}

function placeItem(item) {
  const list = $("list");
  // Moving a node blurs whatever had focus inside it: put the focus back (half-typed answers).
  const focused = item.el.contains(document.activeElement) ? document.activeElement : null;
  const before = [...app.items.values()]
    .filter((o) => o !== item && o.el.parentNode === list && compare(item.req, o.req) < 0)
    .sort((a, b) => compare(a.req, b.req))[0];
  if (before) {
    if (item.el.nextSibling !== before.el) list.insertBefore(item.el, before.el);
  } else if (item.el !== list.lastElementChild) {
    list.appendChild(item.el);
  }
  if (focused && document.activeElement !== focused) focused.focus();
}

/** Show the verdict, take the controls away, and remove the item after a moment. */
function finalize(item, text, tone) {
  if (item.resolved) return;
  const hadFocus = item.el.contains(document.activeElement);
  item.resolved = true;
  item.sending = false;
  tombstone(item.req.op_id);
  item.el.classList.add("resolved");
  item.el.setAttribute("aria-disabled", "true");
  setControlsDisabled(item, true);
  setVerdict(item, text, tone);
  item.countdownEl.textContent = "";
  if (hadFocus) focusNeighbour(item);
  updateEmpty();
  updateTitle();
  item.removeTimer = setTimeout(() => dropItem(item), BRIEF_MS);
}

/** Remove an item from the page now. */
function dropItem(item) {
  clearTimeout(item.removeTimer);
  if (item.el.contains(document.activeElement)) focusNeighbour(item);
  item.el.remove();
  app.items.delete(item.req.op_id);
  updateEmpty();
  updateTitle();
}

function focusNeighbour(item) {
  const others = pendingItems().filter((o) => o !== item).map((o) => o.el);
  const all = [...$("list").children];
  const idx = all.indexOf(item.el);
  const next = all.slice(idx + 1).find((e) => others.includes(e)) || all.slice(0, idx).reverse().find((e) => others.includes(e));
  if (next) next.focus();
  else $("list").focus();
}

function updateEmpty() {
  $("empty").hidden = app.items.size > 0;
}

function updateTitle() {
  const n = pendingItems().length;
  const title = n > 0 ? `(${n}) ${TITLE}` : TITLE;
  if (document.title !== title) document.title = title;
  $("pending-count").textContent = n > 0 ? String(n) : "";
}

// ============================================================================ one request

function kindLabel(req) {
  return req.kind === Kind.APPROVAL ? "Approval request" : "Question";
}

function buildItem(req) {
  const plain = toPlainText(req.question);
  const label = `${kindLabel(req)} from ${req.from || "an agent"}: ${plain}`;
  const el = h("article", {
    class: "item",
    role: "article",
    tabindex: "0",
    "aria-label": label.length > 400 ? `${label.slice(0, 399)}…` : label,
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

  const ctx = renderContext(req.context);
  if (ctx) el.append(ctx);
  if (req.default !== null && req.default !== undefined) {
    el.append(h("p", { class: "default-note" }, `If nobody answers in time: ${formatValue(req.default)}`));
  }
  item.controlsEl = buildControls(item);
  item.verdictEl = h("p", { class: "verdict", "aria-live": "polite" });
  el.append(item.controlsEl, item.verdictEl);
  return item;
}

function renderContext(ctx) {
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

function clip(s, max = 20000) {
  const text = String(s);
  return text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text;
}

function buildControls(item) {
  const req = item.req;
  const box = h("div", { class: "controls" });
  if (req.kind === Kind.APPROVAL) {
    const cid = uid("comment");
    const comment = h("textarea", { id: cid, class: "comment", rows: "2", placeholder: "Why? (sent to the agent)" });
    item.comment = comment;
    item.approveBtn = h("button", { type: "button", class: "approve", "aria-keyshortcuts": "a", onclick: () => approve(item, true) }, "Approve");
    item.rejectBtn = h("button", { type: "button", class: "reject", "aria-keyshortcuts": "r", onclick: () => approve(item, false) }, "Reject");
    box.append(
      h("div", { class: "field" }, h("label", { for: cid }, "Comment (optional)"), comment),
      h("div", { class: "row" }, item.approveBtn, item.rejectBtn),
    );
    return box;
  }
  const tools = normalizeTools(req.tools);
  if (tools.length) {
    // The agent may demand a tool call (OpenAI tool_choice "required"): then no free text.
    const ctx = req.context && typeof req.context === "object" ? req.context : {};
    const required = ctx.tool_choice === "required";
    if (!required) box.append(textForm(item));
    box.append(toolForm(item, tools, required));
    return box;
  }
  if (req.schema && typeof req.schema === "object") {
    box.append(schemaForm(item));
    return box;
  }
  if (Array.isArray(req.choices) && req.choices.length) {
    const group = h("div", { class: "choices", role: "group", "aria-label": "Choices" });
    req.choices.forEach((choice, i) => {
      const text = String(choice);
      const b = h(
        "button",
        { type: "button", "aria-label": text, "aria-keyshortcuts": i < 9 ? String(i + 1) : null, onclick: () => respond(item, { value: choice }) },
        i < 9 ? h("span", { class: "key", "aria-hidden": "true" }, String(i + 1)) : null,
        h("span", {}, text),
      );
      item.choiceButtons.push(b);
      group.append(b);
    });
    box.append(group);
    return box;
  }
  box.append(textForm(item));
  return box;
}

function textForm(item) {
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
    respond(item, { value: ta.value });
  });
  return form;
}

function schemaForm(item) {
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
    respond(item, { value: r.value });
  });
  return form;
}

function toolForm(item, tools, only = false) {
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
    respond(item, { value: { tool_call: { name: t.name, arguments: r.value } } });
  });
  return form;
}

function approve(item, approved) {
  const comment = item.comment ? item.comment.value : "";
  respond(item, {
    status: approved ? Status.ANSWERED : Status.DECLINED,
    value: { approved, comment },
  });
}

function setVerdict(item, text, tone = "info") {
  item.verdictEl.className = `verdict ${tone}`;
  item.verdictEl.textContent = text;
}

function setControlsDisabled(item, disabled) {
  if (disabled && item.controlsEl.contains(document.activeElement)) item.el.focus();
  for (const c of item.controlsEl.querySelectorAll("button, input, textarea, select")) c.disabled = disabled;
}

async function respond(item, { value, status = Status.ANSWERED }) {
  if (item.sending || item.resolved || !app.conn) return;
  item.sending = true;
  item.sentValue = value;
  setControlsDisabled(item, true);
  setVerdict(item, "Sending…", "info");
  item.el.setAttribute("aria-busy", "true");
  try {
    const reply = await app.conn.request(T.RESPOND, { op_id: item.req.op_id, value, status });
    const req = reply.request || {};
    let text = "Accepted: your answer was recorded.";
    if (item.req.kind === Kind.APPROVAL) text = req.status === Status.DECLINED ? "Accepted: rejected." : "Accepted: approved.";
    if (app.history && reply.request) addToHistory(reply.request);
    finalize(item, text, "ok");
  } catch (err) {
    const code = err && err.code;
    if (code === ErrorCode.ALREADY_RESOLVED) {
      const req = err.request || item.removedBy;
      let text = "Already resolved.";
      if (req && req.status === Status.EXPIRED) text = "Too late: the request had already expired.";
      else if (req && req.status === Status.CANCELLED) text = "Too late: the agent cancelled the request.";
      else if (req) text = `Already resolved: ${describeResolution(req).replace(/\.$/, "").toLowerCase()}.`;
      item.sending = false;
      finalize(item, text, "warn");
    } else if (code === CONNECTION_LOST || code === TIMEOUT) {
      if (item.removedBy) {
        // The hub pushed the resolution before the socket dropped.
        finalize(item, describeResolution(item.removedBy, { mine: value }), toneOf(item.removedBy));
      } else {
        item.uncertain = true;
        setVerdict(item, "Connection lost before the hub replied; checking when it is back…", "warn");
      }
    } else if (code === ErrorCode.NOT_FOUND) {
      item.sending = false;
      finalize(item, "This request no longer exists.", "warn");
    } else {
      item.sending = false;
      setControlsDisabled(item, false);
      const msg = err && err.message ? err.message : String(err);
      setVerdict(item, `Not accepted: ${msg}`, "bad");
    }
  } finally {
    item.el.removeAttribute("aria-busy");
  }
}

// ============================================================================ countdowns

function formatRemaining(ms) {
  // Rounded, not ceiled: the shown figure is within half a second of the truth.
  const s = Math.max(1, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 48 * 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d`;
}

function renderCountdown(item) {
  const el = item.countdownEl;
  const deadline = item.req.deadline;
  if (typeof deadline !== "number") {
    if (el.textContent !== "no deadline") el.textContent = "no deadline";
    return;
  }
  const ms = deadline * 1000 - (app.conn ? app.conn.hubNow() : Date.now());
  const text = ms > 0 ? `expires in ${formatRemaining(ms)}` : "expiring…";
  if (el.textContent !== text) el.textContent = text;
  const iso = new Date(deadline * 1000).toISOString();
  if (el.getAttribute("datetime") !== iso) el.setAttribute("datetime", iso);
  el.classList.toggle("soon", ms < 30000);
}

function tick() {
  let overdue = false;
  const now = app.conn ? app.conn.hubNow() : Date.now();
  for (const item of app.items.values()) {
    if (item.resolved) continue;
    renderCountdown(item);
    if (typeof item.req.deadline === "number" && now > item.req.deadline * 1000 + OVERDUE_MS) overdue = true;
  }
  if (overdue) refreshDeadlines();
}

// An open-ended deadline moves when the agent waits again, and the hub pushes nothing for
// that; the expiry of a request that really expired arrives as inbox.remove within moments.
// So a request still here well past its deadline has probably been extended: re-read the
// inbox (at most every few seconds) for the current deadlines. Only deadlines are taken and
// missing requests added; removals stay the pushes' job (a snapshot may predate a push).
async function refreshDeadlines() {
  const t = Date.now();
  if (!app.conn || app.conn.state !== State.OPEN || t - (app.lastRefresh || 0) < REFRESH_MS) return;
  app.lastRefresh = t;
  let reply;
  try {
    reply = await app.conn.request(T.INBOX, {});
  } catch {
    return;
  }
  for (const req of Array.isArray(reply.items) ? reply.items : []) onAdd(req, false);
}

// ============================================================================ notifications

function updateNotificationButton() {
  const btn = $("enable-notifications");
  btn.hidden = !("Notification" in window) || Notification.permission !== "default";
}

function notify(req) {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  if (document.visibilityState === "visible" && document.hasFocus()) return;
  try {
    const n = new Notification(`${kindLabel(req)} from ${req.from || "an agent"}`, {
      body: toPlainText(req.question).slice(0, 240),
      tag: req.op_id,
    });
    n.onclick = () => {
      window.focus();
      const item = app.items.get(req.op_id);
      if (item) item.el.focus();
      n.close();
    };
  } catch {
    // Some platforms only allow notifications from a service worker; the title still counts.
  }
}

// ============================================================================ keyboard

function currentItem() {
  const active = document.activeElement;
  const el = active && active.closest ? active.closest("article.item") : null;
  if (!el) return null;
  const item = app.items.get(el.dataset.opId);
  return item && !item.resolved ? item : null;
}

function isTextField(el) {
  if (!el || !el.matches) return false;
  if (el.matches("textarea, select, [contenteditable=''], [contenteditable='true']")) return true;
  return el.matches("input") && !["checkbox", "radio", "button", "submit", "reset"].includes(el.type);
}

function onKeyDown(e) {
  if (e.defaultPrevented || e.isComposing || !app.conn) return;
  if (app.view !== "inbox") return;
  const target = e.target;
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
    const form = target && target.closest ? target.closest("form") : null;
    if (form && form.closest("article.item")) {
      e.preventDefault();
      form.requestSubmit();
    }
    return;
  }
  if (isTextField(target) || e.ctrlKey || e.metaKey || e.altKey) return;
  const key = e.key;
  if (key === "j" || key === "k") {
    e.preventDefault();
    moveFocus(key === "j" ? 1 : -1);
    return;
  }
  const item = currentItem();
  if (!item) return;
  if (/^[1-9]$/.test(key)) {
    const b = item.choiceButtons[Number(key) - 1];
    if (b && !b.disabled) {
      e.preventDefault();
      b.click();
    }
    return;
  }
  if ((key === "a" || key === "r") && item.req.kind === Kind.APPROVAL) {
    const b = key === "a" ? item.approveBtn : item.rejectBtn;
    if (b && !b.disabled) {
      e.preventDefault();
      b.click();
    }
  }
}

function moveFocus(step) {
  const els = pendingItems()
    .map((it) => it.el)
    .filter((el) => el.parentNode);
  els.sort((a, b) => (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1));
  if (!els.length) return;
  const cur = document.activeElement && document.activeElement.closest ? document.activeElement.closest("article.item") : null;
  let idx = els.indexOf(cur);
  if (idx < 0) idx = step > 0 ? -1 : els.length;
  const next = els[Math.max(0, Math.min(els.length - 1, idx + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}

// ============================================================================ history

function showView(view) {
  app.view = view;
  $("inbox-view").hidden = view !== "inbox";
  $("history-view").hidden = view !== "history";
  $("show-inbox").setAttribute("aria-current", view === "inbox" ? "page" : "false");
  $("show-history").setAttribute("aria-current", view === "history" ? "page" : "false");
  if (view === "history") loadHistory();
}

async function loadHistory() {
  const msg = $("history-message");
  if (!app.conn || app.conn.state !== State.OPEN) {
    msg.textContent = "Not connected: history loads when the connection is back.";
    return;
  }
  msg.textContent = "Loading…";
  try {
    const reply = await app.conn.request(T.HISTORY, { limit: HISTORY_LIMIT });
    app.history = Array.isArray(reply.items) ? reply.items : [];
    renderHistory();
  } catch (err) {
    msg.textContent = `Could not load history (${err && err.code ? err.code : err}).`;
  }
}

function addToHistory(req) {
  if (!app.history || !req || typeof req.op_id !== "string") return;
  if (app.history.some((r) => r.op_id === req.op_id)) return;
  app.history.unshift(req);
  if (app.history.length > HISTORY_LIMIT) app.history.length = HISTORY_LIMIT;
  renderHistory();
}

function renderHistory() {
  const list = $("history-list");
  const msg = $("history-message");
  msg.textContent = app.history.length ? "" : "Nothing answered yet.";
  list.replaceChildren(...app.history.map(historyEntry));
}

function historyEntry(req) {
  const question = h("div", { class: "question md" });
  question.append(renderMarkdown(req.question));
  const when = typeof req.resolved_at === "number" ? new Date(req.resolved_at * 1000) : null;
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
      h("dd", {}, when ? h("time", { datetime: when.toISOString() }, when.toLocaleString()) : "—"),
      h("dt", {}, "Took"),
      h("dd", { class: "took" }, formatDuration(req.human_seconds)),
    ),
  );
}

function formatValue(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

function formatAnswer(req) {
  const v = req.value;
  if (req.status === Status.EXPIRED) return v == null ? "— (expired)" : `${formatValue(v)} (default, on expiry)`;
  if (req.status === Status.CANCELLED) return "— (cancelled)";
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if (typeof v.approved === "boolean") {
      const c = typeof v.comment === "string" && v.comment ? `: “${v.comment}”` : "";
      return `${v.approved ? "Approved" : "Rejected"}${c}`;
    }
    if (v.tool_call && typeof v.tool_call === "object") {
      return `Tool call ${v.tool_call.name}(${JSON.stringify(v.tool_call.arguments ?? {})})`;
    }
  }
  return formatValue(v);
}

function formatDuration(sec) {
  if (typeof sec !== "number" || !Number.isFinite(sec)) return "—";
  if (sec < 10) return `${sec.toFixed(1)} s`;
  if (sec < 60) return `${Math.round(sec)} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
  return `${Math.floor(sec / 3600)} h ${Math.floor((sec % 3600) / 60)} min`;
}

// ============================================================================ wiring

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    if (token) signInWith(token);
  });
  $("sign-out").addEventListener("click", signOut);
  $("show-inbox").addEventListener("click", () => showView("inbox"));
  $("show-history").addEventListener("click", () => showView("history"));
  $("history-refresh").addEventListener("click", loadHistory);
  $("retry-now").addEventListener("click", () => app.conn && app.conn.reconnectNow());
  $("enable-notifications").addEventListener("click", async () => {
    try {
      await Notification.requestPermission();
    } finally {
      updateNotificationButton();
    }
  });
  document.addEventListener("keydown", onKeyDown);
  window.addEventListener("online", () => app.conn && app.conn.reconnectNow());
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && app.conn) app.conn.reconnectNow();
  });
  window.addEventListener("hashchange", () => {
    const token = tokenFromHash();
    if (token) {
      clearHash();
      signInWith(token);
    }
  });
}

function boot() {
  wire();
  const token = tokenFromHash();
  if (token) {
    // Out of the address bar (and history) before anything else happens.
    clearHash();
    signInWith(token);
  } else {
    enter();
  }
}

boot();
