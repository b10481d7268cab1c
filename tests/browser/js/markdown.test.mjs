// node --test: the safe Markdown renderer (hub/web/js/markdown.js), no browser needed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parse, render, safeHref, toPlainText } from "../../../hub/web/js/markdown.js";
import { FakeDocument, serialize, findAll } from "./fake_dom.mjs";

const html = (src) => serialize(render(src, new FakeDocument()));

test("paragraphs, line breaks, emphasis, strong, code", () => {
  assert.equal(html("Hello *there* and **you**\nnext line\n\nsecond `a<b`"),
    "<p>Hello <em>there</em> and <strong>you</strong><br>next line</p><p>second <code>a&lt;b</code></p>");
  assert.equal(html("__bold__ _it_ ***both***"), "<p><strong>bold</strong> <em>it</em> <strong><em>both</em></strong></p>");
  assert.equal(html("snake_case_word and 2 * 3 * 4"), "<p>snake_case_word and 2 * 3 * 4</p>");
  assert.equal(html("**unclosed and *also"), "<p>**unclosed and *also</p>");
  assert.equal(html("\\*not em\\*"), "<p>*not em*</p>");
});

test("fenced code blocks keep their text verbatim", () => {
  assert.equal(html("```python\nif a < b:\n    print('<b>')\n```"),
    '<pre><code class="language-python">if a &lt; b:\n    print(\'&lt;b&gt;\')</code></pre>');
  assert.equal(html("~~~\nunclosed\n*x*"), "<pre><code>unclosed\n*x*</code></pre>");
});

test("lists, nested lists, ordered start, quotes, headings, rules", () => {
  assert.equal(html("- a\n- b\n  - c\n- d"), "<ul><li>a</li><li><p>b</p><ul><li>c</li></ul></li><li>d</li></ul>");
  assert.equal(html("3. x\n4. y"), '<ol start="3"><li>x</li><li>y</li></ol>');
  assert.equal(html("> quoted\n> more"), "<blockquote><p>quoted<br>more</p></blockquote>");
  assert.equal(html("## Title\n---"), '<p class="md-heading md-h2"><strong>Title</strong></p><hr>');
});

test("links only for http, https and mailto", () => {
  assert.equal(html("[site](https://example.com/a?b=1)"),
    '<p><a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">site</a></p>');
  assert.equal(html("<mailto:a@b.c>"),
    '<p><a href="mailto:a@b.c" target="_blank" rel="noopener noreferrer nofollow">mailto:a@b.c</a></p>');
  assert.equal(html("see https://x.org/p."),
    '<p>see <a href="https://x.org/p" target="_blank" rel="noopener noreferrer nofollow">https://x.org/p</a>.</p>');
  for (const bad of [
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](data:text/html,<script>alert(1)</script>)",
    "[click](vbscript:msgbox)",
    "[click](/relative)",
    "[click](//evil.example)",
    "<javascript:alert(1)>",
  ]) {
    const frag = render(bad, new FakeDocument());
    assert.equal(findAll(frag, "a").length, 0, bad);
    assert.ok(frag.textContent.includes(bad.replace(/^<|>$/g, "").slice(0, 10)), bad);
  }
  assert.equal(html("[click](javascript:alert(1))"), "<p>[click](javascript:alert(1))</p>");
});

test("safeHref refuses every scheme but http, https, mailto", () => {
  assert.equal(safeHref("https://a.b/"), "https://a.b/");
  assert.equal(safeHref("http://a.b"), "http://a.b/");
  assert.equal(safeHref("mailto:x@y.z"), "mailto:x@y.z");
  for (const bad of ["javascript:alert(1)", " javascript:x", "java\tscript:x", "java\nscript:x", "data:x", "file:///etc/passwd",
    "ftp://a.b", "/x", "x", "", null, 42, "https:"]) {
    assert.equal(safeHref(bad), null, String(bad));
  }
});

test("raw HTML is text, never markup", () => {
  const src = '<script>window.x=1</script> <img src=x onerror="alert(1)"> <a href="javascript:alert(1)">a</a>';
  const frag = render(src, new FakeDocument());
  for (const tag of ["script", "img", "a"]) assert.equal(findAll(frag, tag).length, 0, tag);
  assert.equal(frag.textContent, src);
  assert.equal(html("<b>bold?</b>"), "<p>&lt;b&gt;bold?&lt;/b&gt;</p>");
});

test("deep nesting and long input stay bounded", () => {
  const deep = "> ".repeat(50) + "x";
  assert.ok(html(deep).includes("x"));
  const nested = Array.from({ length: 40 }, (_, i) => " ".repeat(i * 2) + "- item").join("\n");
  assert.ok(html(nested).includes("item"));
  const emph = "*".repeat(5000) + "a" + "*".repeat(5000);
  const t0 = Date.now();
  html(emph);
  html("[".repeat(3000) + "x" + "](http://a.b)".repeat(100));
  assert.ok(Date.now() - t0 < 2000, "renderer is not quadratic-explosive on junk input");
});

test("toPlainText for labels", () => {
  assert.equal(toPlainText("Deploy **now**?\n\n- `v1.2`\n- [notes](https://x.y)"), "Deploy now? v1.2 notes");
  assert.equal(toPlainText("<script>alert(1)</script>"), "<script>alert(1)</script>");
});

test("parse returns plain data", () => {
  assert.deepEqual(parse("a"), [{ type: "paragraph", children: [{ type: "text", text: "a" }] }]);
});
