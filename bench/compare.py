"""``python -m bench compare A.json B.json``: two runs' figures side by side, with B/A.

Works on any result file of this suite (``run``, ``soak``, ``flood``): each is flattened to
``path -> number``. Lists of objects are keyed by what names an entry (``label``,
``server``, ``mode``, ``n``, ``rep``, ``name`` ...) rather than by position, so the runs of
two files line up even when one has a run the other lacks. Long numeric lists (series,
CDFs) and the ``meta`` block are left out unless ``--all``. A figure present in only one
file is shown with ``-`` on the other side. Text figures (a target's ``status``) are
shown when they differ.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

#: Fields that name an entry of a list of objects, in the order they are written in a key.
_ID_FIELDS = ("label", "server", "kind", "name", "phase", "mode", "n", "rep")
#: Lists longer than this, of numbers or of pairs, are data series: not figures.
_SERIES = 12
_SKIP_TOP = ("meta", "series", "config", "hub_flags", "plan")


def _key(item: dict[str, Any], index: int) -> str:
    parts: list[str] = []
    for f in _ID_FIELDS:
        v = item.get(f)
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            part = f"{f}={v}" if f in ("n", "rep") else str(v)
            if part not in parts:  # label "hub" and server "hub": once
                parts.append(part)
    return "[" + ",".join(parts) + "]" if parts else f"[{index}]"


def flatten(doc: Any, prefix: str = "", *, everything: bool = False) -> dict[str, Any]:
    """``{"a.b[hub,mode=closed,n=200].c": 1.5, ...}``: every number (and short text) leaf."""
    out: dict[str, Any] = {}

    def walk(v: Any, path: str) -> None:
        if isinstance(v, bool):
            out[path] = str(v).lower()
        elif isinstance(v, (int, float)):
            out[path] = v
        elif isinstance(v, str):
            if len(v) <= 40:
                out[path] = v
        elif isinstance(v, dict):
            for k, x in v.items():
                if not everything and not path and k in _SKIP_TOP:
                    continue
                walk(x, f"{path}.{k}" if path else str(k))
        elif isinstance(v, list):
            if v and all(isinstance(x, dict) for x in v):
                seen: dict[str, int] = {}
                for i, x in enumerate(v):
                    k = _key(x, i)
                    seen[k] = seen.get(k, 0) + 1
                    if seen[k] > 1:  # the same name twice: tell them apart by position
                        k = f"{k[:-1]}#{seen[k]}]"
                    # The naming fields are in the key: not figures of their own.
                    walk({f: y for f, y in x.items() if f not in _ID_FIELDS}, path + k)
            elif len(v) <= _SERIES and all(isinstance(x, (int, float, str)) for x in v) \
                    and not everything:
                for i, x in enumerate(v):
                    walk(x, f"{path}[{i}]")
            elif everything:
                for i, x in enumerate(v):
                    walk(x, f"{path}[{i}]")

    walk(doc, prefix)
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and a != 0 and math.isfinite(a) and math.isfinite(b):
        return b / a
    return None


def rows(a: dict[str, Any], b: dict[str, Any], *, changed: float = 0.0,
         match: list[str] | None = None) -> list[tuple[str, Any, Any, float | None, str]]:
    """(figure, A, B, B/A, note) for every figure in either; ``changed`` keeps only those
    whose ratio moved by more than that fraction (plus the one-sided and the differing
    text ones); ``match`` keeps the figures whose path contains any of the strings."""
    out = []
    for k in list(a) + [k for k in b if k not in a]:
        if match and not any(m in k for m in match):
            continue
        va, vb = a.get(k), b.get(k)
        r = ratio(va, vb)
        note = "only A" if k not in b else "only B" if k not in a else ""
        if isinstance(va, str) or isinstance(vb, str):
            if va == vb:
                continue
            note = note or "differs"
        elif not note and changed:
            moved = abs(r - 1) > changed if r is not None else va != vb
            if not moved:
                continue
        out.append((k, va, vb, r, note))
    return out


def render(path_a: str, path_b: str, table: list[tuple[str, Any, Any, float | None, str]],
           meta: tuple[dict[str, Any], dict[str, Any]]) -> str:
    head = [f"A: {path_a}  ({_describe(meta[0])})", f"B: {path_b}  ({_describe(meta[1])})", ""]
    if not table:
        return "\n".join(head + ["no figures to compare"])
    w = min(max(len(r[0]) for r in table), 90)
    cells = [(_fmt(va), _fmt(vb), f"{r:.3f}" if r is not None else "", note)
             for _, va, vb, r, note in table]
    wa = max(len("A"), *(len(c[0]) for c in cells))
    wb = max(len("B"), *(len(c[1]) for c in cells))
    lines = head + [f"{'figure':<{w}}  {'A':>{wa}}  {'B':>{wb}}  {'B/A':>7}",
                    f"{'-' * w}  {'-' * wa}  {'-' * wb}  {'-' * 7}"]
    for (k, *_), (ca, cb, cr, note) in zip(table, cells):
        name = k if len(k) <= w else "…" + k[-(w - 1):]
        lines.append(f"{name:<{w}}  {ca:>{wa}}  {cb:>{wb}}  {cr:>7}" + (f"  {note}" if note else ""))
    only_a = sum(1 for r in table if r[4] == "only A")
    only_b = sum(1 for r in table if r[4] == "only B")
    lines += ["", f"{len(table)} figures; {only_a} only in A, {only_b} only in B"]
    return "\n".join(lines)


def _describe(meta: dict[str, Any]) -> str:
    bits = [str(meta.get(k)) for k in ("command", "git", "started") if meta.get(k)]
    m = meta.get("machine") or {}
    if m.get("cpu_model"):
        bits.append(f"{m.get('cpus')} vCPU {m['cpu_model']}")
    probe = meta.get("machine_probe") or {}
    if probe:  # runs on different machines compare only through these
        bits.append(f"python loop {probe.get('python_loop_ms')} ms, "
                    f"thread round trip {probe.get('thread_rtt_us')} µs")
    return "; ".join(bits) or "no meta"


def compare(path_a: str, path_b: str, *, changed: float = 0.0, match: list[str] | None = None,
            everything: bool = False) -> str:
    da = orjson.loads(Path(path_a).read_bytes())
    db = orjson.loads(Path(path_b).read_bytes())
    table = rows(flatten(da, everything=everything), flatten(db, everything=everything),
                 changed=changed, match=match)
    return render(path_a, path_b, table, (da.get("meta") or {}, db.get("meta") or {}))
