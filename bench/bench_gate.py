"""Gate throughput vs a raw aiokafka consumer on the same topic, on a fresh embedded broker (Apache Kafka).

    python -m bench.bench_gate            # 200k records per topic
    python -m bench.bench_gate --quick    # 20k records, for a smoke run

For each topic (1 and 4 partitions) the same N mixed journal records (≈ 60 % skipped by the policy,
≈ 27 % embeddable, ≈ 8 % invalid) are read by:

- the baseline: a raw aiokafka consumer (no group, all partitions assigned) that only counts records;
- the gate: 1 or 2 `python -m stack.cli gate` processes (the `episodic gate` role) in one consumer group.

Rates are records of the journal per second. The gate's window runs from its first to its last output
record (broker-side CreateTime of the records on journal.embeddable and journal.dlq), so group join and
process start are not counted; the baseline's from its assignment (no group join) to its last record
received. Every gate figure is printed next to the baseline measured on the same topic in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.common import started_broker
from episodic.bus.kafka import ensure_topics, make_producer
from episodic.indexing.gating import DeadLetter, Forward, route

SKIP_TYPES = ("peer.conversation", "exec.output_chunk", "container.metrics", "network.request", "tool.call")
EMBED_TYPES = ("peer.escalation", "summary.generated", "approval.denied", "eval.regression_detected")
WORDS = [
    *("the", "agent", "asked", "for", "approval", "to", "deploy", "build"),
    *("failed", "retry", "network", "timeout", "user", "escalated", "plan"),
]


def make_records(n: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """n (key, value) journal records: mostly valid entries, some garbage of every kind."""
    rnd = random.Random(seed)
    out: list[tuple[bytes, bytes]] = []
    for i in range(n):
        ws = f"ws-{i % 16}"
        r = rnd.random()
        entry: dict[str, object] = {
            "id": f"e-{i}",
            "workspace_id": ws,
            "crew_id": "crew-1",
            "agent_id": f"agent-{i % 7}",
            "run_id": f"run-{i // 50}",
            "ts": "2026-03-01T12:00:00Z",
            "entry_type": rnd.choice(SKIP_TYPES),
            "severity": "info",
            "summary": " ".join(rnd.choices(WORDS, k=30)),
            "payload": {"step": i, "tool": "shell"},
        }
        if r < 0.25:
            entry["entry_type"] = rnd.choice(EMBED_TYPES)
        elif r < 0.35:
            entry["entry_type"] = "keeper.decision"
            entry["severity"] = rnd.choice(("info", "warn", "error"))
        elif r < 0.37:
            entry["refs"] = {"episodic": True}
        elif r < 0.40:
            entry["severity"] = "fatal"
        elif r < 0.42:
            entry["ts"] = "yesterday"
        elif r < 0.43:
            del entry["agent_id"]
        value = json.dumps(entry).encode()
        if 0.43 <= r < 0.45:
            value = b"\xff\xfe not utf-8"
        elif 0.45 <= r < 0.46:
            value = b"[1, 2, 3]"
        elif 0.46 <= r < 0.47:
            value = b"{not json"
        out.append((ws.encode(), value))
    return out


def expected_outputs(records: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    now = datetime.now(UTC)
    fwd = dlq = 0
    for i, (_, v) in enumerate(records):
        r = route(v, topic="t", partition=0, offset=i, now=now)
        fwd += isinstance(r, Forward)
        dlq += isinstance(r, DeadLetter)
    return fwd, dlq


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    p = make_producer(bootstrap, linger_ms=20, max_batch_size=256 * 1024)
    await p.start()
    t0 = time.perf_counter()
    try:
        futs = []
        for k, v in records:
            futs.append(await p.send(topic, key=k, value=v))
            if len(futs) >= 20_000:
                await asyncio.gather(*futs)
                futs.clear()
        await asyncio.gather(*futs)
    finally:
        await p.stop()
    return len(records) / (time.perf_counter() - t0)


async def raw_consume(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    """Baseline: a bare aiokafka consumer counting records; records/s from assignment to the last record."""
    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await c.start()
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        t_first = time.perf_counter()
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=1000, max_records=10_000)
            for recs in batch.values():
                got += len(recs)
        if got < n:
            raise RuntimeError(f"raw consumer read {got} of {n}")
        return n / (time.perf_counter() - t_first)
    finally:
        await c.stop()


async def count_outputs(bootstrap: str, topics: list[str], want: int, timeout: float) -> tuple[int, int, int]:
    """Read the gate's output topics until `want` records; return (count, first CreateTime, last) in ms."""
    c = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await c.start()
    try:
        got, first, last = 0, 2**62, 0
        deadline = time.monotonic() + timeout
        while got < want and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500, max_records=10_000)
            for recs in batch.values():
                got += len(recs)
                for r in recs:
                    first = min(first, r.timestamp)
                    last = max(last, r.timestamp)
        return got, first, last
    finally:
        await c.stop()


@dataclass
class GateRun:
    partitions: int
    workers: int
    rate: float
    outputs_ok: bool


async def gate_run(
    bootstrap: str, entries: str, n: int, partitions: int, workers: int, want: tuple[int, int], datadir: str
) -> GateRun:
    tag = uuid.uuid4().hex[:8]
    emb, dlq = f"bench.embeddable.{tag}", f"bench.dlq.{tag}"
    await ensure_topics(bootstrap, partitions=partitions, topics=(emb, dlq))
    env = dict(
        os.environ,
        EPISODIC_KAFKA_BOOTSTRAP=bootstrap,
        EPISODIC_DATA_DIR=datadir,
        EPISODIC_TOPIC_PARTITIONS=str(partitions),
    )
    cmd = [
        sys.executable,
        "-m",
        "stack.cli",
        "gate",
        "--entries-topic",
        entries,
        "--embeddable-topic",
        emb,
        "--dlq-topic",
        dlq,
        "--app-id",
        f"bench-gate-{tag}",
        "--log-level",
        "WARNING",
    ]
    from infra.broker import free_port

    # each worker its own metrics port (two on the default 8080 would collide)
    procs = [subprocess.Popen(cmd, env={**env, "EPISODIC_HTTP_PORT": str(free_port())}) for _ in range(workers)]
    try:
        got, first, last = await count_outputs(bootstrap, [emb, dlq], sum(want), timeout=300)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    window = max(last - first, 1) / 1000.0
    return GateRun(partitions, workers, n / window, got == sum(want))


async def main_async(n: int, configs: list[tuple[int, int]]) -> None:
    stack = contextlib.ExitStack()
    broker = stack.enter_context(started_broker("kafka"))
    bs = broker.bootstrap
    records = make_records(n)
    want = expected_outputs(records)
    print(
        f"broker {bs} (Apache Kafka, embedded) | {n} records per topic | expected outputs: "
        f"{want[0]} embeddable + {want[1]} dlq | cpus {os.cpu_count()}"
    )
    rows: list[tuple[GateRun, float]] = []
    try:
        with tempfile.TemporaryDirectory() as datadir:
            topics: dict[int, str] = {}
            for parts in sorted({p for p, _ in configs}):
                topic = f"bench.entries.p{parts}.{uuid.uuid4().hex[:6]}"
                await ensure_topics(bs, partitions=parts, topics=(topic,))
                prate = await produce(bs, topic, records)
                topics[parts] = topic
                print(f"produced {n} to {parts} partition(s) at {prate:,.0f}/s")
            for parts, workers in configs:
                raw = await raw_consume(bs, topics[parts], n, parts)
                run = await gate_run(bs, topics[parts], n, parts, workers, want, datadir)
                rows.append((run, raw))
                print(
                    f"  p={parts} w={workers}: gate {run.rate:,.0f}/s  raw {raw:,.0f}/s  "
                    f"ratio {run.rate / raw:.1%}  outputs {'ok' if run.outputs_ok else 'MISSING'}",
                    flush=True,
                )
    finally:
        stack.close()
    print("\npartitions  workers  gate rec/s  raw rec/s  gate/raw  outputs")
    for run, raw in rows:
        print(
            f"{run.partitions:>10}  {run.workers:>7}  {run.rate:>10,.0f}  {raw:>9,.0f}  {run.rate / raw:>8.1%}  "
            f"{'complete' if run.outputs_ok else 'INCOMPLETE'}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true", help="20k records, for a smoke run")
    ap.add_argument(
        "--config",
        action="append",
        default=None,
        metavar="PARTITIONS:WORKERS",
        help="runs to make (default: 1:1 4:1 4:2)",
    )
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.records
    configs = [tuple(int(x) for x in c.split(":")) for c in (args.config or ["1:1", "4:1", "4:2"])]
    asyncio.run(main_async(n, configs))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
