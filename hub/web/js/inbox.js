// The inbox page: the entry point that ties the parts together and owns the page's lifecycle
// (sign in → connect → show → sign out). Each concern lives in its own module:
//
//   signin.js         tokens, the session cookie, who is signed in, switching accounts
//   list.js           the pending requests: live updates, order, answering, countdowns
//   item.js           one request on screen and its answer forms
//   history.js        the History view
//   keyboard.js       shortcuts
//   notifications.js  desktop notifications
//   status.js         the connection indicator
//   connection.js     the socket and reconnection
//
// Every request view shown comes from the hub; agent-written text (question, context,
// choices, schema titles) reaches the DOM only as text nodes or through markdown.js.

import { Connection, State } from "./connection.js";
import { T } from "./protocol.js";
import { InboxList, TITLE } from "./list.js";
import { HistoryView } from "./history.js";
import { keyboardHandler } from "./keyboard.js";
import { enablePush, itemFromHash, notify, registerWorker, wantsEnableButton } from "./notifications.js";
import { connText, retryText } from "./status.js";
import { endSession, fetchMe, linkDecision, postSession, switchQuestion, tokenFromHash } from "./signin.js";

const TICK_MS = 250;

const $ = (id) => document.getElementById(id);

const app = {
  conn: null,
  me: null, // {tenant, handle, role}
  view: "inbox",
  ticker: null,
  connTicker: null,
  everOpen: false,
  connNote: "",
  list: null,
  history: null,
  pendingSwitch: null, // the token of a sign-in link waiting for the person's decision
  focusPending: null, // the op_id of a deep link (#item=…) to focus once the inbox has it
};

app.list = new InboxList({
  doc: document,
  listEl: $("list"),
  emptyEl: $("empty"),
  countEl: $("pending-count"),
  conn: () => app.conn,
  me: () => app.me,
  notify: (req) => notify(req, { focusItem }),
  resolved: (req) => app.history.add(req),
});

app.history = new HistoryView({ listEl: $("history-list"), messageEl: $("history-message"), conn: () => app.conn });

function focusItem(opId) {
  const item = app.list.items.get(opId);
  if (item) {
    app.focusPending = null;
    showView("inbox");
    item.el.scrollIntoView({ block: "center" });
    item.el.focus();
  } else {
    app.focusPending = opId; // not listed yet: focus it when the inbox syncs
  }
}

// ============================================================================ sign-in

function clearHash() {
  history.replaceState(null, "", location.pathname + location.search);
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

/**
 * A sign-in link was opened. If someone else is signed in on this browser, ask before
 * switching: the inbox of the current person stays up behind the question, and "stay"
 * keeps it (the token is already out of the address bar and is forgotten).
 */
async function openLink(token) {
  const current = await fetchMe();
  const incoming = current.ok ? await fetchMe(fetch, token) : { ok: false, status: 0 };
  if (linkDecision(current, incoming) === "signin") {
    hideSwitch();
    await signInWith(token);
    return;
  }
  if (!app.me) startApp(current.me);
  askSwitch(token, current.me, incoming.me);
}

function askSwitch(token, current, incoming) {
  const q = switchQuestion(current, incoming);
  app.pendingSwitch = token;
  $("switch-text").textContent = q.text;
  $("switch-confirm").textContent = q.switchLabel;
  $("switch-cancel").textContent = q.stayLabel;
  $("switch").hidden = false;
  $("switch-cancel").focus();
}

function hideSwitch() {
  app.pendingSwitch = null;
  $("switch").hidden = true;
}

async function signOut() {
  stopApp();
  if (!(await endSession())) {
    // The cookie is HttpOnly; if the hub is down it stays until it expires. Say so.
    showSignIn("Signed out of this page, but the hub could not be reached to end the session.", true);
    return;
  }
  showSignIn("You are signed out.", true);
}

function showSignIn(message, neutral = false) {
  stopApp();
  hideSwitch();
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
  $("tenant").textContent = me.tenant ? String(me.tenant) : "";
  $("tenant-box").hidden = !me.tenant;
  updateNotificationButton();
  showView("inbox");
  app.list.updateEmpty();
  app.list.updateTitle();

  const conn = new Connection({ authCheck: stillSignedIn });
  app.conn = conn;
  conn.addEventListener("state", onState);
  conn.addEventListener("sync", (e) => {
    app.list.onSync(e.detail.items);
    if (app.focusPending) focusItem(app.focusPending);
  });
  conn.addEventListener(T.INBOX_ADD, (e) => app.list.onAdd(e.detail.request, true));
  conn.addEventListener(T.INBOX_REMOVE, (e) => app.list.onRemove(e.detail));
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
  app.ticker = setInterval(() => app.list.tick(), TICK_MS);
}

function stopApp() {
  if (app.conn) app.conn.stop();
  app.conn = null;
  app.me = null;
  clearInterval(app.ticker);
  clearInterval(app.connTicker);
  app.ticker = app.connTicker = null;
  app.list.clear();
  app.history.clear();
  app.everOpen = false;
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
  const text = connText(state, app.everOpen);
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
  if (state === State.OPEN && app.view === "history") app.history.load();
}

function updateRetry() {
  $("conn-retry").textContent = retryText(app.conn && app.conn.retryIn, app.connNote);
}

// ============================================================================ views

function showView(view) {
  app.view = view;
  $("inbox-view").hidden = view !== "inbox";
  $("history-view").hidden = view !== "history";
  $("show-inbox").setAttribute("aria-current", view === "inbox" ? "page" : "false");
  $("show-history").setAttribute("aria-current", view === "history" ? "page" : "false");
  if (view === "history") app.history.load();
}

async function updateNotificationButton() {
  $("enable-notifications").hidden = !(await wantsEnableButton());
}

// ============================================================================ wiring

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    if (token) signInWith(token);
  });
  $("sign-out").addEventListener("click", signOut);
  $("switch-confirm").addEventListener("click", () => {
    const token = app.pendingSwitch;
    hideSwitch();
    if (token) signInWith(token);
  });
  $("switch-cancel").addEventListener("click", hideSwitch);
  $("show-inbox").addEventListener("click", () => showView("inbox"));
  $("show-history").addEventListener("click", () => showView("history"));
  $("history-refresh").addEventListener("click", () => app.history.load());
  $("retry-now").addEventListener("click", () => app.conn && app.conn.reconnectNow());
  $("enable-notifications").addEventListener("click", async () => {
    try {
      const result = await enablePush();
      $("enable-notifications").title = result.message;
    } finally {
      updateNotificationButton();
    }
  });
  if (navigator.serviceWorker) {
    // A click on a push notification while this page is open (hub/web/sw.js).
    navigator.serviceWorker.addEventListener("message", (e) => {
      if (e.data && e.data.type === "a2h:focus" && e.data.op_id) focusItem(String(e.data.op_id));
    });
  }
  document.addEventListener("keydown", keyboardHandler({ doc: document, list: app.list, active: () => Boolean(app.conn) && app.view === "inbox" }));
  window.addEventListener("online", () => app.conn && app.conn.reconnectNow());
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && app.conn) app.conn.reconnectNow();
  });
  window.addEventListener("hashchange", () => {
    const item = itemFromHash(location.hash);
    if (item) {
      clearHash();
      focusItem(item);
      return;
    }
    const token = tokenFromHash(location.hash);
    if (token) {
      clearHash();
      openLink(token);
    }
  });
}

function boot() {
  wire();
  registerWorker(); // the offline shell and Web Push (hub/web/sw.js)
  const item = itemFromHash(location.hash);
  if (item) {
    // A notification's deep link: focus that request once the inbox has loaded.
    app.focusPending = item;
    clearHash();
  }
  const token = tokenFromHash(location.hash);
  if (token) {
    // Out of the address bar (and history) before anything else happens.
    clearHash();
    openLink(token);
  } else {
    enter();
  }
}

boot();
