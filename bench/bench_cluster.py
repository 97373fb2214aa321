"""The distributed engine on one machine (issue 44, item 6): a 3-node KRaft cluster on loopback, the roles as
separate processes, under load, with a broker and an embedder killed; against one Kafka node in the same run.

Each run gets fresh brokers, topics of `--partitions` partitions (replication factor 3 and min.insync.replicas 2
on the cluster, 1 on the single node), 2 `episodic run gate` and 2 `episodic run embedder` processes (the real
model unless `--model none`, a core's worth of threads each) and a producer feeding 12 workspaces at `--rate`
entries/s (acks=all, idempotent) for `--seconds`. On the cluster:

- at a third of the run, kill -9 of the node leading the most partitions: the time until every partition is led
  by a live node, the producer's longest stall, then the node started again and the time until no partition
  is under-replicated;
- at two thirds, kill -9 of an embedder: the time until the survivor has committed on every partition;
- at the end, the time to drain (every entry's dense vector written), entries lost (produced and acknowledged,
  never indexed), and records written twice on journal.entries and journal.embeddable.

The single node (the embedded default's broker) runs the same load without faults: its drain time and the
cluster's are the same-run comparison. Each embedder writes a Qdrant Edge store of its own (no Qdrant server
exists here; docs/distributed.md): nothing lost is counted from `memory.indexed`, and an id indexed by both
embedders (re-delivered after the kill) is one deterministic point id.

    python -m bench.bench_cluster                      # 120 s at 40 entries/s, the real model
    python -m bench.bench_cluster --seconds 60 --model none --rate 100
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_roles import Role, make_entries
from bench.common import LOOPBACK, Row, emit, tmp_dir

READY_TIMEOUT_S = 300.0


@dataclass
class Run:
    nodes: int
    sent: int = 0
    lost: int = 0
    entry_dups: int = 0
    forward_dups: int = 0
    drain_s: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)


async def _admin(bootstrap: str) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    return admin


async def partitions_state(bootstrap: str, topics: tuple[str, ...], *, named: bool = False) -> list[Any]:
    """Every partition of `topics` as the metadata says now (its `leader`, `isr`, ...); `named`: (topic,
    partition) pairs."""
    admin = await _admin(bootstrap)
    try:
        described = await admin.describe_topics(list(topics))
        if named:
            return [(t["topic"], p) for t in described for p in t["partitions"]]
        return [p for t in described for p in t["partitions"]]
    finally:
        await admin.close()


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from aiokafka import TopicPartition

    admin = await _admin(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {
            tp.partition: m.offset for tp, m in (await admin.list_consumer_group_offsets(group, partitions=tps)).items()
        }
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await c.start()
    try:
        ends = await c.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: int(end) for tp, end in ends.items()}
    finally:
        await c.stop()


async def until(check: Any, timeout: float, what: str, interval: float = 0.2) -> float:
    """Seconds until `await check()` is true; RuntimeError at the deadline."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if await check():
                return time.monotonic() - t0
        except Exception:
            pass
        await asyncio.sleep(interval)
    raise RuntimeError(f"not {what} within {timeout:g}s")


async def read_ids(bootstrap: str, topic: str, key: str, partitions: int) -> Counter[str]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await c.start()
    ids: Counter[str] = Counter()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = await c.end_offsets(tps)
        todo = {tp for tp, end in ends.items() if end > 0}
        while todo:
            for recs in (await c.getmany(timeout_ms=500, max_records=5000)).values():
                for r in recs:
                    if r.value and r.value.startswith(b"{"):
                        ids[json.loads(r.value).get(key)] += 1
            todo = {tp for tp in todo if await c.position(tp) < ends[tp]}
    finally:
        await c.stop()
    return ids


class Feeder:
    def __init__(self, bootstrap: str, rate: float) -> None:
        self.bootstrap, self.rate = bootstrap, rate
        self.acked: set[str] = set()
        self.acked_at: list[float] = []
        self._stop = asyncio.Event()
        self._rng = random.Random(7)

    async def run(self) -> None:
        from episodic.bus.kafka import make_producer

        producer = make_producer(self.bootstrap, linger_ms=5, request_timeout_ms=30_000)
        await producer.start()
        tick, n = 0.1, 0
        try:
            while not self._stop.is_set():
                batch = make_entries(f"c{n:07d}-", max(1, round(self.rate * tick)), self._rng)
                n += 1
                futs = [
                    await producer.send("journal.entries", key=ws.encode(), value=json.dumps(e).encode())
                    for ws, e in batch
                ]
                for (_, e), res in zip(batch, await asyncio.gather(*futs, return_exceptions=True), strict=True):
                    if not isinstance(res, BaseException):
                        self.acked.add(str(e["id"]))
                self.acked_at.append(time.monotonic())
                await asyncio.sleep(tick)
        finally:
            await producer.stop()

    def longest_gap(self, since: float) -> float:
        times = [since, *(t for t in self.acked_at if t > since)]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def stop(self) -> None:
        self._stop.set()


async def run(nodes: int, args: argparse.Namespace, tmp: Path) -> Run:
    from infra.broker import KafkaBroker, free_port

    result = Run(nodes)
    broker = KafkaBroker(data_dir=tmp / f"kafka-{nodes}", port=free_port(LOOPBACK), nodes=nodes, heap_mb=256)
    await asyncio.to_thread(broker.start, 240.0)
    bs, parts = broker.bootstrap, args.partitions
    env = {
        "EPISODIC_TOPIC_PARTITIONS": str(parts),
        "EPISODIC_TOPIC_REPLICATION": str(min(3, nodes)),
        "EPISODIC_EMBED_THREADS": "1",
        "EPISODIC_SESSION_TIMEOUT_MS": "6000",
        "EPISODIC_EMBED_MODEL": args.model,
    }
    log = tmp / f"roles-{nodes}.log"
    roles = [Role(r, bs, tmp / f"{r}-{nodes}-{i}", log, env) for r in ("gate", "embedder") for i in range(2)]
    embedders = roles[2:]
    try:
        await until(lambda: _all_healthy(roles), READY_TIMEOUT_S, "every role healthy", interval=1.0)
        feeder = Feeder(bs, args.rate)
        feeding = asyncio.create_task(feeder.run())
        t_start = time.monotonic()
        if nodes > 1:
            await asyncio.sleep(args.seconds / 3)
            state = await partitions_state(bs, ("journal.entries", "journal.embeddable"))
            victim = Counter(p["leader"] for p in state).most_common(1)[0][0]
            t_kill = time.monotonic()
            broker.kill_node(victim)

            async def led() -> bool:
                now = await partitions_state(bs, ("journal.entries", "journal.embeddable"))
                return len(now) == len(state) and all(p["leader"] not in (victim, -1) for p in now)

            result.faults["leadership moved, s"] = await until(led, 60, "every partition led by a live node")
            await asyncio.sleep(2)
            result.faults["producer's longest stall, s"] = feeder.longest_gap(t_kill - 0.5)
            t_back = time.monotonic()
            await asyncio.to_thread(broker.start_node, victim)

            async def replicated() -> bool:
                now = await partitions_state(bs, ("journal.entries", "journal.embeddable"))
                return all(len(p["isr"]) == 3 for p in now)

            await until(replicated, 120, "every partition fully replicated again", interval=0.5)
            result.faults["restarted node back in every ISR, s"] = time.monotonic() - t_back
            await asyncio.sleep(max(0.0, t_start + 2 * args.seconds / 3 - time.monotonic()))
            embedders[0].proc.kill()
            embedders[0].proc.wait(10)
            before = await committed(bs, "episodic-embedder", "journal.embeddable", parts)  # the dead commit no more

            seen: dict[str, Any] = {}

            async def resumed() -> bool:  # every partition that got records since the kill committed past them
                now = await committed(bs, "episodic-embedder", "journal.embeddable", parts)
                ends = await end_offsets(bs, "journal.embeddable", parts)
                seen.update(before=before, now=now, ends=ends, alive=[r.proc.poll() is None for r in roles])
                return all(
                    now.get(p, -1) > before.get(p, -1) for p in range(parts) if ends[p] > max(0, before.get(p, -1))
                )

            try:
                resumed_s = await until(resumed, 120, "resumed")
            except RuntimeError as e:
                raise RuntimeError(f"{e}: {seen}; roles' log: {log.read_text(errors='replace')[-3000:]}") from None
            result.faults["embedder killed: every partition committed again, s"] = resumed_s
        await asyncio.sleep(max(0.0, t_start + args.seconds - time.monotonic()))
        feeder.stop()
        await feeding
        t_stop = time.monotonic()
        result.sent = len(feeder.acked)
        indexed: set[str] = set()
        while not feeder.acked <= indexed:
            if time.monotonic() - t_stop > 900:
                break
            await asyncio.sleep(2)
            indexed = set(await read_ids(bs, "memory.indexed", "entry_id", parts))
        result.drain_s = time.monotonic() - t_stop
        result.lost = len(feeder.acked - indexed)
        entries = await read_ids(bs, "journal.entries", "id", parts)
        forwarded = await read_ids(bs, "journal.embeddable", "id", parts)
        result.entry_dups = sum(n - 1 for n in entries.values())
        result.forward_dups = sum(n - 1 for n in forwarded.values())
        return result
    finally:
        for r in roles:
            r.stop()
        await asyncio.to_thread(broker.stop)


async def _all_healthy(roles: list[Role]) -> bool:
    return all(await asyncio.gather(*(asyncio.to_thread(r.healthy) for r in roles)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=120.0, help="of load (default 120)")
    ap.add_argument("--rate", type=float, default=40.0, help="entries/s produced (default 40)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument(
        "--model", default="all-MiniLM-L6-v2", help="EPISODIC_EMBED_MODEL of the embedders ('none': BM25 only)"
    )
    args = ap.parse_args(argv)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a killed node is the point: not its errors
    runs: list[Run] = []
    with tmp_dir() as tmp:
        for nodes in (1, 3):  # the single node first: the baseline of the same run
            r = asyncio.run(run(nodes, args, tmp))
            print(f"  {nodes} node(s): {r}", flush=True)
            runs.append(r)
    single, cluster = runs
    rows = [
        Row("cluster", "drain after the load, 3 nodes with a broker and an embedder killed", cluster.drain_s, "s",
            single.drain_s, "1 node, no fault, same load", note=f"{cluster.sent} entries acknowledged"),
        Row("cluster", "entries acknowledged per second (acks=all, a tick's sends awaited before the next)",
            cluster.sent / args.seconds, "/s", single.sent / args.seconds, "1 node, same producer",
            note=f"asked {args.rate:g}/s; replication 3 waits for 2 more logs"),
        Row("cluster", "entries lost (acknowledged, never indexed)", float(cluster.lost), "", float(single.lost),
            "1 node"),
        Row("cluster", "records written twice on journal.entries / journal.embeddable",
            float(cluster.entry_dups + cluster.forward_dups), "", float(single.entry_dups + single.forward_dups),
            "1 node", note=f"{cluster.entry_dups} / {cluster.forward_dups}"),
    ]  # fmt: skip
    rows += [
        Row("cluster", name, value, "s", None, "", note="3-node KRaft cluster on loopback")
        for name, value in cluster.faults.items()
    ]
    emit(rows, f"3-node Kafka cluster, roles as processes, {args.partitions} partitions, model {args.model}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
