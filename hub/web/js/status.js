// The connection indicator in the header: its words for each connection state and the
// "retry in N s" hint while disconnected.

import { State } from "./connection.js";

/** The indicator's text. `everOpen`: the page has been connected before (so it is a reconnect). */
export function connText(state, everOpen) {
  return {
    [State.IDLE]: "Not connected",
    [State.CONNECTING]: everOpen ? "Reconnecting…" : "Connecting…",
    [State.OPEN]: "Connected",
    [State.CLOSED]: "Disconnected — reconnecting",
    [State.SIGNED_OUT]: "Signed out",
  }[state];
}

/** "in 3 s", with the hub's last complaint before it when there is one. */
export function retryText(retryInMs, note) {
  const when = retryInMs == null ? "" : `in ${Math.ceil(retryInMs / 1000)} s`;
  return note ? `(${note}) ${when}` : when;
}
