"""What Kafka's own compacted topics (`__consumer_offsets`, `__transaction_state`) hold on disk under a steady
stream of transactions, with Kafka's default segment size (100 MiB) against a small one, in the same run.

    python -m bench.bench_internal_topics                  # 40k transactions per broker
    python -m bench.bench_internal_topics --quick          # 12k
    python -m bench.bench_internal_topics --small-only --delete-retention-ms 20000   # markers kept 20 s

Why: the 30-minute soak on the embedded broker (docs/benchmarks.md) saw its log grow by about 1 MiB a minute
without a plateau once the journal's retention was deleting. Both internal topics are compacted, and Kafka
compacts only segments that have rolled: the active segment of each of their partitions grows to its
segment size (100 MiB by default; 10 partitions each on the embedded broker) before the cleaner may look at
it, so until then every offset commit and every transaction marker stays on disk; and the cleaner keeps
each transaction's commit marker (one per transaction in `__consumer_offsets`) for `delete.retention.ms`
after it cleaned the segment.

Each broker is a fresh embedded Apache Kafka (`infra.broker.KafkaBroker`, one node) with the given segment size
for both internal topics. The workload is the gate's under exactly-once: `--tids` transactional producers,
each transaction one small record and the next offset of a consumer group, committed; the producers run
side by side. Every `--every` transactions the sizes of the two topics' directories are printed (du, MiB).
The figure: the size at the end, and how it moved over the last third of the run (a plateau is flat).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.common import Row, emit
from infra.broker import KafkaBroker, free_port

INTERNAL = ("__consumer_offsets", "__transaction_state")
TOPICS = ("bench.internal", "bench.internal.in")


def du_mib(root: Path, prefix: str) -> float:
    """MiB on disk of every partition directory of a topic under a broker's log directory."""
    dirs = [str(p) for p in root.rglob(f"{prefix}-*") if p.is_dir()]
    if not dirs:
        return 0.0
    out = subprocess.run(["du", "-sk", "--total", *dirs], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0]) / 1024


async def workload(bootstrap: str, *, transactions: int, tids: int, every: int, root: Path) -> list[tuple]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        # the output, and the input whose offsets the transactions commit (a partition per producer)
        await admin.create_topics([NewTopic(t, num_partitions=tids, replication_factor=1) for t in TOPICS])
    finally:
        await admin.close()
    producers = [
        AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"bench-tid-{i}", linger_ms=0)
        for i in range(tids)
    ]
    for p in producers:
        await p.start()
    rows = []
    t0 = time.monotonic()
    done = 0

    async def one(i: int, p: AIOKafkaProducer) -> None:
        nonlocal done
        for n in range(i, transactions, tids):
            async with p.transaction():
                await p.send("bench.internal", b"x" * 64, partition=i)
                await p.send_offsets_to_transaction({TopicPartition("bench.internal.in", i): n + 1}, "bench-g")
            done += 1
            if done % every == 0:
                sizes = tuple(du_mib(root, t) for t in INTERNAL)
                rows.append((done, time.monotonic() - t0, *sizes))
                print(f"  {done:>7} transactions {rows[-1][1]:6.0f} s: " + ", ".join(
                    f"{t} {s:6.2f} MiB" for t, s in zip(INTERNAL, sizes, strict=True)), flush=True)  # fmt: skip

    try:
        await asyncio.gather(*(one(i, p) for i, p in enumerate(producers)))
    finally:
        for p in producers:
            await p.stop()
    return rows


class _Broker(KafkaBroker):
    """The embedded broker with more server.properties (the cleaner's settings under test)."""

    def __init__(self, extra: dict[str, str], **kw: Any) -> None:
        super().__init__(**kw)
        self.extra = extra

    def config(self, node: Any) -> dict[str, str]:
        return {**super().config(node), **self.extra}


def run(segment_bytes: int | None, extra: dict[str, str], args: argparse.Namespace) -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="bench-internal-") as tmp:
        root = Path(tmp) / "kafka"
        broker = _Broker(extra, data_dir=root, port=free_port(), log_file=Path(tmp) / "kafka.log",
                         internal_segment_bytes=segment_bytes)  # fmt: skip
        broker.start(timeout=180)
        try:
            return asyncio.run(
                workload(broker.bootstrap, transactions=args.transactions, tids=args.tids, every=args.every, root=root)
            )
        finally:
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=40_000)
    ap.add_argument("--tids", type=int, default=4, help="transactional producers (the gate: one per partition)")
    ap.add_argument("--every", type=int, default=4_000)
    ap.add_argument("--small", type=int, default=1024 * 1024, help="the small segment size, bytes")
    ap.add_argument("--small-only", action="store_true", help="the small segment size alone (a longer run)")
    ap.add_argument("--delete-retention-ms", type=int, default=0,
                    help="log.cleaner.delete.retention.ms for the small size (how long the cleaner keeps "
                         "tombstones and transaction markers; default Kafka's 24 h, the broker ships 1 h)")  # fmt: skip
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.transactions, args.every = 12_000, 2_000
    results = {}
    # the broker's shipped marker retention is 1 hour (infra.broker.kafka); here Kafka's day unless told
    kept_ms = args.delete_retention_ms or 86_400_000
    extra = {"log.cleaner.delete.retention.ms": str(kept_ms)}
    small = f"{args.small / 2**20:g} MiB, markers kept {kept_ms / 1000:g} s"
    sizes: list[tuple[str, int, dict[str, str]]] = [(small, args.small, extra)]
    if not args.small_only:
        sizes.insert(0, ("Kafka's default (100 MiB)", 0, {}))
    for label, seg, more in sizes:
        print(f"{label}:", flush=True)
        results[label] = run(seg or None, more, args)
    print("\nthe two internal topics together, MiB: at two thirds of the run -> at its end")
    growth = {}
    for label, rows in results.items():
        if len(rows) < 3:
            raise SystemExit(f"{label}: fewer than 3 samples (--transactions should be at least 3 x --every)")
        mid, last = rows[(2 * len(rows)) // 3 - 1], rows[-1]
        growth[label] = sum(last[2:]) - sum(mid[2:])
        print(f"  {label:>26}: {sum(mid[2:]):7.2f} -> {sum(last[2:]):7.2f}  ({last[1]:.0f} s, "
              f"{last[0] / last[1]:.0f} transactions/s)")  # fmt: skip
    if len(growth) == 2:
        (base_label, base), (label, grown) = growth.items()
        row = Row("internal_topics", f"growth over the last third, {label}", round(grown, 2), "MiB",
                  baseline=round(base, 2), baseline_label=base_label, note="two internal topics together")  # fmt: skip
        emit([row], "Kafka's own compacted topics")


if __name__ == "__main__":
    main()
