// node --test: hub/web/js/signin.js — tokens from links, the session calls, and when a link
// must ask before it switches accounts (issue 15, defect 10).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  accountName, endSession, fetchMe, linkDecision, postSession, sameAccount, sessionError, switchQuestion, tokenFromHash,
} from "../../../hub/web/js/signin.js";

/** A fetch that records its calls and answers with `status` and `body` (or throws: unreachable). */
function fakeFetch(status, body = {}) {
  const calls = [];
  const f = async (url, init) => {
    calls.push({ url, init });
    if (status === 0) throw new TypeError("Failed to fetch");
    return { ok: status >= 200 && status < 300, status, json: async () => body };
  };
  f.calls = calls;
  return f;
}

test("tokenFromHash", () => {
  assert.equal(tokenFromHash("#token=a2h_hu_x"), "a2h_hu_x");
  assert.equal(tokenFromHash("token=abc&x=1"), "abc");
  assert.equal(tokenFromHash("#other=1"), null);
  assert.equal(tokenFromHash(""), null);
  assert.equal(tokenFromHash(undefined), null);
});

test("postSession: every answer becomes words for the sign-in page", async () => {
  const ok = fakeFetch(204);
  assert.deepEqual(await postSession("tok", ok), { ok: true });
  assert.equal(ok.calls[0].url, "/api/session");
  assert.equal(ok.calls[0].init.method, "POST");
  assert.deepEqual(JSON.parse(ok.calls[0].init.body), { token: "tok" });
  assert.match((await postSession("t", fakeFetch(401))).message, /not accepted/);
  assert.match((await postSession("t", fakeFetch(403))).message, /does not belong to a person/);
  assert.match((await postSession("t", fakeFetch(429))).message, /Too many/);
  assert.match((await postSession("t", fakeFetch(500))).message, /HTTP 500/);
  assert.match((await postSession("t", fakeFetch(0))).message, /Can't reach the hub/);
  assert.equal(sessionError(418), "Sign-in failed (HTTP 418).");
});

test("fetchMe by cookie, or for a token as a bearer without touching the cookie", async () => {
  const me = { tenant: "acme", handle: "ann", role: "human" };
  const f = fakeFetch(200, me);
  assert.deepEqual(await fetchMe(f), { ok: true, me });
  assert.equal(f.calls[0].init.credentials, "same-origin");
  assert.equal(f.calls[0].init.headers, undefined);
  await fetchMe(f, "a2h_hu_other");
  assert.equal(f.calls[1].init.credentials, "omit");
  assert.equal(f.calls[1].init.headers.authorization, "Bearer a2h_hu_other");
  assert.deepEqual(await fetchMe(fakeFetch(401)), { ok: false, status: 401 });
  assert.deepEqual(await fetchMe(fakeFetch(0)), { ok: false, status: 0 });
  assert.equal(await endSession(fakeFetch(204)), true);
  assert.equal(await endSession(fakeFetch(0)), false);
});

test("a link asks first only when it belongs to another person than the one signed in", () => {
  const ann = { ok: true, me: { tenant: "acme", handle: "ann", role: "human" } };
  const annElsewhere = { ok: true, me: { tenant: "other", handle: "ann", role: "human" } };
  const bob = { ok: true, me: { tenant: "acme", handle: "bob", role: "human" } };
  const agent = { ok: true, me: { tenant: "acme", handle: "ci", role: "agent" } };
  const nobody = { ok: false, status: 401 };
  assert.equal(linkDecision(nobody, bob), "signin");
  assert.equal(linkDecision({ ok: false, status: 0 }, bob), "signin");
  assert.equal(linkDecision(ann, ann), "signin");
  assert.equal(linkDecision(ann, bob), "ask");
  assert.equal(linkDecision(ann, annElsewhere), "ask", "same handle in another tenant is another person");
  assert.equal(linkDecision(ann, nobody), "signin", "a bad link: the sign-in page says why");
  assert.equal(linkDecision(ann, agent), "signin", "not a person's token: the sign-in page says why");
  assert.equal(linkDecision(agent, bob), "signin");
  assert.equal(sameAccount(ann.me, annElsewhere.me), false);
  assert.equal(sameAccount(null, ann.me), false);
});

test("the question names both accounts with their tenants", () => {
  const q = switchQuestion({ tenant: "acme", handle: "ann" }, { tenant: "other", handle: "bob" });
  assert.equal(q.text, "This link signs in as bob (tenant other). You are signed in as ann (tenant acme).");
  assert.equal(q.switchLabel, "Switch to bob");
  assert.equal(q.stayLabel, "Stay signed in as ann");
  assert.equal(accountName({ tenant: "t", handle: "h" }), "h (tenant t)");
});
