// Text for values, answers, durations and countdowns. Pure functions: no DOM, no clock.

import { Status } from "./protocol.js";

/** A value as one line of text: strings as they are, anything else as JSON. */
export function formatValue(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

/** The answer of a resolved request, as history shows it. */
export function formatAnswer(req) {
  const v = req.value;
  if (req.status === Status.EXPIRED) return v == null ? "— (expired)" : `${formatValue(v)} (default, on expiry)`;
  if (req.status === Status.CANCELLED) return "— (cancelled)";
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if (typeof v.approved === "boolean") {
      const c = typeof v.comment === "string" && v.comment ? `: “${v.comment}”` : "";
      return `${v.approved ? "Approved" : "Rejected"}${c}`;
    }
    if (v.tool_call && typeof v.tool_call === "object") {
      return `Tool call ${v.tool_call.name}(${JSON.stringify(v.tool_call.arguments ?? {})})`;
    }
  }
  return formatValue(v);
}

/** How long a person took, from seconds. */
export function formatDuration(sec) {
  if (typeof sec !== "number" || !Number.isFinite(sec)) return "—";
  if (sec < 10) return `${sec.toFixed(1)} s`;
  if (sec < 60) return `${Math.round(sec)} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
  return `${Math.floor(sec / 3600)} h ${Math.floor((sec % 3600) / 60)} min`;
}

/** Time left, from milliseconds (at least "1s"). */
export function formatRemaining(ms) {
  // Rounded, not ceiled: the shown figure is within half a second of the truth.
  const s = Math.max(1, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 48 * 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d`;
}

/** A long text cut to `max` characters, saying how much was left out. */
export function clip(s, max = 20000) {
  const text = String(s);
  return text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text;
}

/** An ISO timestamp for epoch seconds, or null for a value no Date can hold. */
export function isoTime(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return null;
  const d = new Date(seconds * 1000);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}
