// A minimal document for rendering tests under node: just what markdown.js uses.
// serialize() escapes text, so a test can tell a real element from text that looks like one.

class Node_ {
  constructor(doc) {
    this.ownerDocument = doc;
    this.childNodes = [];
    this.parentNode = null;
  }
  appendChild(child) {
    if (child instanceof Fragment) {
      for (const c of [...child.childNodes]) this.appendChild(c);
      child.childNodes = [];
      return child;
    }
    child.parentNode = this;
    this.childNodes.push(child);
    return child;
  }
  get textContent() {
    return this.childNodes.map((c) => c.textContent).join("");
  }
  set textContent(v) {
    this.childNodes = [new Text(this.ownerDocument, String(v))];
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

class Element extends Node_ {
  constructor(doc, tag) {
    super(doc);
    this.tagName = tag.toUpperCase();
    this.attributes = new Map();
  }
  setAttribute(name, value) {
    if (/^on/i.test(name)) throw new Error(`event handler attribute ${name} set`);
    this.attributes.set(name, String(value));
  }
  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
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
}

export class FakeDocument {
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
