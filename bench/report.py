"""Render a results file: targets, the headline table, a Markdown report and PNG plots.

Plots need matplotlib (the ``bench`` extra); without it the report is rendered without them.
``publish`` writes ``docs/performance.md`` (this report plus ``bench/analysis.md``, the
hand-written reading of the numbers and the profile) and ``docs/perf/*.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import _sys
from bench._servers import ROOT

DOCS = ROOT / "docs"
ANALYSIS = ROOT / "bench" / "analysis.md"
LABELS = {"hub": "A2H hub", "relay": "bare Starlette relay",
          "socketio": "python-socketio relay", "socketio (AsyncClient)":
          "python-socketio relay, AsyncClient load"}


# ---------------------------------------------------------------------------- lookups


def _cyc(doc: dict[str, Any], label: str, n: int, mode: str = "closed") -> dict[str, Any] | None:
    s = doc.get("scenarios", {}).get("cycles", {}).get("summary", {})
    return s.get(label, {}).get(mode, {}).get(str(n))


def _ns(doc: dict[str, Any]) -> list[int]:
    s = doc.get("scenarios", {}).get("cycles", {}).get("summary", {})
    return sorted({int(n) for per in s.values() for m in per.values() for n in m})


def _paced_total(doc: dict[str, Any]) -> float:
    return float(doc.get("meta", {}).get("plan", {}).get("paced_total") or 0)


def _idle(doc: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for r in doc.get("scenarios", {}).get("idle", {}).get("runs", []):
        if r.get("server") == kind and "error" not in r:
            return r
    return None


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def paired_ratios(doc: dict[str, Any], label: str, n: int) -> tuple[float | None, list[float]]:
    """Hub ÷ ``label`` in closed-loop cycles/s at ``n`` agents: the median of each sweep's
    own ratio, and those ratios in sweep order. A sweep runs both servers seconds apart,
    so a host that changes speed between sweeps moves both sides of its ratio; the ratio
    of the two medians could pair one sweep's hub with another's relay. Without repeats
    (one sweep, or runs that carry no ``rep``) it is the ratio of the summaries."""
    by_rep: dict[tuple[str, int], float] = {}
    for r in doc.get("scenarios", {}).get("cycles", {}).get("runs", []):
        if "error" in r or r.get("n") != n or r.get("mode", "closed") != "closed" \
                or r.get("label") not in ("hub", label) or r.get("rep") is None:
            continue
        by_rep[(r["label"], r["rep"])] = r["cycles_per_s"]
    reps = sorted({rep for (_, rep) in by_rep})
    ratios = [x for x in (_ratio(by_rep.get(("hub", rep)), by_rep.get((label, rep)))
                          for rep in reps) if x is not None]
    if len(ratios) >= 2:
        med = _sys.median(ratios)
        return (round(med, 2) if med is not None else None), ratios
    a, b = _cyc(doc, "hub", n), _cyc(doc, label, n)
    return (_ratio(a["cycles_per_s"], b["cycles_per_s"]) if a and b else None), ratios


def _ratio_target(doc: dict[str, Any], add: Any, issue: str, label: str, name: str,
                  goal: float) -> None:
    """The target hub ÷ ``label`` >= ``goal`` at every N (each N's paired median)."""
    rs = []
    for n in _ns(doc):
        r, sweeps = paired_ratios(doc, label, n)
        if r is not None:
            rs.append((n, r, sweeps))
    if not rs:
        add(issue, name, f">= {goal}", None, None)
        return
    text = ", ".join(f"{r} (N={n}" + (f"; sweeps {' '.join(str(x) for x in sweeps)}"
                                      if len(sweeps) >= 2 else "") + ")"
                     for n, r, sweeps in rs)
    add(issue, name, f">= {goal}", text, min(r for _, r, _ in rs) >= goal,
        "every N, closed loop" + ("; each N the median of its sweeps' own ratios"
                                  if any(len(s) >= 2 for _, _, s in rs) else ""))


# ---------------------------------------------------------------------------- targets


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of issues 2 and 7, with what this run measured."""
    out: list[dict[str, Any]] = []
    quick = doc.get("meta", {}).get("quick", False)

    def add(issue: str, name: str, target: str, measured: Any, ok: bool | None,
            where: str = "") -> None:
        status = "n/a" if ok is None else ("met" if ok else "NOT met")
        out.append({"issue": issue, "name": name, "target": target, "measured": measured,
                    "where": where, "status": status})

    def near(n: int) -> int | None:
        ns = [x for x in _ns(doc) if _cyc(doc, "hub", x)]
        return n if n in ns else None

    paced = f"{_paced_total(doc):,.0f} asks/s offered"
    n200 = near(200)
    h = _cyc(doc, "hub", n200) if n200 else None
    add("2", "durable cycles/s, 200 agents", ">= 2,000/s",
        _fmt(h["cycles_per_s"]) if h else None, h["cycles_per_s"] >= 2000 if h else None,
        "N=200, closed loop")
    h = _cyc(doc, "hub", n200, "paced") if n200 else None
    add("2", "answer -> agent p99, 200 agents", "< 20 ms",
        f"{_fmt(h['answer_to_agent_p99_ms'], 2)} ms" if h else None,
        h["answer_to_agent_p99_ms"] < 20 if h else None, f"N=200, {paced}")
    best = None
    for n in _ns(doc):
        c = _cyc(doc, "hub", n)
        if c and c["cycles_per_s"] and (best is None or c["cycles_per_s"] > best[1]):
            best = (n, c["cycles_per_s"])
    add("7", "durable cycles/s (best N)", ">= 5,000/s", _fmt(best[1]) if best else None,
        best[1] >= 5000 if best else None, f"N={best[0]}, closed loop" if best else "")
    n1000 = near(1000)
    h = _cyc(doc, "hub", n1000) if n1000 else None
    add("7", "durable cycles/s, 1,000 agents", ">= 5,000/s", _fmt(h["cycles_per_s"]) if h else None,
        h["cycles_per_s"] >= 5000 if h else None, "N=1000, closed loop")
    n1000 = near(1000)
    h = _cyc(doc, "hub", n1000, "paced") if n1000 else None
    add("7", "answer -> agent p99, 1,000 agents", "< 10 ms",
        f"{_fmt(h['answer_to_agent_p99_ms'], 2)} ms" if h else None,
        h["answer_to_agent_p99_ms"] < 10 if h else None, f"N=1000, {paced}")
    idle = _idle(doc, "hub")
    v = idle.get("kib_per_waiting_agent") if idle else None
    add("7", "RSS per waiting agent", "< 40 KiB", f"{_fmt(v)} KiB" if v is not None else None,
        (v < 40) if v is not None else None,
        f"{idle['agents']:,} agents + {idle['inbox']:,} inbox sockets" if idle else "")
    rb = doc.get("scenarios", {}).get("rooms", {}).get("rebuild")
    v = rb["wait_rtt_evicted_ms"]["p99"] if rb else None
    add("7", "evicted room rebuilt (wait round trip) p99", "< 2 ms",
        f"{_fmt(v, 2)} ms" if v is not None else None, (v < 2) if v is not None else None,
        f"{rb['requests']:,} rooms" if rb else "")
    rec = doc.get("scenarios", {}).get("recovery", {})
    v = rec.get("serving_s")
    add("7", "restart with pending requests: serving", "< 3 s",
        f"{_fmt(v, 2)} s" if v is not None else None, (v < 3) if v is not None else None,
        f"{rec.get('pending', 0):,} pending" if rec else "")
    # ratios
    for label, name, goal in (("relay", "hub ÷ bare relay, cycles/s", 0.5),
                              ("socketio", "hub ÷ socket.io relay, cycles/s", 1.0)):
        _ratio_target(doc, add, "7", label, name, goal)
    hi, ri = _idle(doc, "hub"), _idle(doc, "relay")
    r = _ratio(hi.get("kib_per_idle_agent_conn"), ri.get("kib_per_idle_agent_conn")) \
        if hi and ri else None
    add("7", "hub ÷ bare Starlette, bytes per idle connection", "<= 1.25", r,
        (r <= 1.25) if r is not None else None, "connected, nothing pending")
    _targets_12(doc, add)
    if quick:
        for t in out:
            t["status"] = "n/a (quick)" if t["status"] != "n/a" else t["status"]
    return out


def _targets_12(doc: dict[str, Any], add: Any) -> None:
    """Issue 12: the cost of one cycle, the journal, one flooded room."""
    _ratio_target(doc, add, "12", "relay", "hub ÷ bare relay, cycles/s (stretch 0.75)", 0.6)
    n = 1000 if 1000 in _ns(doc) else None
    h = _cyc(doc, "hub", n, "paced") if n else None
    v = h.get("server_cpu_us_per_cycle") if h else None
    rl = _cyc(doc, "relay", n, "paced") if n else None
    rv = rl.get("server_cpu_us_per_cycle") if rl else None
    add("12", "server CPU per cycle, 1,000 agents paced", "<= 175 µs",
        f"{_fmt(v, 0)} µs" if v is not None else None, (v <= 175) if v is not None else None,
        f"N=1000, {_paced_total(doc):,.0f} asks/s offered, all threads"
        + (f"; the bare relay {_fmt(rv, 0)} µs" if rv is not None else ""))
    j = doc.get("scenarios", {}).get("journal", {})
    jc = j.get("journal_call_ms") if j and "error" not in j else None
    add("12", "journal running + done p50 / p99", "< 1.0 / < 3 ms",
        f"{_fmt(jc['p50'], 2)} / {_fmt(jc['p99'], 2)} ms" if jc else None,
        (jc["p50"] < 1.0 and jc["p99"] < 3.0) if jc and jc.get("p50") is not None else None,
        f"{j.get('runs')} runs at once, --sync full"
        + (f"; floor here {_fmt(j['floor_p50_ms'], 2)} ms" if j.get("floor_p50_ms") else "")
        if jc else "")
    ov = doc.get("scenarios", {}).get("overload", {})
    r = ov.get("others_p99_ratio_answer_to_agent") if ov and "error" not in ov else None
    fl = ov.get("flood", {}) if ov else {}
    refused = (fl.get("codes") or {}).get("overloaded", 0)
    honest = refused > 0 and fl.get("overloaded_not_retryable") == refused
    add("12", "others' answer -> agent p99, flooded ÷ calm", "<= 1.5",
        f"{r}" if r is not None else None, (r <= 1.5) if r is not None else None,
        "one room flooded")
    add("12", "the flooder is answered overloaded (retryable: false)", "every refusal",
        f"{refused:,} refused" if fl else None, honest if fl else None,
        "no silent drop")


# ---------------------------------------------------------------------------- headline


def headline(doc: dict[str, Any]) -> list[list[str]]:
    """The table for the README: rows of cells, the first row is the header."""
    labels = ["hub", "relay", "socketio"]
    rows = [["", "A2H hub (durable)", "bare Starlette relay", "python-socketio relay"]]
    total = _paced_total(doc)
    for n in _ns(doc):
        rows.append([f"max ask→answer cycles/s, {n:,} agents"]
                    + [_fmt((_cyc(doc, lb, n) or {}).get("cycles_per_s")) for lb in labels])
    for n in _ns(doc):
        rows.append([f"answer → agent p50 / p99 ms, {n:,} agents at {total:,.0f}/s"]
                    + [_pair(_cyc(doc, lb, n, "paced"), "answer_to_agent_p50_ms",
                             "answer_to_agent_p99_ms") for lb in labels])
    ns = _ns(doc)
    if ns:
        n = 1000 if 1000 in ns else ns[-1]
        rows.append([f"server CPU per cycle, {n:,} agents at {total:,.0f}/s (µs)"]
                    + [_fmt((_cyc(doc, lb, n, "paced") or {}).get("server_cpu_us_per_cycle"), 0)
                       for lb in labels])
    hi, ri = _idle(doc, "hub"), _idle(doc, "relay")
    if hi or ri:
        rows.append(["RSS per idle connection (KiB)",
                     _fmt((hi or {}).get("kib_per_idle_agent_conn")),
                     _fmt((ri or {}).get("kib_per_idle_agent_conn")), "–"])
        rows.append(["RSS per waiting agent (socket + pending request, KiB)",
                     _fmt((hi or {}).get("kib_per_waiting_agent")),
                     _fmt((ri or {}).get("kib_per_waiting_agent")), "–"])
    return rows


def _pair(c: dict[str, Any] | None, a: str, b: str) -> str:
    if not c:
        return "–"
    return f"{_fmt(c.get(a), 2)} / {_fmt(c.get(b), 2)}"


def _table(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def ratio_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = [["ratio", "target", "measured", "status"]]
    for t in doc["targets"]:
        if "÷" in t["name"]:
            rows.append([t["name"], t["target"], _fmt(t["measured"]), t["status"]])
    return rows


# ---------------------------------------------------------------------------- plots


def make_plots(doc: dict[str, Any], out_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made: list[str] = []
    sc = doc.get("scenarios", {})
    colors = {"hub": "#1f77b4", "relay": "#7f7f7f", "socketio": "#d62728",
              "socketio (AsyncClient)": "#ff9896"}
    spare = iter(["#17becf", "#9467bd", "#8c564b", "#bcbd22", "#e377c2"])
    for label in sc.get("cycles", {}).get("summary", {}):
        if label not in colors:
            colors[label] = next(spare, "#000000")

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        made.append(name)

    summary = sc.get("cycles", {}).get("summary", {})
    if summary:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for label, modes in summary.items():
            name = LABELS.get(label, label)
            closed = modes.get("closed", {})
            ns = sorted(int(n) for n in closed)
            if ns:
                ax1.plot(ns, [closed[str(n)]["cycles_per_s"] for n in ns], "o-", label=name,
                         color=colors.get(label))
            paced = modes.get("paced", {})
            ns = sorted(int(n) for n in paced)
            if ns:
                ax2.plot(ns, [paced[str(n)]["answer_to_agent_p99_ms"] for n in ns], "o-",
                         label=name + " p99", color=colors.get(label))
                ax2.plot(ns, [paced[str(n)]["answer_to_agent_p50_ms"] for n in ns], "o--",
                         color=colors.get(label), alpha=0.5, label=name + " p50")
        for ax in (ax1, ax2):
            ax.set_xscale("log")
            ax.set_xlabel("concurrent agents")
            ax.grid(alpha=0.3)
        ax1.set_ylabel("ask → answer cycles/s")
        ax1.set_title("Throughput, closed loop")
        ax1.legend(fontsize=8)
        ax2.set_yscale("log")
        ax2.set_ylabel("answer → agent latency (ms)")
        ax2.set_title(f"Latency at {_paced_total(doc):,.0f} asks/s offered")
        ax2.legend(fontsize=7)
        save(fig, "cycles.png")
        runs = [r for r in sc.get("cycles", {}).get("runs", [])
                if r.get("answer_to_agent_cdf") and r.get("mode") == "paced"]
        if runs:
            ns = sorted({r["n"] for r in runs})
            n = 1000 if 1000 in ns else ns[-1]
            fig, ax = plt.subplots(figsize=(6.5, 4))
            seen = set()
            for r in runs:
                if r["n"] != n or r["label"] in seen:
                    continue
                seen.add(r["label"])
                xs = [p[0] for p in r["answer_to_agent_cdf"]]
                ys = [p[1] for p in r["answer_to_agent_cdf"]]
                ax.plot(xs, ys, label=LABELS.get(r["label"], r["label"]),
                        color=colors.get(r["label"]))
            ax.set_xscale("log")
            ax.set_xlabel("answer → agent latency (ms)")
            ax.set_ylabel("fraction of cycles")
            ax.set_title(f"Latency distribution, {n:,} agents, "
                         f"{_paced_total(doc):,.0f} asks/s offered")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "cycles_cdf.png")
    idle_runs = [r for r in sc.get("idle", {}).get("runs", []) if "error" not in r]
    if idle_runs:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        cats = ["kib_per_inbox_conn", "kib_per_idle_agent_conn", "kib_per_waiting_agent"]
        names = ["inbox socket", "agent socket, idle", "agent socket + pending request"]
        width = 0.8 / len(idle_runs)
        for i, r in enumerate(idle_runs):
            xs = [j + i * width for j in range(len(cats))]
            ax.bar(xs, [r.get(c) or 0 for c in cats], width, label=LABELS.get(r["server"]),
                   color=colors.get(r["server"]))
        ax.set_xticks([j + width * (len(idle_runs) - 1) / 2 for j in range(len(cats))], names)
        ax.set_ylabel("server RSS per connection (KiB)")
        ax.axhline(40, color="k", ls=":", lw=1)
        ax.set_title("Memory per connection")
        ax.legend(fontsize=8)
        save(fig, "idle_memory.png")
    rooms = sc.get("rooms", {})
    if rooms.get("samples"):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        t = [s[0] for s in rooms["samples"]]
        ax.plot(t, [s[1] for s in rooms["samples"]], color=colors["hub"], label="hub RSS (MiB)")
        ax.axhline(rooms["rss_baseline_mib"], color="k", ls=":", lw=1, label="baseline RSS")
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS (MiB)")
        ax2 = ax.twinx()
        ax2.plot(t, [s[2] for s in rooms["samples"]], color="#2ca02c", alpha=0.6,
                 label="live rooms")
        ax2.set_ylabel("live rooms")
        ax.set_title(f"{rooms.get('conversations', 0):,} conversations, room idle "
                     f"{rooms.get('room_idle_s')} s")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="center right")
        save(fig, "rooms.png")
    rec = sc.get("recovery", {})
    if rec.get("series"):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        ax.plot([s[0] for s in rec["series"]], [s[1] for s in rec["series"]], color=colors["hub"],
                label="pending requests (/metrics)")
        if rec.get("serving_s") is not None:
            ax.axvline(rec["serving_s"], color="k", ls=":", lw=1, label="/healthz 200")
        ax.set_xlabel("seconds since the restarted process was spawned")
        ax.set_ylabel("pending requests")
        ax.set_title(f"Restart after kill -9 with {rec.get('pending', 0):,} overdue requests")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        save(fig, "recovery.png")
    ov = sc.get("overload", {})
    if ov.get("phases"):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        qs = ["p50", "p90", "p99", "max"]
        for i, (phase, color) in enumerate((("calm", "#1f77b4"), ("flooded", "#d62728"))):
            lat = ov["phases"][phase]["ask_to_answer_ms"]
            ax.bar([j + i * 0.4 for j in range(len(qs))], [lat.get(q) or 0 for q in qs], 0.4,
                   label=f"{phase}", color=color)
        ax.set_xticks([j + 0.2 for j in range(len(qs))], qs)
        ax.set_ylabel("ask → answer at the agent (ms)")
        ax.set_title("Other rooms while one room is flooded")
        ax.legend(fontsize=8)
        save(fig, "overload.png")
    return made


# ---------------------------------------------------------------------------- markdown


def render(doc: dict[str, Any], out_dir: Path, *, plots: bool = True) -> Path:
    """``report.md`` (and its PNGs) next to the results file."""
    made = make_plots(doc, out_dir) if plots else []
    text = markdown(doc, made, "", analysis=False)
    path = out_dir / "report.md"
    path.write_text(text)
    return path


def publish(doc: dict[str, Any], *, plots: bool = True) -> Path:
    perf = DOCS / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    made = make_plots(doc, perf) if plots else []
    text = markdown(doc, made, "perf/", analysis=True)
    path = DOCS / "performance.md"
    path.write_text(text)
    return path


def _probe(probe: dict[str, float] | None) -> str:
    if not probe:
        return ""
    return (f" The machine's speed (`bench.__main__.machine_probe`): a million-step Python "
            f"loop in {_fmt(probe.get('python_loop_ms'), 0)} ms, a round trip between two "
            f"threads over a socket pair in {_fmt(probe.get('thread_rtt_us'), 1)} µs.")


def markdown(doc: dict[str, Any], made: list[str], plots_dir: str, analysis: bool) -> str:
    meta = doc.get("meta", {})
    sc = doc.get("scenarios", {})
    m = meta.get("machine", {})
    v = meta.get("versions", {})
    disk = meta.get("disk_fdatasync_ms", {})
    L: list[str] = []
    L.append("# Performance")
    L.append("")
    L.append(f"One run of `{meta.get('command', 'python -m bench run')}` "
             f"({'quick' if meta.get('quick') else 'full'} suite, {meta.get('started', '')}, "
             f"git {meta.get('git')}), on {m.get('cpus')} vCPU ({m.get('cpu_model')}), "
             f"{m.get('mem_gib')} GiB, Linux {m.get('kernel')}, Python {m.get('python')}; "
             f"the hub {v.get('hub_build', 'interpreted (before the native build)')}. "
             "Server and load clients share the machine; every server is a real subprocess on "
             "127.0.0.1. The disk's `fdatasync` (8 KiB append) measured at the start: "
             f"p50 {_fmt(disk.get('p50'), 2)} ms, p99 {_fmt(disk.get('p99'), 2)} ms."
             + _probe(meta.get("machine_probe")))
    L.append("")
    L.append(_table(doc["headline"]))
    L.append("")
    L.append("### Targets")
    L.append("")
    rows = [["issue", "target", "goal", "measured", "where", "status"]]
    for t in doc["targets"]:
        rows.append([t["issue"], t["name"], t["target"], _fmt(t["measured"]), t["where"],
                     f"**{t['status']}**" if t["status"] == "NOT met" else t["status"]])
    L.append(_table(rows))
    L.append("")
    L.append("Reproduce (about "
             f"{_fmt(meta.get('seconds', 0) / 60, 0)} minutes for this run):")
    L.append("")
    L.append("```sh")
    L.append("scripts/setup test && .venv/bin/pip install -e '.[bench]'")
    L.append(".venv/bin/python -m bench run            # full suite; --quick for the smoke run")
    L.append(".venv/bin/python -m bench run --scenario cycles --n 200 1000   # one scenario")
    L.append(".venv/bin/python -m pytest bench/micro --benchmark-only       # micro-benchmarks")
    L.append(".venv/bin/python -m bench profile --n 1000 --gil              # py-spy the hub")
    L.append("```")
    L.append("")
    if analysis and ANALYSIS.exists():
        L.append(ANALYSIS.read_text().rstrip())
        L.append("")
    # -- cycles
    cyc = sc.get("cycles", {})
    if cyc.get("runs"):
        L.append("## 1. Cycles: agents ask, humans answer")
        L.append("")
        L.append("Each agent keeps one `ask` in flight on its own socket, in its own conversation, "
                 "and asks again as soon as the `resolved` push arrives (*closed loop*: the "
                 "throughput figure; its latency is N ÷ throughput by Little's law), or paced so "
                 f"that all agents together offer {_paced_total(doc):,.0f} asks/s (*paced*: the "
                 "latency figure). "
                 f"{meta.get('plan', {}).get('humans', 4)} "
                 "human sockets answer every `inbox.add` at once. *ask → inbox*: the agent's send "
                 "time (carried in the ask's `context`) to the human's receipt of `inbox.add`; "
                 "*answer → agent*: the human's send time (carried in the answer's value) to the "
                 "agent's receipt of `resolved`. Both clocks are `CLOCK_MONOTONIC` on one machine. "
                 f"Warm-up {meta.get('plan', {}).get('warmup')} s, then "
                 f"{meta.get('plan', {}).get('duration')} s measured. Server CPU is the whole "
                 "process (event loop + SQLite writer thread); *loop* is the event-loop thread "
                 "alone.")
        L.append("")
        rows = [["server", "agents", "load", "cycles/s", "ask→inbox p50/p99 ms",
                 "answer→agent p50/p90/p99/max ms", "server CPU µs/cycle", "loop util",
                 "client CPU util", "other jobs (cores)", "bottleneck", "errors"]]
        for r in sorted(cyc["runs"], key=lambda r: (r.get("mode", ""), r["n"])):
            load = "closed loop" if r.get("mode") != "paced" else \
                f"paced {_fmt(r.get('offered_per_s'), 0)}/s"
            if "error" in r:
                rows.append([r["label"], _fmt(r["n"]), load, "failed: " + r["error"][:60]]
                            + [""] * 8)
                continue
            a, b = r["ask_to_inbox_ms"], r["answer_to_agent_ms"]
            rows.append([LABELS.get(r["label"], r["label"]), _fmt(r["n"]), load,
                         _fmt(r["cycles_per_s"]),
                         f"{_fmt(a['p50'], 2)} / {_fmt(a['p99'], 2)}",
                         f"{_fmt(b['p50'], 2)} / {_fmt(b['p90'], 2)} / {_fmt(b['p99'], 2)} / "
                         f"{_fmt(b['max'], 1)}",
                         _fmt(r["server_cpu_us_per_cycle"], 0), _fmt(r["server_loop_util"], 2),
                         ", ".join(f"{k} {x:.2f}" for k, x in r["client_cpu_util"].items()),
                         _fmt(r.get("other_cpu_util"), 2), r["bottleneck"], _fmt(sum(r["errors"].values()) if r["errors"] else 0)])
        L.append(_table(rows))
        L.append("")
        hub_runs = [r for r in cyc["runs"] if r.get("label") == "hub" and "store_mean_batch" in r]
        if hub_runs:
            L.append("Hub group commit: " + "; ".join(
                f"N={r['n']} {r.get('mode')}: {_fmt(r['store_commits'], 0)} commits, mean batch "
                f"{_fmt(r['store_mean_batch'])}, max {_fmt(r['store_max_batch'], 0)}"
                for r in hub_runs) + ".")
            L.append("")
        L.append(_table(ratio_rows(doc)))
        L.append("")
        for name in ("cycles.png", "cycles_cdf.png"):
            if name in made:
                L.append(f"![{name}]({plots_dir}{name})")
                L.append("")
    # -- idle
    idle = [r for r in sc.get("idle", {}).get("runs", [])]
    if idle:
        L.append("## 2. Idle capacity: waiting agents and inbox sockets")
        L.append("")
        L.append("Inbox sockets connect first, then agent sockets; then every agent asks once "
                 "(`wait` 60 s, `expires_in` 600 s, each in its own conversation, to one of the "
                 "inbox humans) and just waits. RSS is the server's `VmRSS` after a short "
                 "settle; per-connection figures are differences between stages divided by "
                 "the sockets added. Idle CPU is measured over a window longer than the 20 s "
                 "heartbeat.")
        L.append("")
        rows = [["server", "sockets", "KiB / inbox socket", "KiB / idle agent socket",
                 "KiB / waiting agent", "KiB / socket, all", "RSS waiting (MiB)",
                 "connect s", "ask s", "idle CPU util", "idle CPU µs/socket/s"]]
        for r in idle:
            if "error" in r:
                rows.append([r["server"], "failed: " + r["error"][:80]] + [""] * 9)
                continue
            rows.append([LABELS.get(r["server"], r["server"]), _fmt(r["connected"]),
                         _fmt(r["kib_per_inbox_conn"]), _fmt(r["kib_per_idle_agent_conn"]),
                         _fmt(r["kib_per_waiting_agent"]), _fmt(r["kib_per_conn_all"]),
                         _fmt(r["rss_mib_waiting"]), _fmt(r["connect_s"]), _fmt(r["ask_s"]),
                         _fmt(r["idle_server_cpu_util"], 3), _fmt(r["idle_cpu_us_per_conn_per_s"], 2)])
        L.append(_table(rows))
        L.append("")
        if "idle_memory.png" in made:
            L.append(f"![idle_memory.png]({plots_dir}idle_memory.png)")
            L.append("")
    # -- rooms
    rooms = sc.get("rooms", {})
    if rooms and "error" not in rooms:
        L.append("## 3. Rooms: create, answer, evict; rebuild on touch")
        L.append("")
        L.append(f"{_fmt(rooms.get('conversations'))} conversations, each with one ask answered "
                 f"at once, by {meta.get('plan', {}).get('rooms_agents')} agents; the hub runs "
                 f"with `--room-idle {rooms.get('room_idle_s')}`.")
        L.append("")
        rows = [["figure", "value"],
                ["conversations/s (create + answer)", _fmt(rooms.get("cycles_per_s"))],
                ["RSS baseline → peak → after eviction (MiB)",
                 f"{_fmt(rooms.get('rss_baseline_mib'))} → {_fmt(rooms.get('rss_peak_mib'))} → "
                 f"{_fmt(rooms.get('rss_after_eviction_mib'))}"],
                ["RSS left per conversation after eviction (bytes)",
                 _fmt(rooms.get("bytes_left_per_conversation"))],
                ["RSS once the answered requests' deadlines have passed (MiB)",
                 _fmt(rooms.get("rss_after_deadlines_mib"))],
                ["rooms evicted / live after", f"{_fmt(rooms.get('evictions'), 0)} / "
                                              f"{_fmt(rooms.get('live_rooms_after'), 0)}"]]
        rb = rooms.get("rebuild")
        if rb:
            e, lv = rb["wait_rtt_evicted_ms"], rb["wait_rtt_live_ms"]
            rows += [["`wait` round trip, evicted room (rebuild) p50 / p99 / max ms",
                      f"{_fmt(e['p50'], 3)} / {_fmt(e['p99'], 3)} / {_fmt(e['max'], 2)}"],
                     ["`wait` round trip, live room p50 / p99 / max ms",
                      f"{_fmt(lv['p50'], 3)} / {_fmt(lv['p99'], 3)} / {_fmt(lv['max'], 2)}"],
                     ["rebuild cost (difference of medians, ms)",
                      _fmt(rb.get("rebuild_cost_p50_ms"), 3)],
                     ["rebuilds seen in /metrics", _fmt(rb.get("rebuilds_seen"), 0)]]
        L.append(_table(rows))
        L.append("")
        L.append("Rebuild latency is measured from the client: one request per evicted room, "
                 "two `wait` frames back to back, one at a time (no queueing): the first "
                 "rebuilds the room from the store, the second finds it live. The round trip "
                 "includes the loopback socket both ways, so the rebuild itself is cheaper "
                 "than the first figure.")
        L.append("")
        if "rooms.png" in made:
            L.append(f"![rooms.png]({plots_dir}rooms.png)")
            L.append("")
    # -- recovery
    rec = sc.get("recovery", {})
    if rec and "error" not in rec:
        L.append("## 4. Recovery: kill -9 with pending requests")
        L.append("")
        L.append(f"{_fmt(rec.get('acked'))} requests created ({_fmt(rec.get('create_per_s'))}/s, "
                 f"each in its own conversation) with `expires_in` {rec.get('expires_in_s')} s; "
                 "the hub is killed with SIGKILL, restarted on the same database after every "
                 "deadline has passed; /healthz is polled every 2 ms and /metrics every 10 ms "
                 "from the moment the new process is spawned.")
        L.append("")
        rows = [["figure", "value"],
                ["pending at kill", _fmt(rec.get("pending_at_kill"), 0)],
                ["spawn → /healthz 200 (s)", _fmt(rec.get("serving_s"), 3)],
                ["spawn → \"serving on\" printed (s)", _fmt(rec.get("serving_line_s"), 3)],
                ["spawn → every overdue deadline fired (pending = 0) (s)",
                 _fmt(rec.get("all_fired_s"), 3)],
                ["serving → all fired (s)", _fmt(rec.get("fired_after_serving_s"), 3)],
                ["expired after restart", _fmt(rec.get("expired_after"), 0)],
                ["rooms rebuilt", _fmt(rec.get("rebuilds"), 0)]]
        L.append(_table(rows))
        L.append("")
        if "recovery.png" in made:
            L.append(f"![recovery.png]({plots_dir}recovery.png)")
            L.append("")
    # -- overload
    ov = sc.get("overload", {})
    if ov and "error" not in ov:
        p = meta.get("plan", {})
        L.append("## 5. Overload: one hot room")
        L.append("")
        L.append(f"{p.get('overload_agents')} agents ask at {p.get('overload_rate')}/s each in "
                 f"their own rooms (paced), first alone (*calm*), then while one "
                 f"socket sends bursts of {p.get('flood_burst')} asks every "
                 f"{p.get('flood_interval_ms')} ms into one room (*flooded*, "
                 f"{_fmt(ov.get('flood_offered_per_s'))} asks/s offered); the hub runs with "
                 f"`--room-mailbox {p.get('overload_mailbox')}`.")
        L.append("")
        rows = [["phase", "cycles/s", "ask→answer p50 / p99 / max ms",
                 "answer→agent p50 / p99 ms", "server loop util", "errors"]]
        for ph in ("calm", "flooded"):
            x = ov["phases"][ph]
            a, b = x["ask_to_answer_ms"], x["answer_to_agent_ms"]
            rows.append([ph, _fmt(x["cycles_per_s"]),
                         f"{_fmt(a['p50'], 2)} / {_fmt(a['p99'], 2)} / {_fmt(a['max'], 1)}",
                         f"{_fmt(b['p50'], 2)} / {_fmt(b['p99'], 2)}",
                         _fmt(x["server_loop_util"], 2), _fmt(sum(x["errors"].values()))])
        L.append(_table(rows))
        L.append("")
        fl = ov.get("flood", {})
        L.append(f"Others' p99 ratio flooded ÷ calm: ask→answer "
                 f"**{_fmt(ov.get('others_p99_ratio_ask_to_answer'), 2)}×**, answer→agent "
                 f"{_fmt(ov.get('others_p99_ratio_answer_to_agent'), 2)}×. The hot room: "
                 f"{_fmt(fl.get('sent'))} asks sent, replies {fl.get('codes')}; every "
                 f"`overloaded` carried `retryable: false` "
                 f"({_fmt(fl.get('overloaded_not_retryable'))} of "
                 f"{_fmt((fl.get('codes') or {}).get('overloaded', 0))}).")
        rounds = ov.get("rounds") or []
        if len(rounds) > 1:
            L.append("")
            L.append(f"Calm and flooded alternated {len(rounds)} times; the table pools every "
                     "sample of every round. Each round's own answer→agent p99, calm → "
                     "flooded: " + "; ".join(
                         f"{_fmt(r['calm_p99_ms'], 2)} → {_fmt(r['flooded_p99_ms'], 2)} ms "
                         f"({_fmt(r['ratio'], 2)}×)" for r in rounds) + ".")
        L.append("")
        if "overload.png" in made:
            L.append(f"![overload.png]({plots_dir}overload.png)")
            L.append("")
    # -- journal
    jr = sc.get("journal", {})
    if jr and "error" not in jr and jr.get("journal_call_ms"):
        L.append("## 6. Journal: `running` + `done`")
        L.append("")
        L.append(f"{jr.get('runs')} durable runs at once, each on its own socket (SDK), each "
                 f"calling a trivial function {jr.get('calls_per_run')} times with about "
                 f"{_fmt(jr.get('think_ms'), 0)} ms between calls; `--sync {jr.get('sync')}`. "
                 "One call is `run.call` (the hub commits `running` before the function may "
                 "start) then `run.result` (the hub commits `done`), measured on the client. "
                 "Two `ping` round trips on the same sockets, in the same iterations, are the "
                 "floor of two frames without the store; two SQLite commits in a row, each "
                 "fsync'd, on the same disk and with the hub's settings (measured after the "
                 "runs), are the floor of the store.")
        L.append("")
        jc, pc = jr["journal_call_ms"], jr["baseline_two_pings_ms"]
        rows = [["", "p50 ms", "p90 ms", "p99 ms", "max ms", "count"]]
        fc = jr.get("floor_two_commits_ms") or {}
        for label, x in (("running + done", jc), ("two pings", pc),
                         ("two durable commits, SQLite alone", fc)):
            if not x:
                continue
            rows.append([label, _fmt(x.get("p50"), 2), _fmt(x.get("p90"), 2),
                         _fmt(x.get("p99"), 2), _fmt(x.get("max"), 1), _fmt(x.get("count"))])
        L.append(_table(rows))
        L.append("")
        if jr.get("floor_p50_ms"):
            L.append(f"The floor of a call on this machine (two pings' p50 + two commits' "
                     f"p50): {_fmt(jr['floor_p50_ms'], 2)} ms.")
            L.append("")
        L.append(f"{_fmt(jr.get('calls_per_s'))} calls/s; hub CPU {jr.get('hub_cpu_s')} s; "
                 f"other processes kept {jr.get('machine_busy_cores')} cores busy on average "
                 "(the hub and this client included).")
        L.append("")
    L.append("## Environment")
    L.append("")
    L.append(", ".join(f"{k} {val}" for k, val in v.items()) + ".")
    L.append("")
    return "\n".join(L)
