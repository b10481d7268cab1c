// node --test: hub/web/js/notifications.js with a fake Notification API.
import { test } from "node:test";
import assert from "node:assert/strict";
import { notificationFor, notify, permissionDecided } from "../../../hub/web/js/notifications.js";
import { pending } from "./inbox_env.mjs";

function fakeApi(permission) {
  const shown = [];
  class N {
    constructor(title, options) {
      this.title = title;
      this.options = options;
      this.closed = false;
      shown.push(this);
    }
    close() {
      this.closed = true;
    }
  }
  N.permission = permission;
  return { N, shown };
}

const background = { visibilityState: "hidden", hasFocus: () => false };
const front = { visibilityState: "visible", hasFocus: () => true };

test("the button shows only while the choice is open", () => {
  assert.equal(permissionDecided(undefined), true);
  assert.equal(permissionDecided(fakeApi("default").N), false);
  assert.equal(permissionDecided(fakeApi("granted").N), true);
  assert.equal(permissionDecided(fakeApi("denied").N), true);
});

test("a notification only when granted and the page is not in front; a click focuses the request", () => {
  const req = pending("op1", { kind: "approval", from: "agent:deploy", question: "Ship **v2**?\n\n" + "x".repeat(500) });
  const focused = [];
  let winFocused = false;
  const win = { focus: () => { winFocused = true; } };
  const focusItem = (id) => focused.push(id);

  let api = fakeApi("denied");
  assert.equal(notify(req, { focusItem, Notification: api.N, win, doc: background }), null);
  api = fakeApi("granted");
  assert.equal(notify(req, { focusItem, Notification: api.N, win, doc: front }), null);
  const n = notify(req, { focusItem, Notification: api.N, win, doc: background });
  assert.equal(n.title, "Approval request from agent:deploy");
  assert.equal(n.options.tag, "op1");
  assert.ok(n.options.body.startsWith("Ship v2? x"));
  assert.equal(n.options.body.length, 240);
  n.onclick();
  assert.deepEqual(focused, ["op1"]);
  assert.ok(winFocused && n.closed);
  assert.equal(notificationFor(pending("q", { from: "" })).title, "Question from an agent");
});

test("a platform that refuses page notifications is not an error", () => {
  class Refusing {
    constructor() {
      throw new TypeError("Illegal constructor");
    }
  }
  Refusing.permission = "granted";
  assert.equal(notify(pending("a"), { focusItem() {}, Notification: Refusing, win: {}, doc: background }), null);
});
