"""`make bench`: run every benchmark, each in its own process, and print one summary table.

Each benchmark prints its figure next to a baseline measured in the same run; the table collects their
rows. A benchmark that fails is reported (with its exit status) and the others still run.

    python -m bench.run_all                 # full sizes (take figures on a quiet machine)
    python -m bench.run_all --quick         # small sizes: a sanity check that everything runs
    python -m bench.run_all --only embed freshness
    python -m bench.run_all --only decay linker
    python -m bench.run_all --only soak        # the 10-minute soak alone (or: python -m bench.bench_soak)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import RESULTS_ENV, ROOT, Row, print_rows, tmp_dir

BENCHES: dict[str, str] = {
    "embed": "bench.bench_embed",
    "burst": "bench.bench_burst",
    "freshness": "bench.bench_freshness",
    "recall": "bench.bench_recall_latency",
    "decay": "bench.bench_decay",
    "linker": "bench.bench_linker",
    "health": "bench.bench_health",
    "soak": "bench.bench_soak",  # 10 minutes (--quick: 2)
    "context": "bench.bench_context",
    "chunking": "bench.bench_chunking",
    "render": "bench.bench_render",
    "explorer": "bench.bench_explorer",
    "integrity": "bench.bench_integrity",
    "index_build": "bench.bench_index_build",
    "index_stall": "bench.bench_index_stall",
    "recall_tail": "bench.bench_recall_tail",  # needs ../shared/datasets/locomo-dev (or EPISODIC_LOCOMO_DIR)
    "internal_topics": "bench.bench_internal_topics",  # two embedded brokers, one after the other
}
# Other benchmarks in the repo (owned elsewhere) that follow the same --quick convention; run if present.
OPTIONAL: dict[str, str] = {"gate": "bench.bench_gate"}
TIMEOUT_S = {
    "embed": 3600,
    "burst": 2400,
    "freshness": 1200,
    "recall": 5400,
    "recall_tail": 3600,
    "gate": 1800,
    "decay": 1800,
    "integrity": 1800,
    "linker": 1800,
    "health": 1200,
    "soak": 1800,
    "context": 1800,
    "chunking": 1800,
    "render": 600,
    "index_build": 2400,
    "index_stall": 1800,
    "internal_topics": 1200,
}


def _available(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).exists()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="small sizes for every benchmark")
    ap.add_argument("--only", nargs="+", choices=[*BENCHES, *OPTIONAL], help="run only these")
    args = ap.parse_args(argv)
    todo = {**BENCHES, **{k: v for k, v in OPTIONAL.items() if _available(v)}}
    if args.only:
        todo = {k: v for k, v in todo.items() if k in args.only}
    failures: list[str] = []
    rows: list[Row] = []
    with tmp_dir("episodic-bench-results-") as tmp:
        results = tmp / "rows.jsonl"
        results.touch()
        env = {**os.environ, RESULTS_ENV: str(results), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        for name, module in todo.items():
            cmd = [sys.executable, "-m", module, *(["--quick"] if args.quick else [])]
            print(f"\n##### {name}: {' '.join(cmd[1:])}", flush=True)
            t0 = time.monotonic()
            try:
                rc = subprocess.run(cmd, env=env, cwd=ROOT, timeout=TIMEOUT_S.get(name, 3600)).returncode
            except subprocess.TimeoutExpired:
                rc = 124
            print(f"##### {name}: exit {rc} after {time.monotonic() - t0:.0f}s", flush=True)
            if rc != 0:
                failures.append(f"{name} (exit {rc})")
        for line in results.read_text().splitlines():
            d = json.loads(line)
            rows.append(Row(**d))
    print("\n" + "=" * 100)
    print(f"SUMMARY ({'quick sizes: sanity check only' if args.quick else 'full sizes'})")
    for bench in dict.fromkeys(r.bench for r in rows):
        print_rows([r for r in rows if r.bench == bench], bench)
    silent = [n for n in todo if n not in {r.bench for r in rows} and not any(n in f for f in failures)]
    if silent:
        print(f"\n(no table rows from {', '.join(silent)}: see their own output above)")
    if failures:
        print(f"\nFAILED: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
