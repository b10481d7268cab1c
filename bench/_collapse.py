"""Summarize py-spy "raw" (collapsed) stacks: self and inclusive sample share per function."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator

_THREAD = re.compile(r"^thread \((\d+)\): ?(.*)$")


def stacks(path: str) -> Iterator[tuple[str, str, list[str], int]]:
    """Each line of a collapsed-stack file: (thread id, thread name, frames root first,
    samples); ("?", "", ...) when the line names no thread."""
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, n_s = line.rpartition(" ")
            frames = stack.split(";")
            m = _THREAD.match(frames[0]) if frames else None
            if m:
                yield m.group(1), m.group(2), frames[1:], int(n_s)
            else:
                yield "?", "", frames, int(n_s)


def summarize(path: str, top: int = 30, thread: str | None = None) -> str:
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for tid, tname_, frames, n in stacks(path):
        tname = f"{tname_} {tid}" if tid != "?" else "?"
        threads[tname] += n
        if thread is not None and thread not in tname:
            continue
        total += n
        if frames:
            self_c[_short(frames[-1])] += n
        for fr in set(_short(x) for x in frames):
            incl[fr] += n
    out = [f"samples: {total}", "threads: " + ", ".join(f"{k}={v}" for k, v in threads.most_common())]
    out.append(f"\n{'self %':>7}  function")
    for fn, n in self_c.most_common(top):
        out.append(f"{100 * n / total:7.1f}  {fn}")
    out.append(f"\n{'incl %':>7}  function")
    for fn, n in incl.most_common(top):
        out.append(f"{100 * n / total:7.1f}  {fn}")
    return "\n".join(out)


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"; keep the line for our own code
    m = re.match(r"^(.*) \((.*?):(\d+)\)$", frame)
    if not m:
        return frame
    fn, path, line = m.groups()
    name = path.rsplit("/", 1)[-1]
    return f"{fn} ({name})"


if __name__ == "__main__":
    print(summarize(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30,
                    sys.argv[3] if len(sys.argv) > 3 else None))
