"""Exactly-once for the gate: what Kafka transactions cost it, against at-least-once in the same run.

    python -m bench.bench_eos            # 6 rounds: 60k records per throughput run, 20 s of latency per round
    python -m bench.bench_eos --quick    # 1 round: 20k records, 8 s
    python -m bench.bench_eos --gate-arg=--transaction-batches=16    # an `episodic gate` option for every gate

One embedded Apache Kafka for the whole run. Every run is one `episodic gate` process (`python -m stack.cli
gate`, the role as it is deployed) on fresh output topics and a fresh consumer group, with
EPISODIC_GATE_EXACTLY_ONCE=false (at-least-once, the baseline) or true (the batches' output and offsets in
transactions, one per partition at a time: docs/pipeline.md, "Exactly-once for the gate"). Each round runs
both modes, the order alternating between rounds, so that the machine's noise falls on both. Every figure is
read by a `read_committed` consumer, the way the gate's readers read under exactly-once:

- throughput: N mixed journal records (bench_gate's mix: ~60 % skipped by the policy, ~27 % embeddable, ~8 %
  garbage) are on a 4-partition journal before the gate starts; the rate is N over the time from the first to
  the last output record arriving at the consumer (group join and process start are not counted). The run
  also checks that exactly the expected outputs arrived (no record missing, none twice), and takes the CPU
  seconds the gate process and the broker spent over that window, per 100k journal records, and the gate
  process's peak RSS;
- latency: journal entries at a steady rate (`--rate`, every other one embeddable), for `--seconds`; per
  embeddable entry, the time from handing it to the producer to its arrival on journal.embeddable at the
  consumer: p50 and p99.

The summary gives the medians over the rounds, and each exactly-once figure as a ratio to the at-least-once
one of the same round: the median of those ratios (what the target is judged by) and their range.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.bench_gate import expected_outputs, make_records, produce
from bench.common import Row, child_process, cpu_seconds, emit, percentile, rss_mib, started_broker
from episodic.bus.kafka import ensure_topics, make_producer

PARTITIONS = 4
MODES = ("at-least-once", "exactly-once")
READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 60.0


@dataclass
class Throughput:
    rate: float  # journal records per second
    complete: bool  # exactly the expected outputs, none twice
    gate_cpu: float  # CPU seconds per 100k journal records over the window
    broker_cpu: float
    gate_rss: float  # the gate process's peak resident memory over the window, MiB


@dataclass
class Latency:
    p50: float
    p99: float
    n: int
    missing: int
    raw_p50: float  # the same entries on the journal itself, at the same consumer: the broker round trip
    raw_p99: float


@dataclass
class Round:
    throughput: dict[str, Throughput] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)


def committed_reader(bootstrap: str, *topics: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )


GATE_ARGS: list[str] = []  # more `episodic gate` options for every gate (--gate-arg)


@contextlib.contextmanager
def gate_process(
    bootstrap: str, entries: str, out: tuple[str, str], mode: str, datadir: str, log: Path
) -> Iterator[Any]:
    from infra.broker import free_port

    tag = uuid.uuid4().hex[:8]
    env = dict(
        os.environ,
        EPISODIC_KAFKA_BOOTSTRAP=bootstrap,
        EPISODIC_DATA_DIR=datadir,
        EPISODIC_TOPIC_PARTITIONS=str(PARTITIONS),
        EPISODIC_HTTP_PORT=str(free_port()),
        EPISODIC_GATE_EXACTLY_ONCE="true" if mode == "exactly-once" else "false",
    )
    cmd = [
        sys.executable, "-m", "stack.cli", "gate", "--entries-topic", entries, "--embeddable-topic", out[0],
        "--dlq-topic", out[1], "--app-id", f"bench-eos-{tag}", "--log-level", "WARNING", *GATE_ARGS,
    ]  # fmt: skip
    with child_process(cmd, env=env, log_path=log) as proc:
        yield proc


async def output_topics(bootstrap: str) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    out = (f"bench.eos.embeddable.{tag}", f"bench.eos.dlq.{tag}")
    await ensure_topics(bootstrap, partitions=PARTITIONS, topics=out)
    return out


async def throughput_run(
    bootstrap: str, entries: str, n: int, want: int, mode: str, datadir: str, broker_pid: int, log: Path
) -> Throughput:
    out = await output_topics(bootstrap)
    reader = committed_reader(bootstrap, *out)
    await reader.start()
    try:
        with gate_process(bootstrap, entries, out, mode, datadir, log) as proc:
            seen: set[tuple[str, int, int]] = set()
            got = 0
            first = last = 0.0
            cpu0 = (0.0, 0.0)
            rss = 0.0
            deadline = time.monotonic() + 300
            while got < want and time.monotonic() < deadline:
                batch = await reader.getmany(timeout_ms=500, max_records=20_000)
                now = time.perf_counter()
                for recs in batch.values():
                    if recs and not first:
                        first, cpu0 = now, (cpu_seconds(proc.pid), cpu_seconds(broker_pid))
                    got += len(recs)
                    seen.update((r.topic, r.partition, r.offset) for r in recs)
                    last = now
                rss = max(rss, rss_mib(proc.pid))
            cpu1 = (cpu_seconds(proc.pid), cpu_seconds(broker_pid))
            # a little longer: a record written twice would arrive now
            extra = await reader.getmany(timeout_ms=1000)
            got += sum(len(recs) for recs in extra.values())
    finally:
        await reader.stop()
    window = max(last - first, 1e-3)
    per = 100_000 / n
    return Throughput(
        rate=n / window,
        complete=got == want == len(seen),
        gate_cpu=(cpu1[0] - cpu0[0]) * per,
        broker_cpu=(cpu1[1] - cpu0[1]) * per,
        gate_rss=rss,
    )


def latency_entry(i: int, tag: str, embeddable: bool) -> tuple[bytes, bytes]:
    ws = f"ws-{i % 16}"
    entry = {
        "id": f"lat-{tag}-{i}",
        "workspace_id": ws,
        "crew_id": "crew-1",
        "agent_id": f"agent-{i % 7}",
        "run_id": f"run-{i // 50}",
        "ts": "2026-03-01T12:00:00Z",
        "entry_type": "summary.generated" if embeddable else "exec.output_chunk",
        "severity": "info",
        "summary": f"step {i} of the deploy finished; the build passed and the agent moved on",
        "payload": {"step": i},
    }
    return ws.encode(), json.dumps(entry).encode()


async def latency_run(bootstrap: str, rate: int, seconds: float, datadir: str, logs: Path) -> dict[str, Latency]:
    """Both gates at once, each in its own group, on the same live journal: the same entries, the same moments,
    the same machine load; one consumer reads both outputs (and the journal: the broker round trip)."""
    tag = uuid.uuid4().hex[:8]
    entries = f"bench.eos.entries.{tag}"
    await ensure_topics(bootstrap, partitions=PARTITIONS, topics=(entries,))
    outs = {mode: await output_topics(bootstrap) for mode in MODES}
    mode_of = {out[0]: mode for mode, out in outs.items()}
    sent: dict[bytes, float] = {}
    arrived: dict[str, dict[bytes, float]] = {mode: {} for mode in (*MODES, "journal")}
    reader = committed_reader(bootstrap, entries, *(out[0] for out in outs.values()))
    producer = make_producer(bootstrap)
    await reader.start()
    await producer.start()
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            batch = await reader.getmany(timeout_ms=100)
            now = time.time()
            for tp, recs in batch.items():
                seen = arrived[mode_of.get(tp.topic, "journal")]
                for r in recs:
                    seen.setdefault(json.loads(r.value)["id"].encode(), now)

    reading = asyncio.create_task(read())
    try:
        with contextlib.ExitStack() as gates:
            for mode, out in outs.items():
                log = logs / f"lat-{tag}-{mode}.log"
                gates.enter_context(gate_process(bootstrap, entries, out, mode, datadir, log))
            # warm-up: one embeddable entry per workspace until each came through both gates (they joined)
            warm = [latency_entry(i, f"warm-{tag}", True) for i in range(16)]
            deadline = time.monotonic() + READY_TIMEOUT_S
            for k, v in warm:
                await (await producer.send(entries, key=k, value=v))
            for mode in MODES:
                while len([k for k in arrived[mode] if k.startswith(b"lat-warm-")]) < len(warm):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{mode}: the gate did not come up within {READY_TIMEOUT_S:.0f}s ({logs})")
                    await asyncio.sleep(0.05)
            tick = 0.01
            per_tick = max(1, round(rate * tick))
            t0 = time.monotonic()
            i = 0
            while time.monotonic() - t0 < seconds:
                for _ in range(per_tick):
                    k, v = latency_entry(i, tag, i % 2 == 0)
                    if i % 2 == 0:
                        sent[f"lat-{tag}-{i}".encode()] = time.time()
                    await producer.send(entries, key=k, value=v)
                    i += 1
                next_tick = t0 + (i // per_tick) * tick
                await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            await producer.flush()
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while any(k not in arrived[mode] for k in sent for mode in MODES) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        await reading
        await producer.stop()
        await reader.stop()
    raw = [arrived["journal"][k] - t for k, t in sent.items() if k in arrived["journal"]]
    result: dict[str, Latency] = {}
    for mode in MODES:
        lat = [arrived[mode][k] - t for k, t in sent.items() if k in arrived[mode]]
        result[mode] = Latency(
            p50=percentile(lat, 50),
            p99=percentile(lat, 99),
            n=len(lat),
            missing=len(sent) - len(lat),
            raw_p50=percentile(raw, 50),
            raw_p99=percentile(raw, 99),
        )
    return result


def ratio_range(values: list[float]) -> str:
    """The median of the rounds' ratios and their range."""
    if not values:
        return "-"
    return f"median {statistics.median(values):.2f}, rounds {min(values):.2f}-{max(values):.2f}"


async def main_async(n: int, rounds: int, rate: int, seconds: float) -> int:
    records = make_records(n)
    want = sum(expected_outputs(records))
    results: list[Round] = []
    with started_broker("kafka") as broker, tempfile.TemporaryDirectory() as datadir:
        bs = broker.bootstrap
        entries = f"bench.eos.journal.{uuid.uuid4().hex[:6]}"
        await ensure_topics(bs, partitions=PARTITIONS, topics=(entries,))
        prate = await produce(bs, entries, records)
        print(
            f"broker {bs} (Apache Kafka, embedded) | {n} journal records on {PARTITIONS} partitions "
            f"(produced at {prate:,.0f}/s), {want} outputs expected | latency at {rate}/s for {seconds:.0f} s "
            f"| {rounds} round(s) | cpus {os.cpu_count()}",
            flush=True,
        )
        logs = Path(datadir) / "logs"
        logs.mkdir()
        for r in range(rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            rnd = Round()
            for mode in order:
                log = logs / f"tp-{r}-{mode}.log"
                rnd.throughput[mode] = t = await throughput_run(bs, entries, n, want, mode, datadir, broker.pid, log)
                print(
                    f"  round {r + 1} {mode:<13} throughput {t.rate:>8,.0f}/s  gate CPU {t.gate_cpu:5.1f} s  "
                    f"broker CPU {t.broker_cpu:5.1f} s per 100k  gate RSS {t.gate_rss:4.0f} MiB  "
                    f"outputs {'exact' if t.complete else 'WRONG'}",
                    flush=True,
                )
            rnd.latency = await latency_run(bs, rate, seconds, datadir, logs)
            for mode, lat in rnd.latency.items():
                print(
                    f"  round {r + 1} {mode:<13} latency p50 {lat.p50 * 1000:6.1f} ms  p99 {lat.p99 * 1000:6.1f} ms"
                    f"  ({lat.n} entries, {lat.missing} missing; broker round trip p50 {lat.raw_p50 * 1000:.1f} ms"
                    f" p99 {lat.raw_p99 * 1000:.1f} ms)",
                    flush=True,
                )
            results.append(rnd)
    return report(results, rate)


def report(results: list[Round], rate: int) -> int:
    alo, eos = MODES

    def med(values: list[float]) -> float:
        return statistics.median(values)

    def series(kind: str, metric: str, mode: str) -> list[float]:
        return [getattr(getattr(r, kind)[mode], metric) for r in results]

    def ratios(kind: str, metric: str) -> list[float]:
        return [a / b for a, b in zip(series(kind, metric, eos), series(kind, metric, alo), strict=True) if b]

    rows: list[Row] = []
    for kind, metric, label, unit in (
        ("throughput", "rate", "gate throughput (records/s)", "rec/s"),
        ("throughput", "gate_cpu", "gate CPU per 100k records", "s"),
        ("throughput", "broker_cpu", "broker CPU per 100k records", "s"),
        ("throughput", "gate_rss", "gate peak RSS (MiB)", "MiB"),
        ("latency", "p50", f"produce -> read_committed p50 at {rate}/s", "s"),
        ("latency", "p99", f"produce -> read_committed p99 at {rate}/s", "s"),
        ("latency", "raw_p99", "broker round trip p99 (no gate), same runs", "s"),
    ):
        unit_is_s = unit == "s"
        rows.append(
            Row(
                bench="eos",
                metric=label,
                value=med(series(kind, metric, eos)),
                unit="s" if unit_is_s else unit,
                baseline=med(series(kind, metric, alo)),
                baseline_label="at-least-once, same run (medians over the rounds)",
                target="<= 10 % slower" if metric == "rate" else "",
                ok=(med(ratios(kind, metric)) >= 0.9) if metric == "rate" else None,
                note=f"exactly-once / at-least-once per round: {ratio_range(ratios(kind, metric))}",
            )
        )
    emit(rows, "exactly-once vs at-least-once (the gate)")
    complete = all(t.complete for r in results for t in r.throughput.values())
    missing = sum(lat.missing for r in results for lat in r.latency.values())
    print(f"\noutputs exact in every throughput run: {'yes' if complete else 'NO'}; latency entries missing: {missing}")
    return 0 if complete and missing == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=60_000, help="journal records per throughput run")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rate", type=int, default=500, help="journal entries/s in the latency runs")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each latency run")
    ap.add_argument("--quick", action="store_true", help="1 round, 20k records, 8 s of latency")
    ap.add_argument(
        "--gate-arg",
        action="append",
        default=[],
        help="an `episodic gate` option for every gate, e.g. --gate-arg=--transaction-batches=16",
    )
    args = ap.parse_args(argv)
    GATE_ARGS.extend(args.gate_arg)
    if args.quick:
        args.records, args.rounds, args.seconds = 20_000, 1, 8.0
    return asyncio.run(main_async(args.records, args.rounds, args.rate, args.seconds))


if __name__ == "__main__":
    raise SystemExit(main())
