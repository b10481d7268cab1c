"""A per-stage CPU budget of one ask → answer cycle, from py-spy "raw" (collapsed) stacks.

Each sample is charged to one stage: walking its stack from the leaf up, the first frame
that matches a rule below names the stage (so ``orjson`` inside ``Request.view`` is view
building, a ``transport.write`` under ``Gateway.publish`` is send). Samples of the SQLite
writer thread are split by the line of ``_Writer._commit`` they are on (``COMMIT`` is the
fsync). A stage's µs per cycle is its share of the samples times the server CPU per cycle
measured in the same window (``/proc``), so the budget adds up to what the hub costs.

    .venv/bin/python -m bench._budget bench/results/profile.txt 346

The rules are heuristics over function names: read the "other" row before trusting the
rest, and ``--unmatched`` lists what fell there.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

from bench._collapse import stacks

_FRAME = re.compile(r"^(.*) \((.*?):(\d+)\)$")

#: (stage, function regex, file regex): first match from the leaf up wins.
RULES: list[tuple[str, str, str]] = [
    # the writer thread (its own rules come first: see _writer_stage)
    ("hand-off (queues, futures, thread wake-ups)",
     r"^(submit|_post|_deliver|call_soon_threadsafe|get|get_nowait|put|_run_once|"
     r"_write_to_self|_read_from_self|_process_self_data|set_result)$", r"sqlite\.py|queue|base_events|selector"),
    ("view building", r"^(view|listing|_snapshot)$", r"core\.py|service\.py"),
    ("push encode", r"^(encode_text|ok_frame|error_frame|resolved_frame|inbox_add_frame|"
     r"inbox_remove_frame|_frame_text|frame_text|_view_text)$", r"protocol\.py|service\.py|ws\.py|core\.py"),
    ("send (Connection.push → Starlette → uvicorn → socket)",
     r"^(push|publish|send|send_text|_send|sender|data_to_send|send_frame|serialize|"
     r"write|_flush|_finish|send_data|encode_frame|apply_mask|write_now|flush_tick|flush|"
     r"add)$",
     r"gateway\.py|websockets|starlette|uvicorn|_exception_handler|ws\.py|frames\.py|protocol\.py"),
    ("frame decode", r"^(decode_client_frame|too_deep|parse_ask|_parse_\w+|_name|_req|_wait|"
     r"_opt_number|_expires_in|<lambda>|loads|is_name|check_name)$", r"protocol\.py"),
    ("frame receive (uvicorn → Starlette receive)",
     r"^(data_received|handle_events|handle_text|send_receive_event_to_app|receive|"
     r"receive_text|receive_data|events_received|parse|recv_frame|parse_frame|read_exact|"
     r"read_line|read_to_eof|__next__|put_nowait|get|unmask|apply_mask|_receive)$",
     r"uvicorn|websockets|starlette|streams\.py|frames\.py|queues\.py"),
    ("core (RoomCore.handle)", r".*", r"core\.py"),
    ("journal (decide + SQL shell)", r".*", r"journal\.py|journal_sql\.py|runs_api\.py"),
    ("store encode (ops → rows)", r"^(_bulk|_payload|request_payload|apply_op|apply)$",
     r"sqlite\.py|rows\.py"),
    ("store read (aiosqlite)", r".*", r"aiosqlite"),
    ("admission (session, limits, routing)",
     r"^(handle|allow|check_ask|payload_bytes|request_bytes|known_human|_usage|_release|ask|"
     r"respond|post_op|room_of|_reply_for|reply|settle|rid|subscribe|unsubscribe|_exists)$",
     r"ws\.py|service\.py|gateway\.py"),
    ("room task (mailbox, batch, wake-ups)", r".*", r"rooms\.py"),
    ("effects (emit: alarms, bus, routes)", r".*", r"service\.py|alarms\.py|bus\.py|faults\.py"),
    ("logging", r".*", r"logging|logs\.py"),
    ("event loop (tasks, callbacks)", r".*", r"asyncio|uvloop|base_events|events\.py"),
]
_COMPILED = [(s, re.compile(f), re.compile(p)) for s, f, p in RULES]

COMMIT_STAGE = "commit + fsync (COMMIT)"
SQL_STAGE = "commit (SQL statements)"


def _writer_stage(frames: list[tuple[str, str, int]], src: dict[str, list[str]]) -> str:
    """A writer-thread sample: the SQL statement, the COMMIT (fsync), the row building
    around them, or the queue."""
    for fn, path, line in reversed(frames):
        name = path.rsplit("/", 1)[-1]
        if name not in src:
            continue
        text = src[name][line - 1] if 0 < line <= len(src[name]) else ""
        if '"COMMIT"' in text:
            return COMMIT_STAGE
        if "execute" in text or "fetch" in text or "total_changes" in text:
            return SQL_STAGE
        if name == "sqlite.py" and fn.endswith(("_run", "submit", "_post", "get")):
            return "hand-off (queues, futures, thread wake-ups)"
        if name in ("journal_sql.py",):
            return "journal (decide + SQL shell)"
        return "store encode (ops → rows)"
    return SQL_STAGE


def classify(frames: list[tuple[str, str, int]]) -> str:
    for fn, path, _line in reversed(frames):
        if path.endswith("sqlite3/__init__.py") or fn == "execute" and "sqlite" in path:
            break
        for stage, fre, pre in _COMPILED:
            if pre.search(path) and fre.match(fn.rsplit(".", 1)[-1]):
                return stage
    return "other"


def _sources() -> dict[str, list[str]]:
    """The store's source lines (of the tree this file belongs to: the profiled one)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "hub" / "store"
    return {name: (root / name).read_text().splitlines()
            for name in ("sqlite.py", "journal_sql.py", "rows.py")}


def budget(path: str) -> tuple[Counter[str], int, Counter[str]]:
    src = _sources()
    stages: Counter[str] = Counter()
    unmatched: Counter[str] = Counter()
    total = 0
    for _, thread, parts, n in stacks(path):
        frames = []
        for p in parts:
            fm = _FRAME.match(p)
            if fm:
                frames.append((fm.group(1), fm.group(2), int(fm.group(3))))
            else:
                frames.append((p, "", 0))
        if thread.startswith("a2h-sqlite-writer"):
            stage = _writer_stage(frames, src)
        else:
            stage = classify(frames)
        stages[stage] += n
        total += n
        if stage == "other" and frames:
            unmatched[f"{frames[-1][0]} ({frames[-1][1].rsplit('/', 1)[-1]})"] += n
    return stages, total, unmatched


def render(path: str, us_per_cycle: float | None, unmatched_top: int = 0) -> str:
    stages, total, unmatched = budget(path)
    out = [f"samples: {total}" + (f"; server CPU {us_per_cycle:.0f} µs per cycle"
                                  if us_per_cycle else ""),
           "", "| stage | share of samples | µs per cycle |", "|---|---:|---:|"]
    for stage, n in stages.most_common():
        us = f"{us_per_cycle * n / total:.0f}" if us_per_cycle and total else "–"
        out.append(f"| {stage} | {100 * n / total:.1f} % | {us} |")
    if unmatched_top:
        out.append("\nunmatched (other), by leaf frame:")
        for k, n in unmatched.most_common(unmatched_top):
            out.append(f"  {100 * n / total:5.1f} %  {k}")
    return "\n".join(out)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(render(args[0], float(args[1]) if len(args) > 1 else None,
                 30 if "--unmatched" in sys.argv else 0))
