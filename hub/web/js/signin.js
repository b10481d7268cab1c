// Signing in: a human token (from a #token= link or pasted) is exchanged for an HttpOnly
// session cookie; /api/me says who the cookie — or a token, as a bearer — belongs to.
// fetch comes in as an argument (default: the browser's), so node can test every answer.

const UNREACHABLE = "Can't reach the hub. Check that it is running, then try again.";

/** The token in a location hash ("#token=..."), or null. */
export function tokenFromHash(hash) {
  const h = String(hash || "").replace(/^#/, "");
  if (!h) return null;
  return new URLSearchParams(h).get("token");
}

/** Why a POST /api/session with this HTTP status failed, in words for the sign-in page. */
export function sessionError(status) {
  if (status === 401) return "That token was not accepted: it is mistyped, revoked or expired. Ask for a new sign-in link.";
  if (status === 403) return "That token does not belong to a person (it is an agent or admin token). Use a human token.";
  if (status === 429) return "Too many sign-in attempts. Wait a moment and try again.";
  return `Sign-in failed (HTTP ${status}).`;
}

/** Exchange a token for a session cookie: {ok: true} | {ok: false, message}. */
export async function postSession(token, fetch_ = globalThis.fetch) {
  let res;
  try {
    res = await fetch_("/api/session", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token }),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch {
    return { ok: false, message: UNREACHABLE };
  }
  if (res.ok) return { ok: true };
  return { ok: false, message: sessionError(res.status) };
}

/**
 * Who is signed in (by the cookie), or whom `token` belongs to (as a bearer; the cookie is
 * left alone). {ok: true, me: {tenant, handle, role}} | {ok: false, status} (0: unreachable).
 */
export async function fetchMe(fetch_ = globalThis.fetch, token = null) {
  const init = { credentials: token ? "omit" : "same-origin", cache: "no-store" };
  if (token) init.headers = { authorization: `Bearer ${token}` };
  try {
    const res = await fetch_("/api/me", init);
    if (!res.ok) return { ok: false, status: res.status };
    return { ok: true, me: await res.json() };
  } catch {
    return { ok: false, status: 0 };
  }
}

/** End the session: true if the hub was reached (the cookie is HttpOnly: only it can drop it). */
export async function endSession(fetch_ = globalThis.fetch) {
  try {
    await fetch_("/api/session", { method: "DELETE", credentials: "same-origin", cache: "no-store" });
    return true;
  } catch {
    return false;
  }
}

/** Are two /api/me answers the same person? */
export function sameAccount(a, b) {
  return Boolean(a && b) && a.tenant === b.tenant && a.handle === b.handle;
}

/** A person, named for a sentence: "takeru (tenant acme)". */
export function accountName(me) {
  return `${me.handle} (tenant ${me.tenant})`;
}

/**
 * What to do with a sign-in link's token, given who is signed in now (an /api/me answer for
 * the cookie) and whom the token belongs to (for the token as a bearer):
 *   "signin" — nobody (or no person) is signed in, the token is someone this page cannot
 *              name (the sign-in then says why), or it is the same person: sign in with it;
 *   "ask"    — a different person is signed in: ask before switching.
 */
export function linkDecision(current, incoming) {
  if (!current.ok || (current.me.role && current.me.role !== "human")) return "signin";
  if (!incoming.ok || (incoming.me.role && incoming.me.role !== "human")) return "signin";
  return sameAccount(current.me, incoming.me) ? "signin" : "ask";
}

/** The question asked before a link switches accounts. */
export function switchQuestion(current, incoming) {
  return {
    text: `This link signs in as ${accountName(incoming)}. You are signed in as ${accountName(current)}.`,
    switchLabel: `Switch to ${incoming.handle}`,
    stayLabel: `Stay signed in as ${current.handle}`,
  };
}
