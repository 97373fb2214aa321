"""The gate under exactly-once (EPISODIC_GATE_EXACTLY_ONCE, streams/gate.py `Transactions`), against Kafka: a
kill -9 of the gate process mid-stream, a new gate process in its place, and a read_committed reader of
journal.embeddable sees every entry exactly once (at-least-once writes the batches in flight at the kill
twice: the ones whose output was acknowledged but whose offsets were not yet committed); an aborted
transaction. The drain on stop, in both modes, and the at-least-once path's own tests:
tests/integration/test_gate.py."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import streams.gate as gate_mod
from episodic.bus.kafka import make_producer
from episodic.kernel.settings import Settings
from infra.broker import free_port
from streams.gate import GateOptions, GateTopics
from streams.internals import transaction_failed_fatally, transaction_producer
from streams.runner import GateRunner
from tests.integration.test_gate import (
    gate_command,
    gate_process_setup,
    one_partition_topics,
    produce_values,
    read_all,
)

N = 4000  # entries, produced at RATE while the gates run
RATE = 1000
KILL_AFTER = 1000  # committed outputs seen before the first gate is killed
COMMITTED = "read_committed"


def entry(i: int) -> tuple[bytes, bytes]:
    ws = f"ws-{i % 8}"
    value = {
        "id": f"e-{i}",
        "workspace_id": ws,
        "crew_id": "crew-1",
        "agent_id": "agent-1",
        "run_id": f"run-{i // 100}",
        "ts": "2026-03-01T12:00:00Z",
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": f"step {i}: the build passed and the agent moved on to the deploy",
    }
    return ws.encode(), json.dumps(value).encode()


def gate(topics: GateTopics, env: dict[str, str], app_id: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**env, "EPISODIC_HTTP_PORT": str(free_port())}  # its /metrics and /healthz
    return subprocess.Popen(gate_command(topics, app_id), env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


async def test_each_entry_is_written_once_across_a_kill_of_the_gate(broker: str, uid: str, tmp_path: Path) -> None:
    topics, env = await gate_process_setup(
        broker, uid, tmp_path, 2,
        EPISODIC_GATE_EXACTLY_ONCE="true",
        EPISODIC_SESSION_TIMEOUT_MS="6000",  # the broker's minimum: the killed gate's partitions move sooner
    )  # fmt: skip
    log = tmp_path / "gates.log"
    seen: Counter[str] = Counter()
    reader = AIOKafkaConsumer(
        topics.embeddable,
        bootstrap_servers=broker,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    await reader.start()
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            for recs in (await reader.getmany(timeout_ms=100)).values():
                seen.update(json.loads(r.value)["id"] for r in recs)

    async def wait_for(count: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count:
            assert time.monotonic() < deadline, f"{what}: {len(seen)} of {count} seen\n{log.read_text()[-3000:]}"
            await asyncio.sleep(0.05)

    producer = make_producer(broker)
    await producer.start()

    async def produce() -> None:
        t0 = time.monotonic()
        for i in range(1, N):
            key, value = entry(i)
            await producer.send(topics.entries, value, key=key)
            await asyncio.sleep(max(0.0, t0 + i / RATE - time.monotonic()))
        await producer.flush()

    reading = asyncio.create_task(read())
    first = gate(topics, env, f"gate-{uid}", log)
    second: subprocess.Popen[bytes] | None = None
    try:
        await producer.send_and_wait(topics.entries, entry(0)[1], key=entry(0)[0])
        await wait_for(1, 90, "the first gate never wrote")  # it joined its group and committed a transaction
        producing = asyncio.create_task(produce())
        await wait_for(KILL_AFTER, 30, "the first gate")
        first.send_signal(signal.SIGKILL)  # mid-stream: batches in flight, a transaction open
        first.wait(10)
        at_kill = len(seen)
        assert not producing.done() and at_kill < N
        second = gate(topics, env, f"gate-{uid}", log)
        await producing
        await wait_for(N, 90, "after the kill")
        await asyncio.sleep(2.0)  # a batch written twice would arrive now
        twice = {i: n for i, n in seen.items() if n > 1}
        assert not twice, f"{len(twice)} entries twice on journal.embeddable, e.g. {sorted(twice)[:5]}"
        assert set(seen) == {f"e-{i}" for i in range(N)}
        assert second.poll() is None, log.read_text()[-3000:]
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, log.read_text()[-3000:]
        # the outputs were written in transactions (a commit marker after each): the setting took effect
        tps = [TopicPartition(topics.embeddable, p) for p in range(2)]
        ends = await reader.end_offsets(tps)
        assert sum(ends.values()) > N
    finally:
        stop.set()
        await reading
        await producer.stop()
        await reader.stop()
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


def eos_settings(bootstrap: str, tmp_path: Path) -> Settings:
    return Settings(kafka_bootstrap=bootstrap, topic_partitions=1, data_dir=tmp_path, gate_exactly_once=True)


async def test_an_aborted_transaction_is_invisible_and_its_batch_written_again_in_order(
    broker: str, uid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first transaction's records reach the log and then the transaction fails (a fault after its
    records were acknowledged): it is aborted, and its batches are written again in the next one. A
    read_committed reader of journal.embeddable sees every entry once, in journal order; a read_uncommitted
    one also sees the aborted copies (so the fault did write them)."""
    n = 200
    topics = await one_partition_topics(broker, uid)
    await produce_values(broker, topics.entries, [entry(i)[1] for i in range(n)], key=b"ws-0")
    real_publish = gate_mod.publish_batches
    calls: list[int] = []

    async def written_then_refused(producer: Any, records: Any, partitioner: Any) -> list[Any]:
        futures = await real_publish(producer, records, partitioner)
        calls.append(len(records))
        if len(calls) == 1:
            await asyncio.gather(*{id(f): f for f in futures if f is not None}.values())  # in the log
            raise ConnectionError("injected: the transaction fails after its records were written")
        return futures

    monkeypatch.setattr(gate_mod, "publish_batches", written_then_refused)
    runner = GateRunner(
        eos_settings(broker, tmp_path), topics=topics, app_id=f"gate-{uid}", options=GateOptions(batch_size=50)
    )
    await runner.start(wait_assigned=30)
    try:
        got = await read_all(broker, [topics.embeddable], want=n, timeout=30, isolation_level=COMMITTED)
        everything = await read_all(broker, [topics.embeddable], want=n + calls[0], timeout=30)
    finally:
        await runner.stop()
    assert len(calls) >= 2 and calls[0] > 0
    assert [json.loads(r.value)["id"] for r in got] == [f"e-{i}" for i in range(n)]
    assert len(everything) == n + calls[0]


async def test_a_fenced_transactional_producer_is_renewed_while_its_partition_stays_here(
    broker: str, uid: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker gives the gate's transactional id a newer epoch while the gate keeps its partition (what the
    two-gate failover test met under load: the survivor's producers of its own partitions fenced in a
    rebalance; here another producer of the same id starts, as a new epoch would). aiokafka's producer is
    then dead for good (its sender stopped: every begin_transaction raises) and Faust keeps it until the
    partition is revoked, which does not come: before the renewal every later commit failed and the entries
    behind it were held back. The gate starts a new producer and goes on: a read_committed reader sees every
    entry once, in journal order."""
    n = 100
    topics = await one_partition_topics(broker, uid)
    await produce_values(broker, topics.entries, [entry(i)[1] for i in range(n)], key=b"ws-0")
    app_id = f"gate-{uid}"
    runner = GateRunner(
        eos_settings(broker, tmp_path), topics=topics, app_id=app_id, options=GateOptions(batch_size=50)
    )
    await runner.start(wait_assigned=30)
    try:
        first = await read_all(broker, [topics.embeddable], want=n, timeout=30, isolation_level=COMMITTED)
        assert len(first) == n
        assert runner.app is not None
        tid = f"{app_id}-0-0"  # Faust's transactional id of input partition 0 (TransactionManager)
        _, before = transaction_producer(runner.app, tid)
        assert before is not None
        fencer = AIOKafkaProducer(bootstrap_servers=broker, transactional_id=tid)
        await fencer.start()  # InitProducerId: a newer epoch of the gate's transactional id
        await fencer.stop()
        with caplog.at_level(logging.WARNING, logger="streams.gate"):
            await produce_values(broker, topics.entries, [entry(i)[1] for i in range(n, 2 * n)], key=b"ws-0")
            got = await read_all(broker, [topics.embeddable], want=2 * n, timeout=60, isolation_level=COMMITTED)
        _, after = transaction_producer(runner.app, tid)
    finally:
        await runner.stop()
    assert [json.loads(r.value)["id"] for r in got] == [f"e-{i}" for i in range(2 * n)]
    assert after is not None and after is not before and transaction_failed_fatally(before)
    assert f"the transactional producer {tid} is dead" in caplog.text
