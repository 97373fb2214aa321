"""What the linker costs the spine: freshness (produce -> memory.indexed) p99 with the linker on vs off.

Runs `bench.bench_freshness` (the whole embedded stack as a child process, 420 entries/s of which 20/s
embeddable) alternately with the linker off (EPISODIC_LINKER_ENABLED=false) and on, `--rounds` times each
(off, on, off, on, ...), so that a machine shared with others drifts into both sides alike. Every run is
printed; the figure is the median of the on-runs' p99 against the median of the off-runs' p99, from the
same invocation. With the linker on, its own lag (memory.indexed produced -> similar edges written) comes
from the stack's `episodic_agent_lag_seconds{agent="linker"}`, and the edges it wrote.

Target: the linker adds at most 10 % to the freshness p99.

    python -m bench.bench_linker                      # 2 rounds of 30 s runs, short summaries
    python -m bench.bench_linker --quick              # 1 round of 10 s runs
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics

from bench.common import Row, emit

TARGET_ADDED = 0.10


def histogram_quantile(text: str, name: str, q: float, **labels: str) -> tuple[float, float]:
    """(quantile, count) of a Prometheus histogram in exposition `text` (linear within the bucket)."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: list[tuple[float, float]] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == f"{name}_bucket" and all(s.labels.get(k) == v for k, v in labels.items()):
                buckets.append((float(s.labels["le"]), s.value))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return float("nan"), 0.0
    total = buckets[-1][1]
    rank, prev_le, prev_n = q * total, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return prev_le, total
            return prev_le + (le - prev_le) * (rank - prev_n) / max(n - prev_n, 1e-9), total
        prev_le, prev_n = le, n
    return prev_le, total


def counter(text: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


def main(argv: list[str] | None = None) -> int:
    from bench import bench_freshness

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="one round of 10 s runs (a sanity check)")
    ap.add_argument("--rounds", type=int, default=None, help="off/on pairs (default 2, quick 1)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of load per run (default 30)")
    ap.add_argument("--mix", choices=("short", "mixed"), default="short")
    ap.add_argument("--start-timeout", type=float, default=180.0)
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    duration = args.duration or (10.0 if args.quick else 30.0)
    logging.basicConfig(level=logging.WARNING)
    run_args = argparse.Namespace(duration=duration, mix=args.mix, start_timeout=args.start_timeout, log=None)

    p99: dict[str, list[float]] = {"off": [], "on": []}
    linker_lag: list[float] = []
    edges: list[float] = []
    for i in range(rounds):
        for side in ("off", "on"):
            seen: list[str] = []
            env = {"EPISODIC_LINKER_ENABLED": "true" if side == "on" else "false"}
            print(f"\n--- round {i + 1}/{rounds}: linker {side} ---", flush=True)
            rows = asyncio.run(bench_freshness.run(run_args, extra_env=env, on_metrics=seen.append))
            value = next(r.value for r in rows if r.metric == "produce -> memory.indexed p99")
            p99[side].append(value)
            print(f"    linker {side}: produce -> memory.indexed p99 {value * 1000:.1f} ms")
            if side == "on" and seen:
                lag, n = histogram_quantile(seen[0], "episodic_agent_lag_seconds", 0.99, agent="linker")
                linker_lag.append(lag)
                edges.append(counter(seen[0], "episodic_similar_edges_total"))
                print(f"    linker lag p99 {lag * 1000:.0f} ms over {int(n)} events; {int(edges[-1])} similar edges")

    off, on = statistics.median(p99["off"]), statistics.median(p99["on"])
    runs = "; ".join(
        f"round {i + 1}: off {p99['off'][i] * 1000:.0f} ms, on {p99['on'][i] * 1000:.0f} ms" for i in range(rounds)
    )
    out = [
        Row(
            "linker",
            "freshness p99 with the linker on",
            on,
            "s",
            off,
            "the same with the linker off (median of runs)",
            target="<= 1.10 x off",
            ok=on <= off * (1 + TARGET_ADDED),
            note=f"{runs}; {duration:.0f}s runs alternating off/on, {args.mix} summaries, shared machine",
        )
    ]
    if linker_lag:
        out.append(
            Row(
                "linker",
                "linker lag p99 (memory.indexed -> edges)",
                statistics.median(linker_lag),
                "s",
                on,
                "freshness p99, linker on",
                note=f"from episodic_agent_lag_seconds (bucketed); similar edges per run: {[int(e) for e in edges]}",
            )
        )
    emit(out, f"linker cost on the spine ({rounds} x off/on, {duration:.0f}s each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
