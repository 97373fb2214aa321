"""The gate's group commit under exactly-once (streams/gate.py `GroupCommit`), over a fake `Transactions`:
which batches go into which transaction, in what order, and which are given up; and when
`Transactions._renew` replaces a dead producer, over a fake app. The transactions themselves are tested
against Kafka (tests/integration/test_gate_exactly_once.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from faust.types import TP

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from streams.gate import GroupCommit, Send
from streams.transport import BatchMessage, RecordBatch

TP0, TP1 = TP("entries", 0), TP("entries", 1)


def batch(tp: TP, first: int, last: int, generation: int = 1) -> RecordBatch:
    message = BatchMessage(
        tp.topic, tp.partition, last, 0.0, 0, None, None, None, None, 0, 0, tp,
        generation_id=generation, first_offset=first,
    )  # fmt: skip
    return RecordBatch(tp, [], message)


def sends(n: int, tag: str) -> list[Send]:
    return [("embeddable", b"k", f"{tag}-{i}".encode(), ()) for i in range(n)]


class FakeTransactions:
    """Records every commit; `gate` holds a commit until released; `fail` fails the next commits;
    `generation` and `assigned` decide what is still owned."""

    def __init__(self) -> None:
        self.commits: list[tuple[TP, int, list[bytes]]] = []  # partition, offset after, record values
        self.gate: dict[TP, asyncio.Event] = {}
        self.fail = 0
        self.generation = 1
        self.assigned = {TP0, TP1}

    def owns(self, b: RecordBatch) -> bool:
        return b.tp in self.assigned and b.message.generation_id == self.generation

    async def commit(self, batches: list[RecordBatch], records: list[Send]) -> bool:
        tp = batches[-1].tp
        if tp in self.gate:
            await self.gate[tp].wait()
        if self.fail:
            self.fail -= 1
            return False
        self.commits.append((tp, batches[-1].last_offset + 1, [r[2] for r in records]))
        return True


def group_commit(fake: FakeTransactions) -> GroupCommit:
    return GroupCommit(fake, metrics=Metrics(), max_backoff_s=0.01)  # type: ignore[arg-type]


async def test_batches_that_wait_for_a_transaction_are_committed_together_in_order() -> None:
    fake = FakeTransactions()
    fake.gate[TP0] = asyncio.Event()
    g = group_commit(fake)
    first = g.submit(batch(TP0, 0, 9), sends(2, "a"))
    await asyncio.sleep(0)  # the committer took the first batch and waits in its transaction
    later = [g.submit(batch(TP0, 10, 19), sends(1, "b")), g.submit(batch(TP0, 20, 29), sends(2, "c"))]
    other = g.submit(batch(TP1, 0, 4), [])  # another partition: its own transaction, not held back
    assert await other is True
    fake.gate[TP0].set()
    assert await first is True and await asyncio.gather(*later) == [True, True]
    assert [(tp, end) for tp, end, _ in fake.commits] == [(TP1, 5), (TP0, 10), (TP0, 30)]
    assert fake.commits[2][2] == [b"b-0", b"c-0", b"c-1"]  # the two batches' output, in order, in one
    assert fake.commits[0][2] == []  # a batch with no output still commits its offsets
    assert not g.committers  # the committers end when nothing waits


async def test_a_failed_transaction_is_retried_until_committed() -> None:
    fake = FakeTransactions()
    fake.fail = 3
    metrics = Metrics()
    g = GroupCommit(fake, metrics=metrics, max_backoff_s=0.01)  # type: ignore[arg-type]
    assert await g.submit(batch(TP0, 0, 9), sends(4, "a")) is True
    assert fake.commits == [(TP0, 10, [b"a-0", b"a-1", b"a-2", b"a-3"])]
    assert metrics.registry.get_sample_value("episodic_consumer_errors_total", {"stage": "publish"}) == 12


async def test_batches_of_an_older_generation_or_a_lost_partition_are_given_up_not_committed() -> None:
    fake = FakeTransactions()
    fake.gate[TP0] = asyncio.Event()
    g = group_commit(fake)
    held = g.submit(batch(TP0, 0, 9), sends(1, "a"))
    await asyncio.sleep(0)
    stale = g.submit(batch(TP0, 10, 19), sends(1, "b"))  # fetched before the rebalance
    fake.generation = 2
    fresh = g.submit(batch(TP0, 0, 9, generation=2), sends(1, "a2"))  # read again after it
    fake.gate[TP0].set()
    # the transaction in flight when ownership changed is retried no more: given up with the stale batch
    fake.fail = 1
    assert [await held, await stale, await fresh] == [False, False, True]
    assert fake.commits == [(TP0, 10, [b"a2-0"])]
    fake.assigned = {TP1}
    assert await g.submit(batch(TP0, 10, 19, generation=2), sends(1, "x")) is False
    assert len(fake.commits) == 1


async def test_cancelling_leaves_nothing_committed_and_no_future_pending() -> None:
    fake = FakeTransactions()
    fake.gate[TP0] = asyncio.Event()
    g = group_commit(fake)
    futures = [g.submit(batch(TP0, 0, 9), sends(1, "a"))]
    await asyncio.sleep(0)
    futures.append(g.submit(batch(TP0, 10, 19), sends(1, "b")))
    g.cancel()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert fake.commits == [] and not g.committers


def test_exactly_once_is_never_on_with_tansu_and_sets_how_the_gates_readers_read() -> None:
    on: Any = Settings(kafka_bootstrap="kafka-1:9092", gate_exactly_once=True)
    assert on.exactly_once and on.isolation_level == "read_committed"
    tansu = Settings(broker="tansu", gate_exactly_once=True)
    assert not tansu.exactly_once and tansu.isolation_level == "read_uncommitted"
    assert Settings(kafka_bootstrap="kafka-1:9092").exactly_once  # on by default (docs/pipeline.md)
    off = Settings(kafka_bootstrap="kafka-1:9092", gate_exactly_once=False)
    assert not off.exactly_once and off.isolation_level == "read_uncommitted"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


async def test_a_dead_producer_is_renewed_after_three_heartbeats_of_its_own_death(monkeypatch: Any) -> None:
    """`Transactions._renew` waits 3 consumer heartbeats from when it first found *this* producer dead: a
    producer that died after an earlier dead one was replaced by Faust (a rebalance) waits its own 3, it does
    not inherit the earlier one's time (that would skip the wait that lets a zombie learn of its rebalance)."""
    from types import SimpleNamespace

    import streams.gate as gate_mod
    from streams.gate import Transactions
    from streams.internals import FAUST_PRODUCER_TRANSACTION_LOCKS, FAUST_PRODUCER_TRANSACTION_PRODUCERS

    tid = "episodic-gate-0-0"
    lock = asyncio.Lock()
    producer = SimpleNamespace(
        **{FAUST_PRODUCER_TRANSACTION_PRODUCERS: {}, FAUST_PRODUCER_TRANSACTION_LOCKS: {tid: lock}}
    )
    consumer = SimpleNamespace(assignment=lambda: {TP0})
    app = SimpleNamespace(conf=SimpleNamespace(broker_heartbeat_interval=1.0), producer=producer,
                          consumer=consumer, consumer_generation_id=1)  # fmt: skip
    clock = _Clock()
    monkeypatch.setattr(gate_mod, "time", clock)
    renewed: list[Any] = []

    async def renew(app: Any, transactional_id: str, dead: Any, *, still: Any, timeout: float) -> bool:
        renewed.append(dead)
        return True

    monkeypatch.setattr(gate_mod, "renew_transaction_producer", renew)
    txn = Transactions(app)  # type: ignore[arg-type]
    b = batch(TP0, 0, 9)
    first, later = object(), object()
    producers = getattr(producer, FAUST_PRODUCER_TRANSACTION_PRODUCERS)
    producers[tid] = first
    for t in (0.0, 1.0, 2.9):
        clock.now = t
        await txn._renew(tid, lock, first, b)
    assert renewed == []
    producers[tid] = later  # Faust replaced the dead one (a rebalance), and the new one died later on
    clock.now = 100.0
    await txn._renew(tid, lock, later, b)
    assert renewed == []  # its own wait starts now
    clock.now = 103.0
    await txn._renew(tid, lock, later, b)
    assert renewed == [later]
