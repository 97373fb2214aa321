"""The distributed engine on one machine: a 3-node KRaft cluster on loopback, the roles as separate processes.

Issue 44, item 6. Three Kafka nodes (each a broker and a controller voter), the topics with 6 partitions,
replication factor 3 and `min.insync.replicas` 2; two `episodic run gate` and two `episodic run embedder`
processes; a producer feeding the journal (acks=all, idempotent) throughout. Then:
- kill -9 of the broker leading the most partitions: leadership moves to the other two (measured), the
  producer goes on after a stall (measured), and no record is written twice on journal.entries or
  journal.embeddable (idempotent producers through the leader change);
- kill -9 of an embedder: the group rebalances and the survivor resumes the dead member's partitions from
  their committed offsets (measured);
- in the end every entry produced is indexed, and no memory is doubled: each id has one deterministic point.
  As in tests/e2e/test_role_failover.py, each embedder writes its own Qdrant Edge store (no Qdrant server
  binary exists here; Edge is one process per store): an id in both stores is the same point id, which on a
  shared server is one upsert, so the check is that the union holds each id once per point id.

The figures are printed; `bench/bench_cluster.py` measures the same at length (docs/distributed.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bench_cluster import committed, end_offsets, partitions_state, read_ids
from episodic.domain.identity import point_id
from episodic.kernel.settings import Settings
from infra.broker import KafkaBroker, free_port
from tests.e2e.conftest import poll, read_topic
from tests.e2e.test_role_failover import WORKSPACES, Feeder, RoleProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 6
TOPICS = ("journal.entries", "journal.embeddable")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(
        data_dir=tmp_path / "kafka", port=free_port(), nodes=3, heap_mb=192, log_file=tmp_path / "kafka.log"
    )
    broker.start(timeout=180)
    try:
        yield broker
    finally:
        broker.stop()


async def leaders(bootstrap: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the node leading it now (-1: none), from a fresh metadata request."""
    return {(t, p["partition"]): p["leader"] for t, p in await partitions_state(bootstrap, TOPICS, named=True)}


async def test_a_broker_and_an_embedder_killed_under_load_lose_nothing_and_double_nothing(
    cluster: KafkaBroker, tmp_path: Path, procs: list[Any]
) -> None:
    bs = cluster.bootstrap
    log = tmp_path / "roles.log"
    env = {"EPISODIC_TOPIC_PARTITIONS": str(PARTITIONS), "EPISODIC_TOPIC_REPLICATION": "3"}
    gates = [RoleProcess("gate", bs, tmp_path / f"gate-{i}", log, **env) for i in range(2)]
    embedders = [RoleProcess("embedder", bs, tmp_path / f"embedder-{i}", log, **env) for i in range(2)]
    procs += gates + embedders
    await poll(lambda: all(p.healthz() for p in gates + embedders), timeout=180, what="every role healthy")
    feeder = Feeder(bs, per_tick=10, tick_s=0.1)  # 100 entries/s
    feeder.start()
    await poll(lambda: all(e.metric("episodic_indexed_total") >= 50 for e in embedders), timeout=180,
               what="both embedders indexing")  # fmt: skip

    # 1. kill -9 the node that leads the most partitions
    before = await leaders(bs)
    victim = Counter(before.values()).most_common(1)[0][0]
    t_kill = time.monotonic()
    cluster.kill_node(victim)

    async def moved() -> bool:
        try:
            now = await leaders(bs)
        except Exception:
            return False
        return len(now) == len(before) and all(n not in (victim, -1) for n in now.values())

    await poll(moved, timeout=60, interval=0.2, what="every partition led by a live node")
    leadership_s = time.monotonic() - t_kill
    await poll(lambda: feeder.acked_at[-1] > t_kill + 1, timeout=60, what="the producer going on")
    stall_s = feeder.longest_gap(t_kill - 0.5)

    # 2. kill -9 an embedder: the survivor resumes the dead member's partitions from their committed offsets
    await asyncio.sleep(3)
    t_embedder = time.monotonic()
    embedders[0].kill9()
    at_kill = await committed(bs, "episodic-embedder", "journal.embeddable", PARTITIONS)  # the dead commit no more

    async def every_partition_moved() -> bool:  # every partition that got records since the kill
        now = await committed(bs, "episodic-embedder", "journal.embeddable", PARTITIONS)
        ends = await end_offsets(bs, "journal.embeddable", PARTITIONS)
        return all(
            now.get(p, -1) > at_kill.get(p, -1) for p in range(PARTITIONS) if ends[p] > max(0, at_kill.get(p, -1))
        )

    await poll(every_partition_moved, timeout=120, interval=0.5, what="every partition committed again")
    rebalance_s = time.monotonic() - t_embedder

    sent = await feeder.stop()
    ids = {f"fo{i:06d}" for i in range(sent)}
    events = await read_topic(bs, "memory.indexed", expect=sent, timeout=240, distinct="entry_id")
    indexed = {json.loads(r.value)["entry_id"] for r in events}
    assert ids <= indexed, (len(ids - indexed), log.read_text()[-3000:])
    entries = await read_ids(bs, "journal.entries", "id", PARTITIONS)
    forwarded = await read_ids(bs, "journal.embeddable", "id", PARTITIONS)
    entry_dups = sum(n - 1 for n in entries.values())
    forward_dups = sum(n - 1 for n in forwarded.values())
    assert sum(entries.values()) == sent and entry_dups == 0  # the producer's retries through the leader change
    assert forward_dups == 0 and sum(forwarded.values()) == sent  # the gates' too (no gate was killed)
    for p in [*gates, embedders[1]]:
        assert p.stop() == 0, log.read_text()[-3000:]

    points: Counter[str] = Counter()  # point id -> the stores holding it
    for e in embedders:
        store = _store(e.data_dir)
        try:
            by_point = {point_id(WORKSPACES[int(i[2:]) % len(WORKSPACES)], i): i for i in ids}
            points.update(by_point[pid] for pid in store.retrieve(list(by_point), fields=["entry_id"]))
        finally:
            store.close()
    assert set(points) == ids  # nothing lost; an id in both stores is one point id (re-delivered to the survivor)
    print(
        f"cluster: {sent} entries, node {victim} killed: leadership moved in {leadership_s:.1f} s, the producer "
        f"stalled {stall_s:.1f} s; embedder killed: every partition resumed in {rebalance_s:.1f} s; "
        f"{sum(1 for n in points.values() if n > 1)} ids re-delivered to the survivor"
    )


def _store(data_dir: Path) -> Any:
    from stack.stores import open_store

    return open_store(Settings(data_dir=data_dir), dim=384)
