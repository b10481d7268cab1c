// The list of pending requests: the model (which requests are on screen, which are known to
// be over), its order (nearest deadline first), the live updates from the hub (sync, add,
// remove), answering (respond and its verdicts), countdowns and the page title.
//
// An InboxList owns its items; everything else it needs — the connection, who is signed in,
// the clock, notifications, history — comes in through the constructor, so node can drive it
// with a fake document and a fake connection.

import { State, CONNECTION_LOST, TIMEOUT } from "./connection.js";
import { ErrorCode, Kind, Status, T } from "./protocol.js";
import { brokenItem, buildItem, setControlsDisabled, setVerdict } from "./item.js";
import { formatRemaining, isoTime } from "./format.js";

/** How long a resolved request stays on screen with its verdict before it goes. */
export const BRIEF_MS = 2000;
export const TITLE = "A2H Inbox";
/** A request this far past its deadline and not yet removed makes us re-read deadlines. */
const OVERDUE_MS = 3000;
const REFRESH_MS = 5000;
const TOMBSTONES = 5000;

// ---------------------------------------------------------------------------- pure parts

function sortKey(req) {
  return [typeof req.deadline === "number" ? req.deadline : Infinity, req.created_at || 0, req.op_id];
}

/** Nearest deadline first (no deadline last), then oldest, then by op_id. */
export function compareRequests(a, b) {
  const ka = sortKey(a);
  const kb = sortKey(b);
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] < kb[i]) return -1;
    if (ka[i] > kb[i]) return 1;
  }
  return 0;
}

/** op_ids known to be terminal (a late inbox.add for them is ignored); the oldest half goes past `max`. */
export class Tombstones {
  constructor(max = TOMBSTONES) {
    this.max = max;
    this.set = new Set();
  }
  add(opId) {
    this.set.add(opId);
    if (this.set.size > this.max) {
      // Sets iterate in insertion order: forget the oldest half.
      let n = Math.floor(this.max / 2);
      for (const old of this.set) {
        if (n-- <= 0) break;
        this.set.delete(old);
      }
    }
  }
  has(opId) {
    return this.set.has(opId);
  }
  clear() {
    this.set.clear();
  }
}

/** What happened to a request, for its verdict line. `mine`: the value we sent, if any. */
export function describeResolution(req, me, { mine = undefined } = {}) {
  const actor = typeof req.actor === "string" ? req.actor : "";
  const self = me && actor === `human:${me.handle}`;
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

export function toneOf(req) {
  return req.status === Status.EXPIRED || req.status === Status.CANCELLED ? "warn" : "info";
}

/** The verdict after our respond was refused with already_resolved. */
export function alreadyResolvedText(req, me) {
  if (req && req.status === Status.EXPIRED) return "Too late: the request had already expired.";
  if (req && req.status === Status.CANCELLED) return "Too late: the agent cancelled the request.";
  if (req) return `Already resolved: ${describeResolution(req, me).replace(/\.$/, "").toLowerCase()}.`;
  return "Already resolved.";
}

/** The verdict after our respond was accepted. */
export function acceptedText(kind, reply) {
  const req = (reply && reply.request) || {};
  if (kind === Kind.APPROVAL) return req.status === Status.DECLINED ? "Accepted: rejected." : "Accepted: approved.";
  return "Accepted: your answer was recorded.";
}

/** The countdown's text for a deadline (epoch seconds) at `nowMs`. */
export function countdownText(deadline, nowMs) {
  if (typeof deadline !== "number") return "no deadline";
  const ms = deadline * 1000 - nowMs;
  return ms > 0 ? `expires in ${formatRemaining(ms)}` : "expiring…";
}

export function pageTitle(pending) {
  return pending > 0 ? `(${pending}) ${TITLE}` : TITLE;
}

// ---------------------------------------------------------------------------- the list

export class InboxList {
  /**
   * @param {object} deps
   * @param {Document} deps.doc
   * @param {HTMLElement} deps.listEl  the list of articles
   * @param {HTMLElement} deps.emptyEl "nothing is waiting" (hidden while there are items)
   * @param {HTMLElement} deps.countEl the pending count beside the Inbox tab
   * @param {() => object|null} deps.conn the open Connection, if any
   * @param {() => object|null} deps.me   {tenant, handle, role} of who is signed in
   * @param {(req: object) => void} [deps.notify] a new request arrived live
   * @param {(req: object) => void} [deps.resolved] a resolved request view to add to history
   * @param {(opId: string) => object|null} [deps.findResolved] look a request up in recent history
   * @param {() => number} [deps.now] wall clock in ms (when there is no connection)
   * @param {Function} [deps.setTimeout] / deps.clearTimeout
   */
  constructor(deps) {
    this.doc = deps.doc;
    this.listEl = deps.listEl;
    this.emptyEl = deps.emptyEl;
    this.countEl = deps.countEl;
    this.conn = deps.conn;
    this.me = deps.me;
    this.notify = deps.notify || (() => {});
    this.resolved = deps.resolved || (() => {});
    this.wallNow = deps.now || (() => Date.now());
    this.setTimeout = deps.setTimeout || ((fn, ms) => setTimeout(fn, ms));
    this.clearTimeout = deps.clearTimeout || ((id) => clearTimeout(id));
    /** op_id -> Item, pending and briefly-shown resolved ones */
    this.items = new Map();
    this.tombstones = new Tombstones();
    this.lastRefresh = 0;
  }

  now() {
    const conn = this.conn();
    return conn ? conn.hubNow() : this.wallNow();
  }

  clear() {
    for (const item of this.items.values()) this.clearTimeout(item.removeTimer);
    this.items.clear();
    this.tombstones.clear();
    this.listEl.replaceChildren();
  }

  pendingItems() {
    return [...this.items.values()].filter((it) => !it.resolved);
  }

  /** The unresolved item whose article holds `el`, if any. */
  itemAt(el) {
    const article = el && el.closest ? el.closest("article.item") : null;
    if (!article) return null;
    const item = this.items.get(article.dataset.opId);
    return item && !item.resolved ? item : null;
  }

  /** A full inbox snapshot (after connecting): add what is new, settle what is gone. */
  onSync(items) {
    const seen = new Set();
    for (const req of items) {
      if (!req || typeof req.op_id !== "string") continue;
      seen.add(req.op_id);
      this.onAdd(req, false);
    }
    for (const item of [...this.items.values()]) {
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
      this.tombstones.add(item.req.op_id);
      // After this sync event the connection reports "open"; ask history then.
      if (item.uncertain) this.setTimeout(() => this.settleUncertain(item), 0);
      else this.dropItem(item);
    }
    this.updateEmpty();
    this.updateTitle();
  }

  async settleUncertain(item) {
    // We sent an answer and lost the connection before the verdict: find out from history.
    item.uncertain = false;
    let req = null;
    try {
      const reply = await this.conn().request(T.HISTORY, { limit: 50 });
      req = (reply.items || []).find((r) => r.op_id === item.req.op_id) || null;
    } catch {
      // fall through
    }
    if (req) this.finalize(item, describeResolution(req, this.me(), { mine: item.sentValue }), toneOf(req));
    else this.finalize(item, "No longer pending.", "info");
  }

  /** A pending request to show (live: it just arrived, so notify). */
  onAdd(req, live) {
    if (!req || typeof req.op_id !== "string" || req.status !== Status.PENDING) return;
    if (this.tombstones.has(req.op_id)) return;
    const existing = this.items.get(req.op_id);
    if (existing) {
      if (!existing.resolved && existing.req.deadline !== req.deadline) {
        existing.req = req;
        existing.el.dataset.deadline = String(req.deadline ?? "");
        this.placeItem(existing);
      }
      return;
    }
    const item = this.build(req);
    this.items.set(req.op_id, item);
    this.placeItem(item);
    this.renderCountdown(item);
    this.updateEmpty();
    this.updateTitle();
    if (live) {
      try {
        this.notify(req);
      } catch {
        // A notification is a nicety; the list must not depend on it.
      }
    }
  }

  /** One request's item, or a placeholder if this request cannot be rendered (never throws). */
  build(req) {
    try {
      return buildItem(req, (item, answer) => this.respond(item, answer));
    } catch (err) {
      console.error("inbox: cannot render request", req.op_id, err);
      return brokenItem(req, err);
    }
  }

  onRemove(frame) {
    const req = frame.request && typeof frame.request === "object" ? frame.request : null;
    const opId = frame.op_id || (req && req.op_id);
    if (typeof opId !== "string") return;
    this.tombstones.add(opId);
    if (req) this.resolved(req);
    const item = this.items.get(opId);
    if (!item || item.resolved) return;
    if (item.sending) {
      // Our own respond is in flight: its reply says whether we won; wait for it.
      item.removedBy = req;
      return;
    }
    if (req) this.finalize(item, describeResolution(req, this.me()), toneOf(req));
    else this.finalize(item, "No longer pending.", "info");
  }

  placeItem(item) {
    const list = this.listEl;
    // Moving a node blurs whatever had focus inside it: put the focus back (half-typed answers).
    const active = this.doc.activeElement;
    const focused = item.el.contains(active) ? active : null;
    const before = [...this.items.values()]
      .filter((o) => o !== item && o.el.parentNode === list && compareRequests(item.req, o.req) < 0)
      .sort((a, b) => compareRequests(a.req, b.req))[0];
    if (before) {
      if (item.el.nextSibling !== before.el) list.insertBefore(item.el, before.el);
    } else if (item.el !== list.lastElementChild) {
      list.appendChild(item.el);
    }
    if (focused && this.doc.activeElement !== focused) focused.focus();
  }

  /** Show the verdict, take the controls away, and remove the item after a moment. */
  finalize(item, text, tone) {
    if (item.resolved) return;
    const hadFocus = item.el.contains(this.doc.activeElement);
    item.resolved = true;
    item.sending = false;
    this.tombstones.add(item.req.op_id);
    item.el.classList.add("resolved");
    item.el.setAttribute("aria-disabled", "true");
    setControlsDisabled(item, true);
    setVerdict(item, text, tone);
    item.countdownEl.textContent = "";
    if (hadFocus) this.focusNeighbour(item);
    this.updateEmpty();
    this.updateTitle();
    item.removeTimer = this.setTimeout(() => this.dropItem(item), BRIEF_MS);
  }

  /** Remove an item from the page now. */
  dropItem(item) {
    this.clearTimeout(item.removeTimer);
    if (item.el.contains(this.doc.activeElement)) this.focusNeighbour(item);
    item.el.remove();
    this.items.delete(item.req.op_id);
    this.updateEmpty();
    this.updateTitle();
  }

  focusNeighbour(item) {
    const others = this.pendingItems().filter((o) => o !== item).map((o) => o.el);
    const all = [...this.listEl.children];
    const idx = all.indexOf(item.el);
    const next = all.slice(idx + 1).find((e) => others.includes(e)) || all.slice(0, idx).reverse().find((e) => others.includes(e));
    if (next) next.focus();
    else this.listEl.focus();
  }

  updateEmpty() {
    this.emptyEl.hidden = this.items.size > 0;
  }

  updateTitle() {
    const n = this.pendingItems().length;
    const title = pageTitle(n);
    if (this.doc.title !== title) this.doc.title = title;
    this.countEl.textContent = n > 0 ? String(n) : "";
  }

  /** Send an answer and show what became of it. */
  async respond(item, { value, status = Status.ANSWERED }) {
    const conn = this.conn();
    if (item.sending || item.resolved || !conn) return;
    item.sending = true;
    item.sentValue = value;
    setControlsDisabled(item, true);
    setVerdict(item, "Sending…", "info");
    item.el.setAttribute("aria-busy", "true");
    try {
      const reply = await conn.request(T.RESPOND, { op_id: item.req.op_id, value, status });
      if (reply.request) this.resolved(reply.request);
      this.finalize(item, acceptedText(item.req.kind, reply), "ok");
    } catch (err) {
      const code = err && err.code;
      if (code === ErrorCode.ALREADY_RESOLVED) {
        item.sending = false;
        this.finalize(item, alreadyResolvedText(err.request || item.removedBy, this.me()), "warn");
      } else if (code === CONNECTION_LOST || code === TIMEOUT) {
        if (item.removedBy) {
          // The hub pushed the resolution before the socket dropped.
          this.finalize(item, describeResolution(item.removedBy, this.me(), { mine: value }), toneOf(item.removedBy));
        } else {
          item.uncertain = true;
          setVerdict(item, "Connection lost before the hub replied; checking when it is back…", "warn");
        }
      } else if (code === ErrorCode.NOT_FOUND) {
        item.sending = false;
        this.finalize(item, "This request no longer exists.", "warn");
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

  // -------------------------------------------------------------------------- countdowns

  renderCountdown(item) {
    const el = item.countdownEl;
    const deadline = item.req.deadline;
    const now = this.now();
    const text = countdownText(deadline, now);
    if (el.textContent !== text) el.textContent = text;
    if (typeof deadline !== "number") return;
    // isoTime is null for a deadline no Date can hold (toISOString would throw).
    const iso = isoTime(deadline);
    if (iso && el.getAttribute("datetime") !== iso) el.setAttribute("datetime", iso);
    el.classList.toggle("soon", deadline * 1000 - now < 30000);
  }

  /** Every TICK: countdowns, and a re-read if some request overstays its deadline. */
  tick() {
    let overdue = false;
    const now = this.now();
    for (const item of this.items.values()) {
      if (item.resolved) continue;
      this.renderCountdown(item);
      if (typeof item.req.deadline === "number" && now > item.req.deadline * 1000 + OVERDUE_MS) overdue = true;
    }
    if (overdue) this.refreshDeadlines();
  }

  // An open-ended deadline moves when the agent waits again, and the hub pushes nothing for
  // that; the expiry of a request that really expired arrives as inbox.remove within moments.
  // So a request still here well past its deadline has probably been extended: re-read the
  // inbox (at most every few seconds) for the current deadlines. Only deadlines are taken and
  // missing requests added; removals stay the pushes' job (a snapshot may predate a push).
  async refreshDeadlines() {
    const conn = this.conn();
    const t = this.wallNow();
    if (!conn || conn.state !== State.OPEN || t - this.lastRefresh < REFRESH_MS) return;
    this.lastRefresh = t;
    let reply;
    try {
      reply = await conn.request(T.INBOX, {});
    } catch {
      return;
    }
    for (const req of Array.isArray(reply.items) ? reply.items : []) this.onAdd(req, false);
  }
}
