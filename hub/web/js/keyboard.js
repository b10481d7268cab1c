// Keyboard shortcuts in the inbox: j/k move between requests, 1–9 choose, a/r approve or
// reject, Ctrl+Enter (or Cmd+Enter) sends the form being typed in. keyAction() decides, from
// the key and where it was pressed, what to do; onKeyDown() does it.

import { Kind } from "./protocol.js";

/** Is `el` somewhere one types text (so plain letters are not shortcuts there)? */
export function isTextField(el) {
  if (!el || !el.matches) return false;
  if (el.matches("textarea, select, [contenteditable=''], [contenteditable='true']")) return true;
  return el.matches("input") && !["checkbox", "radio", "button", "submit", "reset"].includes(el.type);
}

/**
 * What a key press means, or null.
 * @param {{key: string, ctrlKey?: boolean, metaKey?: boolean, altKey?: boolean}} e
 * @param {{inText: boolean, kind: string|null}} where — in a text field? the kind of the
 *   request that has focus (null: none)
 * @returns {{type: "submit"} | {type: "move", step: number} | {type: "choose", index: number}
 *   | {type: "approve"} | {type: "reject"} | null}
 */
export function keyAction(e, { inText, kind }) {
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter") return { type: "submit" };
  if (inText || e.ctrlKey || e.metaKey || e.altKey) return null;
  if (e.key === "j" || e.key === "k") return { type: "move", step: e.key === "j" ? 1 : -1 };
  if (kind === null) return null;
  if (/^[1-9]$/.test(e.key)) return { type: "choose", index: Number(e.key) - 1 };
  if (kind === Kind.APPROVAL && (e.key === "a" || e.key === "r")) return { type: e.key === "a" ? "approve" : "reject" };
  return null;
}

/**
 * The keydown handler for the inbox.
 * @param {object} deps
 * @param {Document} deps.doc
 * @param {import("./list.js").InboxList} deps.list
 * @param {() => boolean} deps.active — is the inbox showing (signed in, on the Inbox view)?
 */
export function keyboardHandler({ doc, list, active }) {
  return (e) => {
    if (e.defaultPrevented || e.isComposing || !active()) return;
    const target = e.target;
    const item = list.itemAt(doc.activeElement);
    const action = keyAction(e, { inText: isTextField(target), kind: item ? item.req.kind : null });
    if (!action) return;
    if (action.type === "submit") {
      const form = target && target.closest ? target.closest("form") : null;
      if (form && form.closest("article.item")) {
        e.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    if (action.type === "move") {
      e.preventDefault();
      moveFocus(doc, list, action.step);
      return;
    }
    const b = action.type === "choose" ? item.choiceButtons[action.index] : action.type === "approve" ? item.approveBtn : item.rejectBtn;
    if (b && !b.disabled) {
      e.preventDefault();
      b.click();
    }
  };
}

/** Focus the next (step 1) or previous (-1) pending request, in page order. */
export function moveFocus(doc, list, step) {
  const els = list
    .pendingItems()
    .map((it) => it.el)
    .filter((el) => el.parentNode);
  // DOCUMENT_POSITION_FOLLOWING
  els.sort((a, b) => (a.compareDocumentPosition(b) & 4 ? -1 : 1));
  if (!els.length) return;
  const active = doc.activeElement;
  const cur = active && active.closest ? active.closest("article.item") : null;
  let idx = els.indexOf(cur);
  if (idx < 0) idx = step > 0 ? -1 : els.length;
  const next = els[Math.max(0, Math.min(els.length - 1, idx + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}
