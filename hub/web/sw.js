// The inbox's service worker: an offline shell, Web Push notifications, and answers from a
// notification's buttons.
//
// - Pages and the inbox's files come from the network first (the hub is live data); when
//   the hub cannot be reached, a navigation gets the cached offline shell (offline.html),
//   which says it is reconnecting and opens the inbox once the hub answers.
// - A push (JSON from hub/notify/webpush.py) shows one notification: a request (with its
//   answers as actions: approve/reject, or a question's two choices) or a summary.
// - Clicking the notification focuses an open inbox at the item (or opens one at
//   /#item=<op_id>); clicking an action POSTs the answer to /api/requests/{op_id}/respond
//   with the session cookie — the page's own rules: same origin, cookie, Origin header.

const SHELL = "a2h-shell-v1";
const SHELL_FILES = ["/offline.html", "/css/inbox.css", "/js/offline.js", "/favicon.svg",
  "/icon-192.png", "/manifest.webmanifest"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SHELL).then((c) => c.addAll(SHELL_FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) if (key !== SHELL) await caches.delete(key);
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  if (req.method !== "GET" || new URL(req.url).origin !== self.location.origin) return;
  if (req.mode === "navigate") {
    // Never from the HTTP cache: a page that loads without the hub could only fail.
    const live = fetch(req.url, { cache: "no-store", credentials: "same-origin" });
    event.respondWith(live.catch(async () => (await caches.match("/offline.html")) || Response.error()));
    return;
  }
  if (SHELL_FILES.includes(new URL(req.url).pathname)) {
    event.respondWith(fetch(req).catch(async () => (await caches.match(req)) || Response.error()));
  }
});

// ---------------------------------------------------------------------------- push

/** The options of the notification for one push message. */
function notificationOf(msg) {
  const actions = Array.isArray(msg.actions) ? msg.actions : [];
  return {
    body: String(msg.body || ""),
    tag: String(msg.tag || "a2h"),
    icon: "/icon-192.png",
    badge: "/icon-192.png",
    renotify: true,
    requireInteraction: msg.type === "request",
    data: { url: String(msg.url || "/"), op_id: msg.op_id || null, answers: Object.fromEntries(actions.map((a) => [a.action, a.answer])) },
    actions: actions.map((a) => ({ action: a.action, title: String(a.title) })),
  };
}

async function showPush(msg) {
  await self.registration.showNotification(String(msg.title || "A2H Inbox"), notificationOf(msg));
}

self.addEventListener("push", (event) => {
  let msg;
  try {
    msg = event.data ? event.data.json() : {};
  } catch {
    msg = { title: "A2H Inbox", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(showPush(msg));
});

/** Focus an open inbox at ``url`` (it scrolls to the item), or open one there. */
async function openAt(url, opId) {
  const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const win of wins) {
    if (new URL(win.url).origin !== self.location.origin) continue;
    win.postMessage({ type: "a2h:focus", op_id: opId });
    try {
      return await win.focus();
    } catch {
      return win; // focusing needs a user gesture on some platforms; the message was sent
    }
  }
  return self.clients.openWindow(url);
}

/** Answer from the notification: the same call, cookie and origin as the page's. */
async function answer(opId, body) {
  const res = await fetch(`/api/requests/${encodeURIComponent(opId)}/respond`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return res.ok;
}

/** What a click on ``notification`` (or on its ``action`` button) does. */
async function onClick(notification, action) {
  const data = notification.data || {};
  notification.close();
  const body = action && data.answers ? data.answers[action] : null;
  if (body && data.op_id) {
    let ok = false;
    try {
      ok = await answer(data.op_id, body);
    } catch {
      ok = false;
    }
    if (ok) return "answered";
    // Not accepted (signed out, already answered, offline): show the item instead.
  }
  await openAt(data.url || "/", data.op_id);
  return "opened";
}

self.addEventListener("notificationclick", (event) => {
  event.waitUntil(onClick(event.notification, event.action));
});

// For tests (tests/browser/test_push.py), which drive these through the DevTools protocol.
self.a2h = { onClick, showPush, notificationOf };
