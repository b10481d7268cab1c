// Desktop notifications for requests that arrive while the page is in the background.
// The browser's Notification API, window and document come in as arguments so node can test
// the decisions with fakes.

import { toPlainText } from "./markdown.js";
import { kindLabel } from "./item.js";

const BODY_CHARS = 240;

/** Should the "Enable notifications" button be hidden? (unsupported, or already decided) */
export function permissionDecided(Notification_ = globalThis.Notification) {
  return !Notification_ || Notification_.permission !== "default";
}

/** Title and options of the notification for a request. */
export function notificationFor(req) {
  return {
    title: `${kindLabel(req)} from ${req.from || "an agent"}`,
    options: { body: toPlainText(req.question).slice(0, BODY_CHARS), tag: req.op_id },
  };
}

/**
 * Notify about a new request, if allowed and the page is not in front.
 * @param {object} req
 * @param {object} env
 * @param {(opId: string) => void} env.focusItem — bring that request into view
 * @param {Function} [env.Notification] @param {Window} [env.win] @param {Document} [env.doc]
 * @returns the Notification, or null when none was shown
 */
export function notify(req, { focusItem, Notification: N = globalThis.Notification, win = globalThis.window, doc = globalThis.document }) {
  if (!N || N.permission !== "granted") return null;
  if (doc.visibilityState === "visible" && doc.hasFocus()) return null;
  const { title, options } = notificationFor(req);
  try {
    const n = new N(title, options);
    n.onclick = () => {
      win.focus();
      focusItem(req.op_id);
      n.close();
    };
    return n;
  } catch {
    // Some platforms only allow notifications from a service worker; the title still counts.
    return null;
  }
}

// ============================================================================ Web Push
// "Enable notifications" subscribes this browser through the Push API with the hub's VAPID
// key; the hub then pushes new requests even when no inbox tab is open (hub/web/sw.js shows
// them). navigator, Notification and fetch come in as arguments so node can test them.

/** Can this browser receive pushes (service worker + Push API + notifications)? */
export function pushSupported(nav = globalThis.navigator, win = globalThis) {
  return Boolean(nav && nav.serviceWorker && win && win.PushManager && win.Notification);
}

/** A base64url string as bytes (what PushManager.subscribe takes as applicationServerKey). */
export function keyBytes(b64url) {
  const b64 = String(b64url).replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

/** The op_id of an item deep link ("#item=<op_id>", as in notifications), or null. */
export function itemFromHash(hash) {
  const h = String(hash || "").replace(/^#/, "");
  if (!h) return null;
  return new URLSearchParams(h).get("item");
}

/** Register the inbox's service worker; null when the browser has none (or refuses it). */
export async function registerWorker(nav = globalThis.navigator) {
  if (!nav || !nav.serviceWorker) return null;
  try {
    return await nav.serviceWorker.register("/sw.js", { scope: "/" });
  } catch {
    return null;
  }
}

/** Is this browser subscribed to pushes already? */
export async function pushSubscribed(nav = globalThis.navigator) {
  if (!nav || !nav.serviceWorker) return false;
  try {
    const reg = await nav.serviceWorker.getRegistration("/");
    return Boolean(reg && reg.pushManager && (await reg.pushManager.getSubscription()));
  } catch {
    return false;
  }
}

/** Should "Enable notifications" show? Not yet decided, or allowed but this browser is
 *  not subscribed to pushes while it could be. */
export async function wantsEnableButton({ Notification: N = globalThis.Notification, nav = globalThis.navigator, win = globalThis } = {}) {
  if (!N || N.permission === "denied") return false;
  if (N.permission === "default") return true;
  return pushSupported(nav, win) && !(await pushSubscribed(nav));
}

/**
 * Ask for permission, subscribe this browser with the hub's VAPID key, and give the hub
 * the subscription (cookie-authenticated, same origin, like every call of the page).
 * @returns {Promise<{ok: boolean, message: string}>}
 */
export async function enablePush({ Notification: N = globalThis.Notification, nav = globalThis.navigator, win = globalThis, fetch_ = globalThis.fetch } = {}) {
  if (!N) return { ok: false, message: "This browser cannot show notifications." };
  const permission = N.permission === "granted" ? "granted" : await N.requestPermission();
  if (permission !== "granted") return { ok: false, message: "Notifications are blocked for this site (see the browser's site settings)." };
  if (!pushSupported(nav, win)) return { ok: true, message: "Notifications show while the inbox is open (this browser has no Web Push)." };
  try {
    const reg = await nav.serviceWorker.ready;
    const keyRes = await fetch_("/api/push/key", { credentials: "same-origin" });
    if (!keyRes.ok) return { ok: true, message: `Notifications show while the inbox is open (the hub has no Web Push: HTTP ${keyRes.status}).` };
    const { public_key: key } = await keyRes.json();
    let sub = await reg.pushManager.getSubscription();
    if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
    const res = await fetch_("/api/push/subscriptions", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(sub.toJSON()),
    });
    if (!res.ok) return { ok: false, message: `The hub did not take the subscription (HTTP ${res.status}).` };
    return { ok: true, message: "Notifications are on, also when the inbox is closed." };
  } catch (err) {
    return { ok: true, message: `Notifications show while the inbox is open (push subscription failed: ${err && err.message ? err.message : err}).` };
  }
}
