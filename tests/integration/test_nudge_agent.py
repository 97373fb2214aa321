"""The nudge agent on the real broker and the real state store (Qdrant Edge): one nudge per run per window
across a restart of the agent, the outbox recovered after a crash between decision and publication, and
malformed records counted and skipped."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from episodic.bus.kafka import ensure_topics, make_producer
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.nudge import NudgeBook, Observed, nudge_text
from schemas.events import NudgeEvent
from stack.stores import open_state, open_store
from streams.agents import AgentRunner
from streams.nudge import NudgeTopics, install_nudge, published_ids, recover
from tests.e2e.conftest import poll

pytestmark = pytest.mark.integration


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StateStore]:
    store = open_store(Settings(data_dir=tmp_path), dim=8)
    st = open_state(store)
    try:
        yield st
    finally:
        st.close()
        store.close()


def entry(i: int, *, run: str | None = "run-1", entry_type: str = "exec.output_chunk", ws: str = "ws-n") -> bytes:
    e: dict[str, Any] = {
        "id": f"{run}-{i}",
        "workspace_id": ws,
        "agent_id": "agent-a",
        "run_id": run,
        "ts": "2026-03-10T09:00:00Z",
        "entry_type": entry_type,
        "severity": "info",
        "summary": f"line {i}",
        "payload": {},
    }
    return json.dumps(e).encode()


async def produce(bootstrap: str, topic: str, values: list[bytes], key: str = "ws-n") -> None:
    p = make_producer(bootstrap)
    await p.start()
    try:
        futs = [await p.send(topic, key=key.encode(), value=v) for v in values]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def read_all(
    bootstrap: str, topic: str, *, settle_s: float = 1.5, want: int = 0, timeout_s: float = 30.0
) -> list[NudgeEvent]:
    """Everything on `topic`, read from the start of every partition until at least `want` records came (within
    `timeout_s`) and then nothing new for `settle_s`, timed from when the partitions are assigned: a fresh
    group's join could take longer than the settle time under load, and the read ended before its first fetch."""
    # no group: every partition of the topic is assigned as soon as its metadata is in
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await c.start()
    out: list[NudgeEvent] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not c.assignment():
            if time.monotonic() > deadline:
                raise AssertionError(f"no partition of {topic} was assigned within {timeout_s}s")
            await asyncio.sleep(0.05)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle_s or (len(out) < want and time.monotonic() < deadline):
            got = await c.getmany(timeout_ms=300)
            for recs in got.values():
                out.extend(NudgeEvent.from_json(r.value) for r in recs)
                quiet_since = time.monotonic()
    finally:
        await c.stop()
    return out


def counted(metrics: Metrics, outcome: str = "counted") -> float:
    return metrics.registry.get_sample_value("episodic_nudge_entries_total", {"outcome": outcome}) or 0.0


@asynccontextmanager
async def nudge_agent(
    bootstrap: str, state: StateStore, topics: NudgeTopics, group: str, metrics: Metrics
) -> AsyncIterator[NudgeBook]:
    """The agent as the role runs it: recovery, then the Faust app (the same group on every start)."""
    settings = Settings(kafka_bootstrap=bootstrap, topic_partitions=2)
    book = NudgeBook(state, threshold=60, idle_s=3600)
    producer = make_producer(bootstrap)
    await producer.start()

    async def publish(event: NudgeEvent) -> None:
        await (await producer.send(topics.nudges, key=event.workspace_id.encode(), value=event.to_json()))

    await recover(book=book, bootstrap=bootstrap, topic=topics.nudges, publish=publish, metrics=metrics)
    runner = AgentRunner(
        settings,
        name="nudge",
        app_id=group,
        topics=(topics.entries,),
        create_topics=topics.all(),
        metrics=metrics,
        install=lambda app: install_nudge(
            app,
            book=book,
            publish=publish,
            metrics=metrics,
            clock=lambda: datetime.now(UTC),
            sweep_every_s=3600,
            topics=topics,
        ),
    )
    await runner.start()
    try:
        yield book
    finally:
        await runner.stop()
        await producer.stop()


async def test_one_nudge_per_run_across_a_restart_of_the_agent(broker: str, state: StateStore, uid: str) -> None:
    topics = NudgeTopics(entries=f"entries-{uid}", nudges=f"nudges-{uid}")
    await ensure_topics(broker, partitions=2, topics=topics.all())
    m1 = Metrics(CollectorRegistry())
    async with nudge_agent(broker, state, topics, f"nudge-{uid}", m1):
        await produce(broker, topics.entries, [entry(i) for i in range(40)] + [entry(0, run=None)])
        await poll(lambda: counted(m1) == 40, what="40 entries counted")
        assert counted(m1, "no_run") == 1
    assert await read_all(broker, topics.nudges, settle_s=0.5) == []

    # A new process whose group has no committed offsets: the 40 records come again (the worst re-delivery);
    # the state says they were counted. Its metrics start at 0, the state does not.
    m2 = Metrics(CollectorRegistry())
    async with nudge_agent(broker, state, topics, f"nudge-{uid}-b", m2):
        await produce(broker, topics.entries, [entry(i) for i in range(40, 150)])
        await poll(lambda: counted(m2) >= 110, what="110 more entries counted")
        assert counted(m2, "replayed") == 40
    nudges = await read_all(broker, topics.nudges, want=1)
    assert len(nudges) == 1
    (n,) = nudges
    assert (n.workspace_id, n.agent_id, n.run_id, n.count) == ("ws-n", "agent-a", "run-1", 60)
    assert n.text == nudge_text(60)

    m3 = Metrics(CollectorRegistry())  # a third start: a memory.updated opens a new window
    async with nudge_agent(broker, state, topics, f"nudge-{uid}", m3):
        await produce(broker, topics.entries, [entry(150, entry_type="memory.updated")])
        await produce(broker, topics.entries, [entry(i) for i in range(151, 211)])
        await poll(lambda: counted(m3) >= 61, what="the new window counted")
    nudges = await read_all(broker, topics.nudges, want=2)
    assert [x.count for x in nudges] == [60, 60] and nudges[0].nudge_id != nudges[1].nudge_id


async def test_malformed_records_are_counted_and_skipped(broker: str, state: StateStore, uid: str) -> None:
    topics = NudgeTopics(entries=f"entries-{uid}", nudges=f"nudges-{uid}")
    await ensure_topics(broker, partitions=2, topics=topics.all())
    metrics = Metrics(CollectorRegistry())
    garbage = [b"\xff\xfe not utf-8", b"{not json", b"[]", b'{"id": "x"}', json.dumps({"run_id": 5}).encode()]
    async with nudge_agent(broker, state, topics, f"nudge-{uid}", metrics):
        await produce(broker, topics.entries, [*garbage, *(entry(i, run="run-g") for i in range(60))])
        await poll(lambda: counted(metrics) == 60, what="the valid entries after the garbage")
        invalid = metrics.registry.get_sample_value(
            "episodic_agent_malformed_total", {"agent": "nudge", "topic": topics.entries}
        )
        assert invalid == len(garbage)
        # read while the agent runs: it counts an entry before it delivers the nudge the entry completes, so a
        # stop right after the count could leave the nudge in its outbox, for its next start to publish
        assert [n.run_id for n in await read_all(broker, topics.nudges, want=1)] == ["run-g"]


def _decide(book: NudgeBook, run: str) -> NudgeEvent:
    now = datetime.now(UTC)
    ms = int(now.timestamp() * 1000)
    applied = book.apply(
        [Observed(0, i, ms + i, "ws-o", "agent-o", run, "exec.output_chunk") for i in range(60)], now=now
    )
    (event,) = applied.nudges
    return event


async def test_the_outbox_publishes_each_nudge_exactly_once_after_a_crash(
    broker: str, state: StateStore, uid: str
) -> None:
    """Crash after the decision was written: (a) before publishing, (b) after the broker's ack but before the
    outbox was cleared. Recovery publishes (a) and not (b)."""
    topic = f"nudges-{uid}"
    await ensure_topics(broker, partitions=2, topics=(topic,))
    assert await published_ids(broker, topic, {"x"}, timeout=20) == set()  # an empty topic is read to its end

    book = NudgeBook(state, threshold=60, idle_s=3600)
    not_published = _decide(book, "run-a")
    published = _decide(book, "run-b")
    await produce(broker, topic, [published.to_json()], key="ws-o")  # acked, then the "crash"

    sent: list[NudgeEvent] = []
    producer = make_producer(broker)
    await producer.start()

    async def publish(event: NudgeEvent) -> None:
        sent.append(event)
        await (await producer.send(topic, key=event.workspace_id.encode(), value=event.to_json()))

    try:
        restarted = NudgeBook(state, threshold=60, idle_s=3600)
        left, now_published = await recover(
            book=restarted, bootstrap=broker, topic=topic, publish=publish, metrics=Metrics(CollectorRegistry())
        )
        assert (left, now_published) == (2, 1) and [e.nudge_id for e in sent] == [not_published.nudge_id]
        assert restarted.unsent() == []
        assert await recover(
            book=restarted, bootstrap=broker, topic=topic, publish=publish, metrics=Metrics(CollectorRegistry())
        ) == (0, 0)
    finally:
        await producer.stop()
    on_topic = await read_all(broker, topic, want=2)
    assert sorted(e.run_id for e in on_topic) == ["run-a", "run-b"]


async def test_published_ids_reads_past_garbage_stops_when_all_are_found_and_says_none_when_it_cannot_tell(
    broker: str, state: StateStore, uid: str
) -> None:
    """The confirmation read: a topic that does not exist holds none of the ids; records that are not nudges
    are skipped; an unreachable broker gives None (the caller then publishes) within the timeout."""
    from infra.broker import free_port

    assert await published_ids(broker, f"never-created-{uid}", {"x"}, timeout=10) == set()
    topic = f"nudges-g-{uid}"
    await ensure_topics(broker, partitions=2, topics=(topic,))
    book = NudgeBook(state, threshold=60, idle_s=3600)
    a, b = _decide(book, "run-a"), _decide(book, "run-b")
    await produce(broker, topic, [b"not json", b'{"nudge_id": 7}', a.to_json(), b.to_json()], key="ws-o")
    assert await published_ids(broker, topic, {a.nudge_id, "absent"}, timeout=20) == {a.nudge_id}
    assert await published_ids(broker, topic, {a.nudge_id, b.nudge_id}, timeout=20) == {a.nudge_id, b.nudge_id}
    t0 = time.monotonic()
    assert await published_ids(f"127.0.0.1:{free_port()}", topic, {"x"}, timeout=3) is None
    assert time.monotonic() - t0 < 15
