"""The embedded broker as records pile up: its CPU per window, producing alone and with a consumer at the tail,
against its first window, for Apache Kafka (the embedded default) and Tansu (the fallback), same load, one after
the other (issue 27 item 2: why the soak's latency climbed on Tansu; issue 44: what Kafka costs instead).

A fresh broker, one topic of `--partitions` (8 by default); about 1,000 records/s of 300 bytes (60 every
50 ms, keyed over the partitions) for `--seconds` (150 by default) in each mode, one broker per mode:

  produce   no consumer;
  tail      one consumer group at the tail, committing every second, fetch wait 100 ms (a pipeline stage);
  tail-500  the same with a 500 ms fetch wait and a 64 KiB minimum (fewer fetches, each returning more);
  tail-50   the stack's pipeline consumer on the embedded broker: a 50 ms fetch wait, no minimum;
  tail-min  the same with a 1 MiB minimum, so the broker holds every fetch for the 50 ms wait;
  gather    an agent that gathers (EPISODIC_AGENT_GATHER_MS): a 1 s wait with a 1 MiB minimum;
  tail-big  `tail` at the same rate in batches ten times as big (600 records every 500 ms: ~75 a batch);
  one       100 records/s, each its own batch (sent and acknowledged one at a time, random keys), one
            consumer at the tail with the pipeline's 50 ms wait: each fetch returns about one record, from
            one partition.

Tansu keeps every record (no retention, see docs/configuration.md). Measured here on Tansu (issue 27): producing
alone costs the same at 200k records held as at 30k; a consumer's fetches that return records cost time that
grows with the records held, so a stage's broker time grows with the topic's age whatever the rate; `tail-big`
shows that what it grows with is the number of record batches held (each stored as one object), not of records;
`one` with `--partitions` shows that a fetch costs what the partitions it returns records from hold, not the
topic (so more partitions, over keys that spread, slow the growth, while an idle fetch costs more).
The ratios reported: each engine's last window's CPU over its first window's, in the same mode, and Kafka's last
window over Tansu's.

    python -m bench.bench_broker                # 150 s per mode
    python -m bench.bench_broker --seconds 60 --modes tail tail-big
    python -m bench.bench_broker --seconds 150 --modes one --partitions 4   # then 32
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

from bench.common import Row, cpu_seconds, emit

MODES = ("produce", "tail", "tail-500", "tail-big", "tail-50", "tail-min", "gather", "one")
FETCH = {
    "tail": (100, 1),
    "tail-big": (100, 1),
    "tail-500": (500, 65536),
    "tail-50": (50, 1),
    "tail-min": (50, 1024 * 1024),
    "gather": (1000, 1024 * 1024),
    "one": (50, 1),
}  # mode -> (wait ms, min)
WINDOW_S = 30.0
PER_TICK = 60
TICK_S = 0.05
PARTITIONS = 8  # the default of --partitions
ONE_PER_S = 100  # mode `one`: records a second, one batch each
VALUE = b"x" * 300  # every record's value


async def run_mode(
    mode: str, seconds: float, partitions: int = PARTITIONS, engine: str = "kafka"
) -> list[tuple[int, float]]:
    """[(records held at the window's end, broker CPU % of one core in that window)]."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from bench.common import started_broker
    from episodic.bus.kafka import make_producer

    windows: list[tuple[int, float]] = []
    with started_broker(engine) as broker:
        pid = broker.pid
        assert pid is not None
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("bench-broker", partitions, 1)])
        await admin.close()
        producer = make_producer(broker.bootstrap, linger_ms=5, enable_idempotence=engine == "kafka")
        await producer.start()
        consumer: Any = None
        reader: asyncio.Task[None] | None = None
        if mode != "produce":
            wait, minimum = FETCH[mode]
            consumer = AIOKafkaConsumer(
                "bench-broker",
                bootstrap_servers=broker.bootstrap,
                group_id="bench-broker",
                auto_commit_interval_ms=1000,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=wait,
                fetch_min_bytes=minimum,
            )
            await consumer.start()

            async def read() -> None:
                while True:
                    await consumer.getmany(timeout_ms=200)

            reader = asyncio.create_task(read())
        per_tick, tick_s = (PER_TICK * 10, TICK_S * 10) if mode == "tail-big" else (PER_TICK, TICK_S)
        try:
            held, end = 0, time.monotonic() + seconds
            t0, k0 = time.monotonic(), cpu_seconds(pid)
            keys, due = random.Random(1), time.monotonic()
            while time.monotonic() < end:
                if mode == "one":  # acknowledged before the next is sent: one record per batch
                    await producer.send_and_wait("bench-broker", VALUE, key=str(keys.random()).encode())
                    held += 1
                    due += 1 / ONE_PER_S
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                else:
                    sent = [await producer.send("bench-broker", VALUE, key=str(i).encode()) for i in range(per_tick)]
                    await asyncio.gather(*sent)
                    held += per_tick
                    await asyncio.sleep(tick_s)
                if time.monotonic() - t0 >= WINDOW_S:
                    k = cpu_seconds(pid)
                    windows.append((held, 100 * (k - k0) / (time.monotonic() - t0)))
                    t0, k0 = time.monotonic(), k
        finally:
            if reader is not None:
                reader.cancel()
            if consumer is not None:
                await consumer.stop()
            await producer.stop()
    return windows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=150.0, help="per mode (default 150; windows of 30 s)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--partitions", type=int, default=PARTITIONS, help=f"of the topic (default {PARTITIONS})")
    ap.add_argument("--engines", nargs="+", choices=["kafka", "tansu"], default=["kafka", "tansu"])
    args = ap.parse_args(argv)
    if args.seconds < 2 * WINDOW_S:
        ap.error(f"--seconds must be at least {2 * WINDOW_S:g} (two windows)")
    if args.partitions < 1:
        ap.error(f"--partitions must be at least 1, not {args.partitions}")
    rows: list[Row] = []
    for mode in args.modes:
        last: dict[str, tuple[int, float]] = {}
        for engine in args.engines:  # one after the other, each on a fresh broker
            windows = asyncio.run(run_mode(mode, args.seconds, args.partitions, engine))
            for held, cpu in windows:
                print(
                    f"bench_broker {engine:5s} {mode:9s} {held:8d} held: broker CPU {cpu:5.1f} % of a core", flush=True
                )
            (first_held, first), last[engine] = windows[0], windows[-1]
            rows.append(
                Row(
                    "broker", f"{engine} CPU, {mode}, {args.partitions} partitions, {last[engine][0]:,} held",
                    last[engine][1], "%", first, f"its first window ({first_held:,} held)", note="one core = 100 %",
                )
            )  # fmt: skip
        if len(last) == 2:
            rows.append(
                Row(
                    "broker", f"Kafka CPU, {mode}, last window", last["kafka"][1], "%", last["tansu"][1],
                    "Tansu's last window, same load", note="one core = 100 %",
                )
            )  # fmt: skip
    emit(rows, "the embedded broker's CPU as records pile up: Apache Kafka against Tansu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
