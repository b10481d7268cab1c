// TEST ORACLE ONLY, never served: hub/web/js/markdown.js as it was before it was made linear
// (issue 15, defect 8). markdown_linear.test.mjs checks that the linear renderer builds the
// same tree as this one on many short random inputs, where this one's quadratic look-aheads
// cost nothing. If markdown.js changes what it renders on purpose, change this copy with it.
//
// A small, safe Markdown renderer for questions and context written by agents.
//
// Safety rule: agent text only ever reaches the page through createTextNode / textContent.
// No innerHTML, no attribute is built from text except a link's href, and only after
// safeHref() has parsed it as an absolute http:, https: or mailto: URL. Raw HTML in the
// source is plain text. A link with any other scheme (javascript:, data:, vbscript:, relative)
// renders as the literal source text.
//
// Supported: paragraphs (single newlines become line breaks), ATX headings, fenced code blocks,
// block quotes, bullet and numbered lists (nested by indentation), horizontal rules, and
// inline *em* / _em_, **strong** / __strong__, `code`, [text](url), <url> and bare URLs,
// backslash escapes. Everything else is text.
//
// parse() is pure (returns a tree of plain objects), render() turns the tree into DOM nodes
// with the document it is given, so node's test runner checks both without a browser.

const MAX_DEPTH = 8; // nesting of lists / quotes / emphasis beyond this is rendered flat
const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

/** The href to use for `url`, or null if it must not become a link. */
export function safeHref(url) {
  if (typeof url !== "string") return null;
  const trimmed = url.trim();
  // Only absolute URLs with an explicit safe scheme; browsers ignore tabs/newlines inside
  // schemes ("java\tscript:"), so refuse any control character or whitespace outright.
  if (!trimmed || /[\u0000-\u0020\u007f-\u009f]/.test(trimmed)) return null;
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(trimmed);
  if (!m || !SAFE_SCHEMES.has(m[1].toLowerCase() + ":")) return null;
  let parsed;
  try {
    parsed = new URL(trimmed);
  } catch {
    return null;
  }
  if (!SAFE_SCHEMES.has(parsed.protocol)) return null;
  if (parsed.protocol !== "mailto:" && !parsed.host) return null;
  return parsed.href;
}

// ----------------------------------------------------------------------------- blocks

const RE_FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const RE_HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RE_HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const RE_QUOTE = /^ {0,3}> ?(.*)$/;
const RE_ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;

function isBlank(line) {
  return /^\s*$/.test(line);
}

function startsBlock(line) {
  return RE_FENCE.test(line) || RE_HEADING.test(line) || RE_HR.test(line) || RE_QUOTE.test(line) || RE_ITEM.test(line);
}

/** Parse Markdown source into a list of block nodes. */
export function parse(src) {
  const text = String(src ?? "").replace(/\r\n?/g, "\n").replace(/\t/g, "    ");
  return parseBlocks(text.split("\n"), 0);
}

function parseBlocks(lines, depth) {
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = RE_FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = new RegExp(`^ {0,3}${fence[0] === "`" ? "`" : "~"}{${fence.length},}\\s*$`);
        if (close.test(lines[i])) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      blocks.push({ type: "code_block", lang: m[2] || "", text: body.join("\n") });
      continue;
    }
    if (RE_HR.test(line)) {
      blocks.push({ type: "hr" });
      i++;
      continue;
    }
    if ((m = RE_HEADING.exec(line))) {
      blocks.push({ type: "heading", level: m[1].length, children: parseInline(m[2] || "", depth) });
      i++;
      continue;
    }
    if (RE_QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !isBlank(lines[i]) && (m = RE_QUOTE.exec(lines[i]) || (!startsBlock(lines[i]) && [null, lines[i]]))) {
        body.push(m[1]);
        i++;
      }
      blocks.push(depth >= MAX_DEPTH ? paragraph(body, depth) : { type: "blockquote", children: parseBlocks(body, depth + 1) });
      continue;
    }
    if ((m = RE_ITEM.exec(line))) {
      const [list, next] = parseList(lines, i, depth);
      blocks.push(list);
      i = next;
      continue;
    }
    const body = [];
    while (i < lines.length && !isBlank(lines[i]) && (body.length === 0 || !startsBlock(lines[i]))) {
      body.push(lines[i]);
      i++;
    }
    blocks.push(paragraph(body, depth));
  }
  return blocks;
}

function paragraph(lines, depth) {
  return { type: "paragraph", children: parseInline(lines.map((l) => l.trim()).join("\n"), depth) };
}

function parseList(lines, start, depth) {
  const first = RE_ITEM.exec(lines[start]);
  const ordered = /\d/.test(first[2]);
  const indent = first[1].length;
  const list = { type: "list", ordered, start: ordered ? parseInt(first[2], 10) : 1, items: [] };
  let i = start;
  while (i < lines.length) {
    const m = RE_ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = indent + m[2].length + 1;
    const body = [m[3] || ""];
    i++;
    let sawBlank = false;
    while (i < lines.length) {
      const line = lines[i];
      if (isBlank(line)) {
        sawBlank = true;
        body.push("");
        i++;
        continue;
      }
      const lead = line.length - line.trimStart().length;
      if (lead >= contentIndent || (lead > indent && RE_ITEM.test(line))) {
        body.push(line.slice(Math.min(lead, contentIndent)));
      } else if (!sawBlank && !startsBlock(line)) {
        body.push(line.trim()); // lazy continuation of the item's paragraph
      } else {
        break;
      }
      sawBlank = false;
      i++;
    }
    while (body.length && isBlank(body[body.length - 1])) body.pop();
    list.items.push(depth >= MAX_DEPTH ? [paragraph(body, depth)] : parseBlocks(body, depth + 1));
    // A blank line between items keeps the list going only if another item follows.
    let j = i;
    while (j < lines.length && isBlank(lines[j])) j++;
    if (j < lines.length && j !== i) {
      const n = RE_ITEM.exec(lines[j]);
      if (n && n[1].length === indent && /\d/.test(n[2]) === ordered) i = j;
    }
  }
  return [list, i];
}

// ----------------------------------------------------------------------------- inline

const ESCAPABLE = "\\`*_{}[]()#+-.!<>|~\"'";
const RE_AUTOLINK = /^<((?:https?|mailto):[^\s<>]+)>/i;
const RE_BARE_URL = /^https?:\/\/[^\s<>]+/i;

/** Parse inline Markdown into a list of inline nodes. */
export function parseInline(src, depth = 0, inLink = false) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push({ type: "text", text: buf });
    buf = "";
  };
  const s = String(src);
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === "\\" && i + 1 < s.length && ESCAPABLE.includes(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      out.push({ type: "br" });
      i++;
      continue;
    }
    if (c === "`") {
      let n = 0;
      while (s[i + n] === "`") n++;
      const close = findBacktickRun(s, i + n, n);
      if (close >= 0) {
        flush();
        let code = s.slice(i + n, close).replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        out.push({ type: "code", text: code });
        i = close + n;
      } else {
        buf += "`".repeat(n);
        i += n;
      }
      continue;
    }
    if (c === "[" && !inLink) {
      const link = matchLink(s, i);
      if (link) {
        flush();
        const href = safeHref(link.url);
        if (href && depth < MAX_DEPTH) {
          out.push({ type: "link", href, children: parseInline(link.label, depth + 1, true) });
        } else {
          out.push({ type: "text", text: s.slice(i, link.end) });
        }
        i = link.end;
        continue;
      }
    }
    if (c === "<" && !inLink) {
      const m = RE_AUTOLINK.exec(s.slice(i));
      if (m) {
        const href = safeHref(m[1]);
        flush();
        if (href) out.push({ type: "link", href, children: [{ type: "text", text: m[1] }] });
        else out.push({ type: "text", text: m[0] });
        i += m[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && !inLink && (i === 0 || /[\s(]/.test(s[i - 1]))) {
      const m = RE_BARE_URL.exec(s.slice(i));
      if (m) {
        let url = m[0];
        // Trailing punctuation belongs to the sentence, not the URL; keep balanced parens.
        while (/[.,;:!?'"*_)\]]$/.test(url)) {
          if (url.endsWith(")") && (url.match(/\(/g) || []).length >= (url.match(/\)/g) || []).length) break;
          url = url.slice(0, -1);
        }
        const href = safeHref(url);
        if (href) {
          flush();
          out.push({ type: "link", href, children: [{ type: "text", text: url }] });
          i += url.length;
          continue;
        }
      }
    }
    if ((c === "*" || c === "_") && depth < MAX_DEPTH) {
      const em = matchEmphasis(s, i, c);
      if (em) {
        flush();
        out.push({ type: em.strong ? "strong" : "em", children: parseInline(em.inner, depth + 1, inLink) });
        i = em.end;
        continue;
      }
      // An unmatched run is literal text, all of it (so "**" does not become "*" + em).
      let n = 0;
      while (s[i + n] === c) n++;
      buf += c.repeat(n);
      i += n;
      continue;
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

function findBacktickRun(s, from, n) {
  let i = from;
  while (i < s.length) {
    const j = s.indexOf("`", i);
    if (j < 0) return -1;
    let k = 0;
    while (s[j + k] === "`") k++;
    if (k === n) return j;
    i = j + k;
  }
  return -1;
}

function matchLink(s, start) {
  // [label](url) — label may hold balanced brackets, url may hold balanced parens.
  let depth = 0;
  let i = start;
  for (; i < s.length; i++) {
    const c = s[i];
    if (c === "\\") {
      i++;
      continue;
    }
    if (c === "[") depth++;
    else if (c === "]") {
      depth--;
      if (depth === 0) break;
    } else if (c === "\n" && s[i + 1] === "\n") return null;
  }
  if (i >= s.length || s[i + 1] !== "(") return null;
  const label = s.slice(start + 1, i);
  let j = i + 2;
  while (s[j] === " ") j++;
  const urlStart = j;
  let parens = 0;
  for (; j < s.length; j++) {
    const c = s[j];
    if (c === "\\") {
      j++;
      continue;
    }
    if (/\s/.test(c)) break;
    if (c === "(") parens++;
    else if (c === ")") {
      if (parens === 0) break;
      parens--;
    }
  }
  const url = s.slice(urlStart, j);
  // Optional title: ("..." or '...'), ignored.
  let k = j;
  while (s[k] === " ") k++;
  const t = /^("[^"\n]*"|'[^'\n]*')\s*/.exec(s.slice(k));
  if (t) k += t[0].length;
  if (s[k] !== ")") return null;
  return { label, url, end: k + 1 };
}

function matchEmphasis(s, i, c) {
  const prev = i > 0 ? s[i - 1] : " ";
  // "_" inside a word (snake_case) is never emphasis.
  if (c === "_" && /[\p{L}\p{N}]/u.test(prev)) return null;
  const double = s[i + 1] === c;
  const tryDelim = (n) => {
    const open = i + n;
    if (open >= s.length || /\s/.test(s[open])) return null;
    let j = open + 1;
    while (j < s.length) {
      const k = s.indexOf(c, j);
      if (k < 0) return null;
      let runEnd = k;
      while (s[runEnd] === c) runEnd++;
      const runLen = runEnd - k;
      // A closing run: right after non-space; "*" closes on a run of 1 or 3+ (the last one
      // closes, "*a **b***"), "**" on 2+; "_" must not be followed by a letter or digit.
      const fits = n === 2 ? runLen >= 2 : runLen !== 2;
      const flanks = !/\s/.test(s[k - 1]) && (c !== "_" || !/[\p{L}\p{N}]/u.test(s[runEnd] ?? " "));
      if (s.slice(open, k).includes("\n\n")) return null;
      if (fits && flanks) return { strong: n === 2, inner: s.slice(open, runEnd - n), end: runEnd };
      j = runEnd;
    }
    return null;
  };
  return (double && tryDelim(2)) || tryDelim(1);
}

// ----------------------------------------------------------------------------- rendering

/**
 * Render Markdown source into a DocumentFragment.
 * @param {string} src
 * @param {Document} [doc] the document to build nodes with (default: the global one).
 */
export function render(src, doc = globalThis.document) {
  const frag = doc.createDocumentFragment();
  for (const block of parse(src)) frag.appendChild(renderBlock(block, doc));
  return frag;
}

/** Plain text of Markdown source (for aria-labels, notifications and titles). */
export function toPlainText(src) {
  const parts = [];
  const walkInline = (nodes) => {
    for (const n of nodes) {
      if (n.type === "text" || n.type === "code") parts.push(n.text);
      else if (n.type === "br") parts.push(" ");
      else if (n.children) walkInline(n.children);
    }
  };
  const walkBlocks = (blocks) => {
    for (const b of blocks) {
      if (b.type === "code_block") parts.push(b.text);
      else if (b.type === "list") b.items.forEach(walkBlocks);
      else if (b.type === "blockquote") walkBlocks(b.children);
      else if (b.children) walkInline(b.children);
      parts.push(" ");
    }
  };
  walkBlocks(parse(src));
  return parts.join("").replace(/\s+/g, " ").trim();
}

function el(doc, tag, className) {
  const e = doc.createElement(tag);
  if (className) e.className = className;
  return e;
}

function renderBlock(b, doc) {
  switch (b.type) {
    case "paragraph": {
      const p = el(doc, "p");
      appendInline(p, b.children, doc);
      return p;
    }
    case "heading": {
      // Headings inside a request stay below the page's own outline: a styled paragraph.
      const p = el(doc, "p", `md-heading md-h${b.level}`);
      const strong = el(doc, "strong");
      appendInline(strong, b.children, doc);
      p.appendChild(strong);
      return p;
    }
    case "code_block": {
      const pre = el(doc, "pre");
      const code = el(doc, "code");
      if (b.lang && /^[\w+-]{1,30}$/.test(b.lang)) code.className = `language-${b.lang}`;
      code.textContent = b.text;
      pre.appendChild(code);
      return pre;
    }
    case "blockquote": {
      const q = el(doc, "blockquote");
      for (const c of b.children) q.appendChild(renderBlock(c, doc));
      return q;
    }
    case "list": {
      const list = el(doc, b.ordered ? "ol" : "ul");
      if (b.ordered && b.start !== 1) list.setAttribute("start", String(b.start));
      for (const item of b.items) {
        const li = el(doc, "li");
        // A one-paragraph item renders without the <p> (tight list).
        if (item.length === 1 && item[0].type === "paragraph") appendInline(li, item[0].children, doc);
        else for (const c of item) li.appendChild(renderBlock(c, doc));
        list.appendChild(li);
      }
      return list;
    }
    case "hr":
      return el(doc, "hr");
    default:
      return doc.createTextNode("");
  }
}

function appendInline(parent, nodes, doc) {
  for (const n of nodes) {
    switch (n.type) {
      case "text":
        parent.appendChild(doc.createTextNode(n.text));
        break;
      case "br":
        parent.appendChild(el(doc, "br"));
        break;
      case "code": {
        const c = el(doc, "code");
        c.textContent = n.text;
        parent.appendChild(c);
        break;
      }
      case "em":
      case "strong": {
        const e = el(doc, n.type);
        appendInline(e, n.children, doc);
        parent.appendChild(e);
        break;
      }
      case "link": {
        const href = safeHref(n.href); // checked again at the sink
        if (!href) {
          appendInline(parent, n.children, doc);
          break;
        }
        const a = el(doc, "a");
        a.setAttribute("href", href);
        a.setAttribute("target", "_blank");
        a.setAttribute("rel", "noopener noreferrer nofollow");
        appendInline(a, n.children, doc);
        parent.appendChild(a);
        break;
      }
      default:
        break;
    }
  }
}
