"""The gate's per-record cost: `episodic.indexing.gating.route()` over realistic journal records, this tree vs another.

    python -m bench.bench_route                          # this tree only
    python -m bench.bench_route --baseline /work/main    # and a baseline tree, alternating, same run

The records are `bench.bench_gate.make_records` (the gate benchmark's mix: ≈ 60 % skipped by the policy,
≈ 27 % forwarded, ≈ 8 % dead-lettered; about 400 bytes each). Each tree is timed in its own process (the
two trees have modules of the same names), the processes alternate `--rounds` times, and the best round
of each is reported in µs per record, with the ratio, next to the floor measured in the same processes:
`msgspec.json.decode` of the same bytes into plain dicts (parsing them, nothing else). No broker: this is
`route()` alone, the part of the gate's time that the entry schema decides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TIMER = r"""
import json, sys, time
from datetime import UTC, datetime
from bench.bench_gate import make_records
from episodic.indexing.gating import DeadLetter, Forward, Skip, route

n, repeat = int(sys.argv[1]), int(sys.argv[2])
values = [v for _, v in make_records(n)]
now = datetime.now(UTC)
kinds = {"forward": 0, "skip": 0, "dead_letter": 0}
for i, v in enumerate(values):
    r = route(v, topic="t", partition=0, offset=i, now=now)
    kinds["forward" if isinstance(r, Forward) else "skip" if isinstance(r, Skip) else "dead_letter"] += 1
groups = {"all": values}
for name, cls in (("forward", Forward), ("skip", Skip), ("dead_letter", DeadLetter)):
    groups[name] = [v for v in values if isinstance(route(v, topic="t", partition=0, offset=0, now=now), cls)]
best = {}
for name, vs in groups.items():
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i, v in enumerate(vs):
            route(v, topic="t", partition=0, offset=i, now=now)
        times.append((time.perf_counter() - t0) / len(vs))
    best[name] = min(times) * 1e6
import msgspec
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    for v in values:
        try:
            msgspec.json.decode(v)
        except msgspec.DecodeError:
            pass
    times.append((time.perf_counter() - t0) / len(values))
best["bare decode"] = min(times) * 1e6
print(json.dumps({"us": best, "kinds": kinds}))
"""


def time_tree(tree: Path, n: int, repeat: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", TIMER, str(n), str(repeat)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5, help="timed passes per process (best is kept)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, alternating")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to compare with")
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    trees = {"this tree": here} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    best: dict[str, dict[str, float]] = {}
    kinds: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            got = time_tree(tree, args.records, args.repeat)
            kinds[label] = got["kinds"]
            prev = best.get(label)
            best[label] = got["us"] if prev is None else {k: min(v, prev[k]) for k, v in got["us"].items()}
    print(f"route() per record, best of {args.rounds} processes x {args.repeat} passes, {args.records} records")
    print(f"records: {kinds['this tree']}")
    cols = ["all", "forward", "skip", "dead_letter", "bare decode"]
    print(f"{'tree':>10}  " + "  ".join(f"{c:>12}" for c in cols))
    for label in trees:
        print(f"{label:>10}  " + "  ".join(f"{best[label][c]:>10.2f}us" for c in cols))
    if args.baseline:
        ratio = [best["baseline"][c] / best["this tree"][c] for c in cols[:-1]]
        print(f"{'speed-up':>10}  " + "  ".join(f"{r:>11.2f}x" for r in ratio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
