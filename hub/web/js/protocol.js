// The wire vocabulary of the A2H protocol, mirrored from hub/protocol.py.
// tests/browser/test_protocol_constants.py pins these objects to the Python enums:
// change both together. Keep the `export const X = Object.freeze({ KEY: value, ... });`
// shape, one entry per line: the test reads this file with regular expressions.

export const PROTOCOL_VERSION = 1;

/** Frame `type` values, both directions. */
export const T = Object.freeze({
  // client -> hub
  ASK: "ask",
  WAIT: "wait",
  CANCEL: "cancel",
  UNWATCH: "unwatch",
  INBOX: "inbox",
  HISTORY: "history",
  RESPOND: "respond",
  PING: "ping",
  // hub -> client
  HELLO: "hello",
  OK: "ok",
  ERROR: "error",
  RESOLVED: "resolved",
  INBOX_ADD: "inbox.add",
  INBOX_REMOVE: "inbox.remove",
  RECONNECT: "reconnect",
  // durable runs (agent -> hub)
  RUN_BEGIN: "run.begin",
  RUN_CALL: "run.call",
  RUN_RESULT: "run.result",
  RUN_INTERRUPT: "run.interrupt",
  RUN_END: "run.end",
  RUN_LIST: "run.list",
  RUN_PENDING: "run.pending",
});

export const Status = Object.freeze({
  PENDING: "pending",
  ANSWERED: "answered",
  DECLINED: "declined",
  EXPIRED: "expired",
  CANCELLED: "cancelled",
});

export const TERMINAL = Object.freeze([
  Status.ANSWERED,
  Status.DECLINED,
  Status.EXPIRED,
  Status.CANCELLED,
]);

export const Kind = Object.freeze({
  QUESTION: "question",
  APPROVAL: "approval",
});

export const ErrorCode = Object.freeze({
  BAD_JSON: "bad_json",
  BINARY_FRAME: "binary_frame",
  UNKNOWN_TYPE: "unknown_type",
  INVALID: "invalid",
  TOO_LARGE: "too_large",
  UNAUTHORIZED: "unauthorized",
  FORBIDDEN: "forbidden",
  NOT_FOUND: "not_found",
  CONFLICT: "conflict",
  ALREADY_RESOLVED: "already_resolved",
  OVERLOADED: "overloaded",
  RATE_LIMITED: "rate_limited",
  LIMIT_EXCEEDED: "limit_exceeded",
  UNAVAILABLE: "unavailable",
  INTERNAL: "internal",
  TOO_MANY_SOCKETS: "too_many_sockets",
  TOO_MANY_PENDING: "too_many_pending",
  QUESTION_TOO_LARGE: "question_too_large",
  CONTEXT_TOO_LARGE: "context_too_large",
  TOO_MANY_CHOICES: "too_many_choices",
  JOURNAL_FULL: "journal_full",
});

export const CloseCode = Object.freeze({
  NORMAL: 1000,
  GOING_AWAY: 1001,
  POLICY: 1008,
  TOO_BIG: 1009,
  SERVICE_RESTART: 1012,
  // The connection's outbox overflowed: reconnect and re-read state from the hub.
  RESYNC: 4000,
  // The token was revoked or expired.
  REVOKED: 4001,
});
