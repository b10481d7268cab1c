// A minimal document for tests under node: what markdown.js, dom.js and the inbox modules
// (item.js, list.js, history.js) use — nodes, attributes, classList, dataset, events, focus,
// and simple selectors (tag, .class, tag.class, [attr], [attr='v'], comma lists).
// serialize() escapes text, so a test can tell a real element from text that looks like one.

class Node_ {
  constructor(doc) {
    this.ownerDocument = doc;
    this.childNodes = [];
    this.parentNode = null;
  }
  appendChild(child) {
    return this.insertBefore(child, null);
  }
  insertBefore(child, ref) {
    if (child instanceof Fragment) {
      for (const c of [...child.childNodes]) this.insertBefore(c, ref);
      child.childNodes = [];
      return child;
    }
    if (child.parentNode) child.remove();
    child.parentNode = this;
    const at = ref ? this.childNodes.indexOf(ref) : -1;
    if (at < 0) this.childNodes.push(child);
    else this.childNodes.splice(at, 0, child);
    return child;
  }
  append(...nodes) {
    for (const n of nodes) this.appendChild(typeof n === "string" ? new Text(this.ownerDocument, n) : n);
  }
  replaceChildren(...nodes) {
    for (const c of [...this.childNodes]) c.remove();
    this.append(...nodes);
  }
  remove() {
    if (!this.parentNode) return;
    const siblings = this.parentNode.childNodes;
    siblings.splice(siblings.indexOf(this), 1);
    this.parentNode = null;
  }
  contains(node) {
    for (let n = node; n; n = n.parentNode) if (n === this) return true;
    return false;
  }
  get nextSibling() {
    if (!this.parentNode) return null;
    const siblings = this.parentNode.childNodes;
    return siblings[siblings.indexOf(this) + 1] || null;
  }
  get children() {
    return this.childNodes.filter((c) => c instanceof Element);
  }
  get lastElementChild() {
    const els = this.children;
    return els[els.length - 1] || null;
  }
  /** Bit 4 (DOCUMENT_POSITION_FOLLOWING) if `other` comes after this node in document order. */
  compareDocumentPosition(other) {
    const order = [];
    let root = this;
    while (root.parentNode) root = root.parentNode;
    const walk = (n) => {
      order.push(n);
      n.childNodes.forEach(walk);
    };
    walk(root);
    return order.indexOf(other) > order.indexOf(this) ? 4 : 2;
  }
  get textContent() {
    return this.childNodes.map((c) => c.textContent).join("");
  }
  set textContent(v) {
    this.replaceChildren();
    this.appendChild(new Text(this.ownerDocument, String(v)));
  }
}

class Text extends Node_ {
  constructor(doc, data) {
    super(doc);
    this.data = data;
  }
  get textContent() {
    return this.data;
  }
}

class Fragment extends Node_ {}

const kebab = (prop) => prop.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** Does `el` match one simple selector: tag, .class, tag.class, [attr], [attr='v'] (and combinations)? */
function matchesOne(el, selector) {
  const m = /^([a-zA-Z][\w-]*)?((?:\.[\w-]+)*)((?:\[[\w-]+(?:=(?:'[^']*'|"[^"]*"|[\w-]*))?\])*)$/.exec(selector.trim());
  if (!m) throw new Error(`fake_dom: unsupported selector ${selector}`);
  if (m[1] && el.tagName !== m[1].toUpperCase()) return false;
  const classes = el.className.split(/\s+/);
  for (const c of m[2].split(".").slice(1)) if (!classes.includes(c)) return false;
  for (const a of m[3].matchAll(/\[([\w-]+)(?:=(?:'([^']*)'|"([^"]*)"|([\w-]*)))?\]/g)) {
    const v = el.getAttribute(a[1]);
    if (v === null) return false;
    const want = a[2] ?? a[3] ?? a[4];
    if (want !== undefined && v !== want) return false;
  }
  return true;
}

class Element extends Node_ {
  constructor(doc, tag) {
    super(doc);
    this.tagName = tag.toUpperCase();
    this.attributes = new Map();
    this.listeners = null; // made by the first addEventListener
    this.hidden = false;
    this.disabled = false;
    this.value = "";
  }
  // dataset and classList are made on first use: most elements never need them, and a
  // proxy and four closures per element would make the renderer's timing tests measure
  // this fake instead of the renderer.
  get dataset() {
    if (!this._dataset) {
      const el = this;
      this._dataset = new Proxy({}, {
        get: (_t, prop) => el.getAttribute(`data-${kebab(String(prop))}`) ?? undefined,
        set: (_t, prop, v) => {
          el.setAttribute(`data-${kebab(String(prop))}`, v);
          return true;
        },
      });
    }
    return this._dataset;
  }
  get classList() {
    if (!this._classList) {
      const el = this;
      this._classList = {
        contains: (c) => el.className.split(/\s+/).includes(c),
        add: (c) => {
          if (!el.classList.contains(c)) el.className = `${el.className} ${c}`.trim();
        },
        remove: (c) => {
          el.className = el.className.split(/\s+/).filter((x) => x && x !== c).join(" ");
        },
        toggle: (c, force) => {
          const on = force === undefined ? !el.classList.contains(c) : Boolean(force);
          if (on) el.classList.add(c);
          else el.classList.remove(c);
          return on;
        },
      };
    }
    return this._classList;
  }
  setAttribute(name, value) {
    if (/^on/i.test(name)) throw new Error(`event handler attribute ${name} set`);
    this.attributes.set(name, String(value));
  }
  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
  }
  removeAttribute(name) {
    this.attributes.delete(name);
  }
  hasAttribute(name) {
    return this.attributes.has(name);
  }
  get id() {
    return this.getAttribute("id") || "";
  }
  get className() {
    return this.getAttribute("class") || "";
  }
  set className(v) {
    this.setAttribute("class", v);
  }
  set innerHTML(_v) {
    throw new Error("innerHTML used");
  }
  addEventListener(type, fn) {
    if (!this.listeners) this.listeners = new Map();
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }
  dispatchEvent(event) {
    event.target = event.target || this;
    for (const fn of this.listeners?.get(event.type) || []) fn(event);
    return !event.defaultPrevented;
  }
  click() {
    if (!this.disabled) this.dispatchEvent(fakeEvent("click"));
  }
  requestSubmit() {
    this.dispatchEvent(fakeEvent("submit"));
  }
  focus() {
    this.ownerDocument.activeElement = this;
  }
  scrollIntoView() {}
  matches(selectors) {
    return selectors.split(",").some((sel) => matchesOne(this, sel));
  }
  closest(selectors) {
    for (let n = this; n instanceof Element; n = n.parentNode) if (n.matches(selectors)) return n;
    return null;
  }
  querySelectorAll(selectors) {
    const out = [];
    const walk = (n) => {
      for (const c of n.childNodes) {
        if (c instanceof Element) {
          if (c.matches(selectors)) out.push(c);
          walk(c);
        }
      }
    };
    walk(this);
    return out;
  }
  querySelector(selectors) {
    return this.querySelectorAll(selectors)[0] || null;
  }
}

/** An event a test can dispatch: {type, target, defaultPrevented, preventDefault()} plus `props`. */
export function fakeEvent(type, props = {}) {
  return {
    type,
    defaultPrevented: false,
    preventDefault() {
      this.defaultPrevented = true;
    },
    ...props,
  };
}

export class FakeDocument {
  constructor() {
    this.activeElement = null;
    this.title = "";
  }
  createElement(tag) {
    return new Element(this, tag);
  }
  createTextNode(data) {
    return new Text(this, data);
  }
  createDocumentFragment() {
    return new Fragment(this);
  }
}

const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

export function serialize(node) {
  if (node instanceof Text) return esc(node.data);
  const inner = node.childNodes.map(serialize).join("");
  if (node instanceof Fragment) return inner;
  const tag = node.tagName.toLowerCase();
  const attrs = [...node.attributes].map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
  if (tag === "br" || tag === "hr") return `<${tag}${attrs}>`;
  return `<${tag}${attrs}>${inner}</${tag}>`;
}

export function findAll(node, tag) {
  const out = [];
  const walk = (n) => {
    if (n instanceof Element && n.tagName === tag.toUpperCase()) out.push(n);
    for (const c of n.childNodes || []) walk(c);
  };
  walk(node);
  return out;
}
