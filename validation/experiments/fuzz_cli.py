"""One-off fuzz run of the gpumodel CLI (issue #20), not part of CI.

    python validation/experiments/fuzz_cli.py --cases 3000 --seed 1 [--against /work/main]

Random command lines over every command (tests/cli_cases.py: valid values, and hostile numbers,
text and paths at a random rate), each run in-process under a time limit, classified as ok,
error (exit 2, one line) or a finding: traceback, hang, memory, nonfinite, negative, bad-exit,
multiline. Prints the counts per class and the first findings of each class. ``--against``: a
checkout whose gpumodel to fuzz instead of this one (for before/after counts).
"""

from __future__ import annotations

import argparse
import collections
import random
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit-s", type=float, default=30.0)
    ap.add_argument("--memory-gb", type=float, default=3.0)
    ap.add_argument("--against", default=str(HERE))
    args = ap.parse_args()
    sys.path[:0] = [args.against, str(HERE / "tests")]
    lim = int(args.memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))  # a MemoryError, not the OOM killer
    import cli_cases as cc

    rng = random.Random(args.seed)
    cmds = cc.commands()

    def choose(kind, key, pool):
        if kind == "include":
            return rng.random() < 0.4
        if kind == "hostile":
            return rng.random() < 0.3
        return rng.choice(pool)

    tally: collections.Counter[str] = collections.Counter()
    findings: dict[str, list] = collections.defaultdict(list)
    t0 = time.time()
    for _ in range(args.cases):
        path, cmd = rng.choice(cmds)
        o = cc.run_cli(cc.build_argv(path, cmd, choose), args.limit_s)
        tally[o.kind] += 1
        if o.kind not in ("ok", "error"):
            findings[o.kind].append(o)
    print(f"{args.cases} cases against {args.against} in {time.time() - t0:.0f} s: {dict(tally)}")
    for kind, items in findings.items():
        print(f"\n{kind}: {len(items)}")
        for o in items[:5]:
            print("  gpumodel " + " ".join(o.argv)[:200])
            print("    " + o.detail.replace("\n", " | ")[:300])


if __name__ == "__main__":
    main()
