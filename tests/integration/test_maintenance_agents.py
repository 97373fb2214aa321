"""The linker and importance agents against the real broker (Tansu) and the real store (Qdrant Edge): they
apply what arrives, skip and count garbage without dying, and count a re-delivered event once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from episodic.bus.kafka import ensure_topics, make_producer
from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.importance import ReferenceCounter
from episodic.maintenance.linker import Linker
from schemas.events import IndexedEvent
from streams.importance import importance_runner
from streams.linker import linker_runner
from tests.integration.maint_helpers import memory

pytestmark = pytest.mark.integration

GARBAGE: list[bytes | None] = [
    b"\xff\xfe not utf-8",
    b"{not json",
    b"[1, 2]",
    None,  # a tombstone
    b'{"entry_id": "x"}',  # missing fields
    b'{"entry_id":"e","workspace_id":"ws-a","point_id":"p","indexed_at":"yesterday","mode":"vector"}',
    b'{"workspace_id":"","scope":"own","mode":"hybrid","at":"2026-01-01T00:00:00Z","hits":[]}',
]


def settings(bootstrap: str, tmp_path: Path) -> Settings:
    return Settings(
        kafka_bootstrap=bootstrap, data_dir=tmp_path, topic_partitions=2, session_timeout_ms=6000, lag_interval_s=0.3
    )


async def produce(bootstrap: str, topic: str, values: list[bytes | None], key: bytes = b"ws-a") -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=v) for v in values]
        for f in futures:
            await f
    finally:
        await producer.stop()


async def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    import asyncio

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: last={last!r}")


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_the_linker_agent_links_vector_events_and_survives_garbage(
    broker: str, uid: str, tmp_path: Path, edge_stores: tuple[MemoryStore, StateStore]
) -> None:
    store, _ = edge_stores
    store.upsert([memory("old", axis=0), memory("new", axis=0), memory("far", axis=3)])
    topic = f"indexed.{uid}"
    await ensure_topics(broker, partitions=2, topics=(topic,))
    metrics = Metrics(CollectorRegistry())
    runner = linker_runner(
        settings(broker, tmp_path), linker=Linker(store=store), metrics=metrics, topic=topic, app_id=f"linker-{uid}"
    )
    await runner.start()
    try:
        assert await runner.wait_assigned(30)

        def indexed(entry_id: str, mode: str = "vector") -> bytes:
            ev = IndexedEvent(
                entry_id=entry_id,
                workspace_id="ws-a",
                point_id=point_id("ws-a", entry_id),
                indexed_at=datetime.now(UTC),
                mode=mode,  # type: ignore[arg-type]
            )
            return ev.to_json()

        await produce(broker, topic, [*GARBAGE, indexed("new"), indexed("new"), indexed("x", "duplicate")])
        # the batch's lag is observed after its handler returns (streams.agents): wait for both, not the first
        await until(
            lambda: (
                sample(metrics, "episodic_agent_events_total", agent="linker", outcome="already")
                and sample(metrics, "episodic_agent_lag_seconds_count", agent="linker") >= 3
            ),
            what="both",
        )
        rels = store.relations_of("ws-a", ["new"])
        assert [(r.src, r.dst, r.relation, round(r.weight, 3)) for r in rels] == [("new", "old", "similar", 1.0)]
        assert sample(metrics, "episodic_agent_malformed_total", agent="linker", topic=topic) == len(GARBAGE)
        assert sample(metrics, "episodic_agent_events_total", agent="linker", outcome="linked") == 1
        assert sample(metrics, "episodic_agent_events_total", agent="linker", outcome="ignored") == 1
        assert sample(metrics, "episodic_similar_edges_total") == 1
        assert sample(metrics, "episodic_agent_lag_seconds_count", agent="linker") == 3
        assert not runner.crashed
        # still alive after the garbage: a later event is linked too
        await produce(broker, topic, [indexed("old")])
        await until(lambda: sample(metrics, "episodic_agent_events_total", agent="linker", outcome="linked") == 2)
        assert [(r.src, r.dst) for r in store.relations_of("ws-a", ["new"])] == [("new", "old")]  # one per pair
    finally:
        await runner.stop()


async def test_the_importance_agent_counts_a_redelivered_event_once_and_survives_garbage(
    broker: str, uid: str, tmp_path: Path, edge_stores: tuple[MemoryStore, StateStore]
) -> None:
    store, state = edge_stores
    store.upsert([memory("m1"), memory("m2")])
    topic = f"referenced.{uid}"
    await ensure_topics(broker, partitions=2, topics=(topic,))
    metrics = Metrics(CollectorRegistry())
    counter = ReferenceCounter(store=store, state=state)
    runner = importance_runner(
        settings(broker, tmp_path), counter=counter, metrics=metrics, topic=topic, app_id=f"importance-{uid}"
    )
    await runner.start()
    try:
        assert await runner.wait_assigned(30)
        now = datetime.now(UTC).isoformat()

        def referenced(event_id: str | None, *hits: str) -> bytes:
            body: dict[str, Any] = {
                "workspace_id": "ws-a",
                "scope": "own",
                "mode": "hybrid",
                "at": now,
                "hits": [{"entry_id": h, "score": 0.5, "cosine": 0.4} for h in hits],
            }
            if event_id is not None:
                body["event_id"] = event_id
            return json.dumps(body).encode()

        once = referenced("ev-1", "m1", "m2")
        no_id = referenced(None, "m1")
        await produce(broker, topic, [once, *GARBAGE, once, no_id, no_id])  # each sent twice: re-delivery
        await until(
            lambda: sample(metrics, "episodic_agent_events_total", agent="importance", outcome="duplicate") >= 2,
            what="the re-deliveries",
        )
        got = store.retrieve([point_id("ws-a", "m1"), point_id("ws-a", "m2")])
        assert got[point_id("ws-a", "m1")]["reference_count"] == 2  # ev-1 and the id-less event, once each
        assert got[point_id("ws-a", "m2")]["reference_count"] == 1
        assert got[point_id("ws-a", "m1")]["last_referenced_at"] is not None
        assert sample(metrics, "episodic_agent_malformed_total", agent="importance", topic=topic) == len(GARBAGE)
        assert sample(metrics, "episodic_agent_events_total", agent="importance", outcome="applied") == 2
        assert sample(metrics, "episodic_references_total", outcome="counted") == 3
        assert not runner.crashed
    finally:
        await runner.stop()


REVIEW_GARBAGE: list[bytes | None] = [
    *GARBAGE,
    b'{"event_id":"g1","workspace_id":"ws-a","agent_id":"a1","at":"2026-01-01T00:00:00Z",'
    b'"reviews":[{"entry_id":"m1","rating":"great"}]}',  # a bad rating
    b'{"event_id":"g2","workspace_id":"ws-a","agent_id":"a1","at":"2026-01-01T00:00:00Z","reviews":[]}',
    b'{"event_id":"g3","workspace_id":"ws-a","agent_id":"a1","at":"2026-01-01T00:00:00Z",'
    b'"reviews":[{"entry_id":"m1","rating":"good","used":true}]}',  # an unknown field
]


async def test_the_reviews_agent_applies_reviews_once_and_dead_letters_garbage(
    broker: str, uid: str, tmp_path: Path, edge_stores: tuple[MemoryStore, StateStore]
) -> None:
    """memory.reviewed (issue 26): applied once per event beside the reference counts, in the same app; every
    record that does not decode goes to the dead-letter topic with reason bad_review, and the agent lives on."""
    from episodic.domain.review import state_of
    from episodic.maintenance.reviews import ReviewApplier
    from schemas.events import DlqRecord
    from streams.importance import review_dead_letters
    from tests.e2e.conftest import read_topic

    store, state = edge_stores
    store.upsert([memory("m1"), memory("m2")])
    referenced, reviewed, dlq = f"referenced.{uid}", f"reviewed.{uid}", f"dlq.{uid}"
    await ensure_topics(broker, partitions=2, topics=(referenced, reviewed, dlq))
    metrics = Metrics(CollectorRegistry())
    producer = make_producer(broker)
    await producer.start()
    runner = importance_runner(
        settings(broker, tmp_path),
        counter=ReferenceCounter(store=store, state=state),
        reviews=ReviewApplier(store=store, state=state),
        dead_letter=review_dead_letters(producer, metrics, topic=dlq),
        metrics=metrics,
        topic=referenced,
        reviewed_topic=reviewed,
        app_id=f"importance-{uid}",
    )
    await runner.start()
    try:
        assert await runner.wait_assigned(30)
        now = datetime.now(UTC).isoformat()
        good = json.dumps(
            {"event_id": "rv-1", "workspace_id": "ws-a", "agent_id": "a1", "at": now,
             "reviews": [{"entry_id": "m1", "rating": "good"}, {"entry_id": "m2", "rating": "again"}]}
        ).encode()  # fmt: skip
        await produce(broker, reviewed, [good, *REVIEW_GARBAGE, good])  # sent twice: a re-delivery
        await until(
            lambda: sample(metrics, "episodic_agent_events_total", agent="reviews", outcome="duplicate") >= 1,
            what="the re-delivery",
        )
        got = store.retrieve([point_id("ws-a", "m1"), point_id("ws-a", "m2")])
        assert state_of(got[point_id("ws-a", "m1")]).ratings == {"good": 1}
        assert state_of(got[point_id("ws-a", "m2")]).ratings == {"again": 1}
        assert sample(metrics, "episodic_reviews_total", rating="good") == 1
        assert sample(metrics, "episodic_agent_malformed_total", agent="reviews", topic=reviewed) == len(REVIEW_GARBAGE)
        letters = [DlqRecord.from_json(r.value) for r in await read_topic(broker, dlq, expect=len(REVIEW_GARBAGE))]
        assert {d.reason for d in letters} == {"bad_review"} and {d.source.topic for d in letters} == {reviewed}
        assert sorted(d.raw_bytes() for d in letters) == sorted(v or b"" for v in REVIEW_GARBAGE)
        assert any("rating" in d.error for d in letters)
        assert sample(metrics, "episodic_dead_lettered_total", reason="bad_review") == len(REVIEW_GARBAGE)
        assert not runner.crashed
    finally:
        await runner.stop()
        await producer.stop()


async def test_an_agent_stuck_on_a_down_store_keeps_its_batch_and_its_lag_rises(
    broker: str, uid: str, tmp_path: Path, edge_stores: tuple[MemoryStore, StateStore]
) -> None:
    store, state = edge_stores
    store.upsert([memory("m1")])
    down = {"on": True}

    class Flaky:
        """The real store, unreachable while `down["on"]`."""

        def __getattr__(self, name: str) -> Any:
            attr = getattr(store, name)
            if name != "retrieve":
                return attr

            def retrieve(*a: Any, **kw: Any) -> Any:
                if down["on"]:
                    raise StoreUnavailable("connection refused")
                return attr(*a, **kw)

            return retrieve

    topic = f"referenced.{uid}"
    await ensure_topics(broker, partitions=1, topics=(topic,))
    metrics = Metrics(CollectorRegistry())
    counter = ReferenceCounter(store=Flaky(), state=state)  # type: ignore[arg-type]
    group = f"importance-{uid}"
    runner = importance_runner(settings(broker, tmp_path), counter=counter, metrics=metrics, topic=topic, app_id=group)
    await runner.start()
    try:
        assert await runner.wait_assigned(30)
        now = datetime.now(UTC).isoformat()
        events = [
            json.dumps(
                {"event_id": f"e{i}", "workspace_id": "ws-a", "scope": "own", "mode": "sparse", "at": now,
                 "hits": [{"entry_id": "m1", "score": 1.0, "cosine": None}]}
            ).encode()
            for i in range(5)
        ]  # fmt: skip
        await produce(broker, topic, events)
        await until(lambda: sample(metrics, "episodic_consumer_lag_records", group=group) >= 5, what="lag rising")
        # the agent gathers its input (up to EPISODIC_AGENT_GATHER_MS): its first failed apply may come after
        # the lag probe has seen the records
        await until(
            lambda: sample(metrics, "episodic_agent_errors_total", agent="importance", stage="apply") >= 1,
            what="the apply failing",
        )
        down["on"] = False  # the store is back: the same batch is applied, nothing lost
        pid = point_id("ws-a", "m1")
        await until(lambda: store.retrieve([pid])[pid]["reference_count"] == 5, what="the batch applied")
        await until(lambda: sample(metrics, "episodic_consumer_lag_records", group=group) == 0, what="lag back to 0")
    finally:
        await runner.stop()
