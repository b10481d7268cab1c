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

const RE_FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})/;
const RE_HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RE_HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const RE_QUOTE = /^ {0,3}> ?(.*)$/;
const RE_ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;

function isBlank(line) {
  return /^\s*$/.test(line);
}

/**
 * A fence line: 3+ backticks or tildes, then an info string with no backtick in it.
 * Returns [fence, lang] or null. (Not one regex: "[^`]*$" after "\s*([^`\s]*)" backtracks
 * quadratically on a long info string that ends with a backtick.)
 */
function matchFence(line) {
  const m = RE_FENCE_OPEN.exec(line);
  if (!m) return null;
  const rest = line.slice(m[0].length);
  if (rest.includes("`")) return null;
  return [m[1], /^\s*([^`\s]*)/.exec(rest)[1]];
}

function startsBlock(line) {
  return matchFence(line) !== null || RE_HEADING.test(line) || RE_HR.test(line) || RE_QUOTE.test(line) || RE_ITEM.test(line);
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
    if ((m = matchFence(line))) {
      const fence = m[0];
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
      blocks.push({ type: "code_block", lang: m[1] || "", text: body.join("\n") });
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
//
// Linear time. A naive inline parser looks ahead for a closer at every opener ("*", "[",
// "`", "(") and, when there is none, scans to the end of the text each time: 64 KB of "**a "
// took 19 s. Here every such question ("the first run of two backticks after p", "the
// bracket that closes this one", "the first '*' run that can close emphasis after p") is
// answered from tables built once per string (Scan below) in O(1) or O(log n), and a failed
// look-ahead is remembered, so no character is scanned more than a few times per nesting
// level (and nesting is capped at MAX_DEPTH).

const ESCAPABLE = "\\`*_{}[]()#+-.!<>|~\"'";
const RE_AUTOLINK = /<((?:https?|mailto):[^\s<>]+)>/iy;
const RE_BARE_URL = /https?:\/\/[^\s<>]+/iy;
const RE_TITLE = /("[^"\n]*"|'[^'\n]*')\s*/y;
const RE_SPACE = /\s/;
const MAX_BARE_URL_TRIES = 8; // failed bare URLs in one word before the rest of it is text
const RE_WORD_CHAR = /[\p{L}\p{N}]/u;

/** Index of the first element of the sorted array `arr` that is >= x (arr.length if none). */
function firstAtLeast(arr, x) {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Look-ahead tables for one string, each built on first use. */
class Scan {
  constructor(s) {
    this.s = s;
    this.runs = new Map(); // char -> {starts, ends}: maximal runs of that char
    this.closers = new Map(); // "*1", "*2", "_1", "_2" -> per run: first closing run from there
    this.ticks = null; // run length -> sorted starts of backtick runs of exactly that length
    this.breaks = null; // sorted positions of "\n\n"
    this.brackets = new Map(); // "[" position -> its "]" position, or -1
    this.parens = new Map(); // "(" position -> where a URL scan started right after it stops
    this.titles = new Map(); // position -> end of a link title there, or -1
    this.bareUrlWordEnd = -1; // where the word of the last failed bare URL ends ...
    this.bareUrlFailures = 0; // ... how many failed in it ...
    this.noBareUrlBefore = -1; // ... and, after too many, no bare URL starts before this
  }

  runsOf(c) {
    let r = this.runs.get(c);
    if (!r) {
      const { s } = this;
      const starts = [];
      const ends = [];
      for (let i = s.indexOf(c); i >= 0; i = s.indexOf(c, i)) {
        starts.push(i);
        while (s[i] === c) i++;
        ends.push(i);
      }
      r = { starts, ends };
      this.runs.set(c, r);
    }
    return r;
  }

  /** Can the run s[k, end) close emphasis opened by n times c? */
  closes(c, n, k, end) {
    const len = end - k;
    const fits = n === 2 ? len >= 2 : len !== 2;
    return fits && !RE_SPACE.test(this.s[k - 1]) && (c !== "_" || !RE_WORD_CHAR.test(this.s[end] ?? " "));
  }

  /** next[r]: the first maximal run at index >= r that closes (c, n), or -1. */
  closersOf(c, n) {
    const key = c + n;
    let next = this.closers.get(key);
    if (!next) {
      const { starts, ends } = this.runsOf(c);
      next = new Int32Array(starts.length + 1).fill(-1);
      for (let r = starts.length - 1; r >= 0; r--) next[r] = this.closes(c, n, starts[r], ends[r]) ? r : next[r + 1];
      this.closers.set(key, next);
    }
    return next;
  }

  /** The first run of c from position j on (a run may start inside a maximal one) closing (c, n): [k, end] or null. */
  findCloser(c, n, j) {
    const { starts, ends } = this.runsOf(c);
    let r = firstAtLeast(starts, j + 1) - 1; // the last run starting at or before j
    if (r >= 0 && ends[r] > j) {
      if (this.closes(c, n, j, ends[r])) return [j, ends[r]];
      r += 1;
    } else {
      r += 1;
    }
    const hit = this.closersOf(c, n)[r];
    return hit >= 0 ? [starts[hit], ends[hit]] : null;
  }

  /** Is there a "\n\n" starting in [from, to]? */
  breakBetween(from, to) {
    if (!this.breaks) {
      this.breaks = [];
      for (let i = this.s.indexOf("\n\n"); i >= 0; i = this.s.indexOf("\n\n", i + 1)) this.breaks.push(i);
    }
    const i = firstAtLeast(this.breaks, from);
    return i < this.breaks.length && this.breaks[i] <= to;
  }

  /** Start of the first run of exactly n backticks at or after `from` (not inside a run), or -1. */
  backtickRun(from, n) {
    if (!this.ticks) {
      this.ticks = new Map();
      const { starts, ends } = this.runsOf("`");
      for (let r = 0; r < starts.length; r++) {
        const len = ends[r] - starts[r];
        if (!this.ticks.has(len)) this.ticks.set(len, []);
        this.ticks.get(len).push(starts[r]);
      }
    }
    const list = this.ticks.get(n);
    if (!list) return -1;
    const i = firstAtLeast(list, from);
    return i < list.length ? list[i] : -1;
  }

  /** The "]" matching the "[" at `start` (brackets nest, backslash escapes, no blank line), or -1. */
  closeBracket(start) {
    const memo = this.brackets;
    if (memo.has(start)) return memo.get(start);
    const { s } = this;
    const open = [];
    for (let i = start; i < s.length; i++) {
      const c = s[i];
      if (c === "\\") {
        i++;
      } else if (c === "[") {
        const known = memo.get(i);
        if (known === undefined) open.push(i);
        else if (known < 0) break; // still open at the end: so are all of ours
        else i = known; // balanced inside: skip it
      } else if (c === "]") {
        const o = open.pop();
        memo.set(o, i);
        if (o === start) return i;
      } else if (c === "\n" && s[i + 1] === "\n") {
        break;
      }
    }
    for (const o of open) memo.set(o, -1);
    return -1;
  }

  /**
   * Where a link destination starting at `from` ends: at whitespace, at a ")" that closes no
   * "(" of its own, or at the end. A "(" seen on the way remembers where a scan started just
   * after it stops, so overlapping destinations ("[a]([a]([a](...") are walked once.
   */
  urlEnd(from) {
    const memo = this.parens;
    const { s } = this;
    const open = [];
    let i = from;
    for (; i < s.length; i++) {
      const c = s[i];
      if (c === "\\") {
        i++;
        continue;
      }
      if (RE_SPACE.test(c)) break;
      if (c === "(") {
        const known = memo.get(i);
        if (known === undefined) open.push(i);
        else if (s[known] === ")") i = known; // balanced inside: skip it
        else {
          i = known; // it ran to whitespace or the end, and so do we
          break;
        }
      } else if (c === ")") {
        if (!open.length) break;
        memo.set(open.pop(), i);
      }
    }
    const end = Math.min(i, s.length);
    for (const o of open) memo.set(o, end);
    return end;
  }

  /** End of a link title ("..." or '...', then spaces) starting at k, or -1. */
  titleEnd(k) {
    let end = this.titles.get(k);
    if (end === undefined) {
      RE_TITLE.lastIndex = k;
      const t = RE_TITLE.exec(this.s);
      end = t ? k + t[0].length : -1;
      this.titles.set(k, end);
    }
    return end;
  }
}

/** Parse inline Markdown into a list of inline nodes. */
export function parseInline(src, depth = 0, inLink = false) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push({ type: "text", text: buf });
    buf = "";
  };
  const s = String(src);
  const scan = new Scan(s);
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
      const close = scan.backtickRun(i + n, n);
      if (close >= 0) {
        flush();
        out.push({ type: "code", text: codeText(s.slice(i + n, close)) });
        i = close + n;
      } else {
        buf += "`".repeat(n);
        i += n;
      }
      continue;
    }
    if (c === "[" && !inLink) {
      const link = matchLink(scan, i);
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
      RE_AUTOLINK.lastIndex = i;
      const m = RE_AUTOLINK.exec(s);
      if (m) {
        const href = safeHref(m[1]);
        flush();
        if (href) out.push({ type: "link", href, children: [{ type: "text", text: m[1] }] });
        else out.push({ type: "text", text: m[0] });
        i += m[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && !inLink && i >= scan.noBareUrlBefore && (i === 0 || /[\s(]/.test(s[i - 1]))) {
      RE_BARE_URL.lastIndex = i;
      const m = RE_BARE_URL.exec(s);
      if (m) {
        const url = trimUrl(m[0]);
        const href = safeHref(url);
        if (href) {
          flush();
          out.push({ type: "link", href, children: [{ type: "text", text: url }] });
          i += url.length;
          continue;
        }
        // Not a valid URL. Another try later in the same word re-reads the rest of the word,
        // which made "(http://[" repeated quadratic: after a few, the rest of the word is text.
        scan.bareUrlFailures = scan.bareUrlWordEnd === i + m[0].length ? scan.bareUrlFailures + 1 : 1;
        scan.bareUrlWordEnd = i + m[0].length;
        if (scan.bareUrlFailures >= MAX_BARE_URL_TRIES) scan.noBareUrlBefore = scan.bareUrlWordEnd;
      }
    }
    if ((c === "*" || c === "_") && depth < MAX_DEPTH) {
      const em = matchEmphasis(scan, i, c);
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

/** A code span's text: newlines become spaces; one space is stripped from each end if both have one. */
function codeText(raw) {
  const code = raw.replace(/\n/g, " ");
  // Same as /^ .*[^ ].* $/, which backtracks quadratically on a long span: "." matches
  // anything but a line terminator, so the middle may hold one (as the [^ ]) and no more.
  if (code.length < 3 || code[0] !== " " || code[code.length - 1] !== " ") return code;
  const terminators = (code.match(/[\r\u2028\u2029]/g) || []).length;
  const padded = terminators === 1 || (terminators === 0 && /[^ ]/.test(code));
  return padded ? code.slice(1, -1) : code;
}

/** Trailing punctuation belongs to the sentence, not the URL; keep balanced parens. */
function trimUrl(found) {
  let end = found.length;
  let opens = 0;
  let closes = 0;
  for (let k = 0; k < end; k++) {
    if (found[k] === "(") opens++;
    else if (found[k] === ")") closes++;
  }
  while (end > 0 && `.,;:!?'"*_)]`.includes(found[end - 1])) {
    if (found[end - 1] === ")") {
      if (opens >= closes) break;
      closes--;
    }
    end--;
  }
  return found.slice(0, end);
}

function matchLink(scan, start) {
  // [label](url) — label may hold balanced brackets, url may hold balanced parens.
  const { s } = scan;
  const close = scan.closeBracket(start);
  if (close < 0 || s[close + 1] !== "(") return null;
  const label = s.slice(start + 1, close);
  let j = close + 2;
  while (s[j] === " ") j++;
  const urlStart = j;
  if (j === close + 2 && scan.parens.has(close + 1)) j = scan.parens.get(close + 1);
  else {
    j = scan.urlEnd(urlStart);
    if (urlStart === close + 2) scan.parens.set(close + 1, j);
  }
  const url = s.slice(urlStart, j);
  // Optional title: ("..." or '...'), ignored.
  let k = j;
  while (s[k] === " ") k++;
  const t = scan.titleEnd(k);
  if (t >= 0) k = t;
  if (s[k] !== ")") return null;
  return { label, url, end: k + 1 };
}

function matchEmphasis(scan, i, c) {
  const { s } = scan;
  const prev = i > 0 ? s[i - 1] : " ";
  // "_" inside a word (snake_case) is never emphasis.
  if (c === "_" && RE_WORD_CHAR.test(prev)) return null;
  const double = s[i + 1] === c;
  const tryDelim = (n) => {
    const open = i + n;
    if (open >= s.length || RE_SPACE.test(s[open])) return null;
    // A closing run: right after non-space; "*" closes on a run of 1 or 3+ (the last one
    // closes, "*a **b***"), "**" on 2+; "_" must not be followed by a letter or digit.
    // Emphasis never spans a blank line.
    const hit = scan.findCloser(c, n, open + 1);
    if (!hit || scan.breakBetween(open, hit[0] - 2)) return null;
    const [, runEnd] = hit;
    return { strong: n === 2, inner: s.slice(open, runEnd - n), end: runEnd };
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
