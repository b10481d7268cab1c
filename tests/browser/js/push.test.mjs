// node --test: the Web Push half of hub/web/js/notifications.js, with fake browser APIs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { enablePush, itemFromHash, keyBytes, pushSupported, wantsEnableButton } from "../../../hub/web/js/notifications.js";

function browser({ permission = "default", grant = "granted", subscribed = false, subscribeFails = false } = {}) {
  const calls = [];
  let sub = subscribed ? { toJSON: () => ({ endpoint: "https://push/old", keys: {} }) } : null;
  const pushManager = {
    getSubscription: async () => sub,
    subscribe: async (opts) => {
      calls.push(["subscribe", opts]);
      if (subscribeFails) throw new Error("push service not available");
      sub = { toJSON: () => ({ endpoint: "https://push/new", keys: { p256dh: "k", auth: "a" } }) };
      return sub;
    },
  };
  const reg = { pushManager };
  const nav = { serviceWorker: { ready: Promise.resolve(reg), getRegistration: async () => reg } };
  const N = { permission, requestPermission: async () => { calls.push(["permission"]); N.permission = grant; return grant; } };
  const win = { PushManager: function PushManager() {}, Notification: N };
  const fetch_ = async (url, init = {}) => {
    calls.push(["fetch", url, init]);
    if (url === "/api/push/key") return { ok: true, status: 200, json: async () => ({ public_key: "AQID_-8" }) };
    return { ok: true, status: 201, json: async () => ({ id: "ep_1" }) };
  };
  return { nav, N, win, fetch_, calls };
}

test("a deep link names the item", () => {
  assert.equal(itemFromHash("#item=op%2F1"), "op/1");
  assert.equal(itemFromHash("#token=x"), null);
  assert.equal(itemFromHash(""), null);
});

test("the VAPID key is decoded from base64url", () => {
  assert.deepEqual([...keyBytes("AQID_-8")], [1, 2, 3, 255, 239]);
});

test("enabling subscribes with the hub's key and hands the subscription to the hub", async () => {
  const b = browser();
  assert.equal(pushSupported(b.nav, b.win), true);
  assert.equal(await wantsEnableButton({ Notification: b.N, nav: b.nav, win: b.win }), true);
  const result = await enablePush({ Notification: b.N, nav: b.nav, win: b.win, fetch_: b.fetch_ });
  assert.equal(result.ok, true);
  const sub = b.calls.find((c) => c[0] === "subscribe")[1];
  assert.equal(sub.userVisibleOnly, true);
  assert.deepEqual([...sub.applicationServerKey], [1, 2, 3, 255, 239]);
  const post = b.calls.find((c) => c[1] === "/api/push/subscriptions")[2];
  assert.equal(post.method, "POST");
  assert.equal(post.credentials, "same-origin");
  assert.deepEqual(JSON.parse(post.body), { endpoint: "https://push/new", keys: { p256dh: "k", auth: "a" } });
  assert.equal(await wantsEnableButton({ Notification: b.N, nav: b.nav, win: b.win }), false);
});

test("a refusal or a browser without a push service says so", async () => {
  const denied = browser({ grant: "denied" });
  const r1 = await enablePush({ Notification: denied.N, nav: denied.nav, win: denied.win, fetch_: denied.fetch_ });
  assert.equal(r1.ok, false);
  assert.match(r1.message, /blocked/);
  assert.equal(await wantsEnableButton({ Notification: denied.N, nav: denied.nav, win: denied.win }), false);
  const noPush = browser({ permission: "granted", subscribeFails: true });
  const r2 = await enablePush({ Notification: noPush.N, nav: noPush.nav, win: noPush.win, fetch_: noPush.fetch_ });
  assert.match(r2.message, /while the inbox is open/);
  assert.equal(noPush.calls.some((c) => c[1] === "/api/push/subscriptions"), false);
});
