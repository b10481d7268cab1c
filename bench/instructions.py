"""Instructions per cycle of the hub's own work: ``bench.hubonly`` under valgrind's callgrind.

    .venv/bin/python -m bench.instructions [--agents 200] [--cycles 2000 6000]
        [--tree DIR [DIR ...]] [--rounds 1] [--json]

CPU time on this kind of machine moves by ±15 % from one run to the next (a shared
virtual machine): a change worth less than that cannot be seen in whole-hub runs. An
instruction count does not depend on what else the machine does. Each tree runs
``bench.hubonly`` twice under ``valgrind --tool=callgrind``, at two cycle counts; the
difference of the two counts over the difference of the cycles cancels start-up, imports
and warm-up, and leaves the instructions of one ask → answer cycle: decode, admission,
rooms, core, store (SQLite included), views, encoding, fan-out. Not counted: the kernel
(system calls, fsync), and the WebSocket protocol and sockets, which ``bench.hubonly``
leaves out.

Valgrind runs the threads one at a time, so the writer's batches differ from a real run's.
On a quiet machine the same tree gives the same figure to about 0.5 %; with other work
running beside it the batches, and the count, move by a few % (docs/performance.md, sixth
pass): run it alone.

With several ``--tree`` (each a checkout of this repository) the trees alternate, round by
round, and the table gives each tree's figure and its ratio to the first.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from statistics import median

import orjson

_COLLECTED = re.compile(r"Collected\s*:\s*([0-9]+)")


def count(tree: Path, agents: int, cycles: int, warmup: int) -> int:
    """Instructions callgrind counted for one ``bench.hubonly`` process run from ``tree``."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         "-m", "bench.hubonly", "--agents", str(agents), "--cycles", str(cycles),
         "--warmup", str(warmup)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800, check=False)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"bench.hubonly under callgrind failed ({proc.returncode}):\n"
                           + proc.stderr[-2000:] + proc.stdout[-2000:])
    return int(found.group(1))


def per_cycle(tree: Path, agents: int, low: int, high: int, warmup: int) -> float:
    """Instructions of one cycle: (count at ``high`` − count at ``low``) / (high − low)."""
    if high <= low:
        raise ValueError("the second cycle count must be the larger")
    return (count(tree, agents, high, warmup) - count(tree, agents, low, warmup)) / (high - low)


def measure(trees: list[Path], agents: int, low: int, high: int, warmup: int,
            rounds: int) -> list[dict[str, object]]:
    figures: dict[Path, list[float]] = {t: [] for t in trees}
    for _ in range(rounds):
        for tree in trees:
            figures[tree].append(per_cycle(tree, agents, low, high, warmup))
    first = median(figures[trees[0]])
    return [{"tree": str(t), "instructions_per_cycle": round(median(v)),
             "rounds": [round(x) for x in v], "ratio": round(median(v) / first, 4)}
            for t, v in figures.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--cycles", type=int, nargs=2, default=[2000, 6000], metavar=("LOW", "HIGH"))
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--tree", type=Path, nargs="+", default=[Path(__file__).resolve().parent.parent])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    rows = measure([t.resolve() for t in args.tree], args.agents, args.cycles[0],
                   args.cycles[1], args.warmup, max(1, args.rounds))
    if args.json:
        print(orjson.dumps(rows).decode())
        return 0
    print(f"instructions per ask -> answer cycle (bench.hubonly, {args.agents} agents, "
          f"cycles {args.cycles[0]} -> {args.cycles[1]})")
    for row in rows:
        print(f"{row['instructions_per_cycle']:>10,}  x{row['ratio']:.3f}  {row['tree']}  "
              f"rounds {row['rounds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
