// Tiny DOM helpers. Text always goes in through text nodes; attributes through setAttribute.
// Event handlers are functions from our own code (props named on*), never strings.

/**
 * h("button", {class: "x", type: "button", onclick: fn}, "text", childNode, [more])
 * Props with null/undefined/false values are skipped; true sets an empty attribute.
 */
export function h(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = String(v);
    else if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (k.startsWith("on")) throw new TypeError(`event handler ${k} must be a function`);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else parent.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

let counter = 0;
/** A document-unique id for label/for and aria-describedby pairs. */
export function uid(prefix = "id") {
  counter += 1;
  return `${prefix}-${counter}`;
}
