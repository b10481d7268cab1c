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
