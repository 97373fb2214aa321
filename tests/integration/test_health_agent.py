"""The health agent end to end over the real broker, the real store (Qdrant Edge) and the real model, with a
controllable clock: the ledger and recall tallies fed from Kafka (garbage included), the daily snapshot
taken by the timer at most once a day, stored, served by GET /v1/memory/health (history too), recomputed
by the admin endpoint, printed by `episodic health`, and still there after a restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from episodic.bus.kafka import ensure_topics, make_producer
from episodic.domain.health import band, linear
from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.health_inputs import Ledger, RecallTally
from episodic.maintenance.health_job import HealthConfig, HealthJob
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord, HealthSnapshot
from stack.commands import health as health_cli
from stack.roles import HttpRole, Resources
from stack.stores import open_state, open_store
from streams.agents import AgentRunner
from streams.health import HealthTopics, install_health
from tests.e2e.conftest import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY0 = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)  # before the daily time (03:00 UTC)
WS = "ws-h"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def rec(
    i: str, summary: str, *, crew: str, age_days: float, et: str = "summary.generated", **kw: Any
) -> EmbeddableRecord:
    ts = (DAY0 - timedelta(days=age_days)).isoformat().replace("+00:00", "Z")
    return EmbeddableRecord.from_dict(
        {
            "id": i,
            "workspace_id": kw.pop("ws", WS),
            "agent_id": "agent-h",
            "crew_id": crew,
            "ts": ts,
            "entry_type": et,
            "severity": "info",
            "summary": summary,
            "payload": {},
            "base_importance": 0.7,
            "accepted_at": ts,
            **kw,
        }
    )


RECORDS = [
    rec("e1", "checkout service OOM-killed after the memory limit was lowered", crew="c1", age_days=2),
    rec("e2", "checkout pods ran out of memory during the sale", crew="c1", age_days=4),
    rec("e3", "raised the checkout memory limit to 2 GiB", crew="c1", age_days=6),
    rec("e4", "payments ledger migration postponed to next week", crew="c1", age_days=8),
    rec("e5", "payments migration dry run passed on staging", crew="c1", age_days=10),
    rec("e6", "rolled back the search deploy after latency alerts", crew="c1", age_days=12),
    rec("e7", "checkout service OOM-killed after the memory limit was lowered", crew="c1", age_days=1),  # dup of e1
    rec("e8", "rule: watch checkout memory before sales", crew="c1", age_days=3, et="memory.consolidated",
        refs={"supports": ["e2"]}),
    rec("e9", "approval denied for dropping the orders table", crew="c2", age_days=5),
]  # fmt: skip
DEFERRED = rec("e10", "eval regression on the support bot answers", crew="c2", age_days=7)
LOST = rec("lost", "an entry the consumer never indexed", crew="c2", age_days=1)
OTHER = rec("x1", "another workspace entirely", crew="c1", age_days=1, ws="ws-other")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MemoryStore, StateStore]]:
    store = open_store(Settings(data_dir=tmp_path), dim=384)
    state = open_state(store)
    try:
        yield store, state
    finally:
        state.close()
        store.close()


def referenced(at: datetime, hits: list[tuple[str, float | None]], ws: str = WS) -> bytes:
    return json.dumps(
        {
            "workspace_id": ws,
            "scope": "own",
            "mode": "hybrid",
            "at": at.isoformat().replace("+00:00", "Z"),
            "hits": [{"entry_id": e, "score": 0.5, "cosine": c} for e, c in hits],
        }
    ).encode()


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = make_producer(bootstrap)
    await p.start()
    try:
        await asyncio.gather(*[await p.send(topic, key=WS.encode(), value=v) for v in values])
    finally:
        await p.stop()


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def health_runner(
    bootstrap: str, group: str, topics: HealthTopics, *, store: MemoryStore, state: StateStore, clock: Clock,
    metrics: Metrics, taken: list[HealthSnapshot],
) -> AgentRunner:  # fmt: skip
    job = HealthJob(store, state, HealthConfig(half_life_days=30), clock=clock)
    return AgentRunner(
        Settings(kafka_bootstrap=bootstrap, topic_partitions=2),
        name="health",
        app_id=group,
        topics=(topics.embeddable, topics.referenced),
        create_topics=topics.all(),
        metrics=metrics,
        install=lambda app: install_health(
            app,
            ledger=Ledger(state),
            tally=RecallTally(state, store),
            job=job,
            metrics=metrics,
            on_snapshots=taken.extend,
            tick_s=0.2,
            topics=topics,
        ),
    )


async def test_daily_snapshot_end_to_end(
    broker: str, embedder: Any, stores: tuple[MemoryStore, StateStore], uid: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    store, state = stores
    indexer = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder())
    indexer.index_batch([*RECORDS, OTHER])
    indexer.index_batch([DEFERRED], defer_dense=True)  # a memory still without its dense vector

    topics = HealthTopics(embeddable=f"emb-{uid}", referenced=f"ref-{uid}", health=f"health-{uid}")
    await ensure_topics(broker, partitions=2, topics=topics.all())
    clock, metrics, taken = Clock(DAY0), Metrics(CollectorRegistry()), []
    runner = health_runner(broker, f"health-{uid}", topics, store=store, state=state, clock=clock, metrics=metrics,
                           taken=taken)  # fmt: skip
    await runner.start()
    try:
        accepted = [r.to_json() for r in [*RECORDS, DEFERRED, LOST]]
        await produce(broker, topics.embeddable, [b"garbage", *accepted, b'{"id": "half"}', RECORDS[0].to_json()])
        yesterday = DAY0 - timedelta(days=1)
        recalls = [
            referenced(yesterday, [("e1", 0.6), ("e9", 0.4), ("e2", None)]),
            b"\x00\x01",
            referenced(DAY0 - timedelta(days=30), [("e1", 0.9)]),  # outside the 7-day window
        ]
        await produce(broker, topics.referenced, recalls)
        await poll(lambda: sample(metrics, "episodic_health_inputs_total", input="recalls") == 2, what="recalls")
        await poll(lambda: sample(metrics, "episodic_health_inputs_total", input="accepted") == 12, what="ledger")
        assert sample(metrics, "episodic_agent_malformed_total", agent="health", topic=topics.embeddable) == 2
        assert sample(metrics, "episodic_agent_malformed_total", agent="health", topic=topics.referenced) == 1
        assert taken == []  # 02:00 UTC: not yet

        clock.now = DAY0.replace(hour=12)  # past 03:00: the next tick takes today's snapshots
        await poll(lambda: len(taken) >= 4, what="the daily snapshots")  # ws-h, its crews c1 and c2, ws-other
    finally:
        await runner.stop()

    by_scope = {(s.workspace_id, s.crew_id): s for s in taken}
    assert set(by_scope) == {(WS, None), (WS, "c1"), (WS, "c2"), ("ws-other", None), ("ws-other", "c1")}
    ws = by_scope[(WS, None)]
    # 9 memories (e7 folded into e1), 8 with a dense vector; accepted: e1..e10 and lost; covered: e1, e7, e2..e6,
    # e8, e9 (e10 has no vector yet, lost never became a memory)
    assert (ws.inputs.memories, ws.inputs.dense, ws.inputs.accepted, ws.inputs.covered) == (9, 8, 11, 9)
    assert ws.metrics.coverage == pytest.approx(100 * 9 / 11, abs=0.01)
    assert ws.inputs.reachable == 2 and ws.metrics.reachability == pytest.approx(100 * 2 / 9, abs=0.01)  # e8 -> e2
    assert ws.inputs.recall_hits == 2 and ws.inputs.mean_recall_cosine == pytest.approx(0.5)
    assert ws.metrics.efficiency == pytest.approx(linear(0.5, 0.2, 0.7))
    assert ws.inputs.median_age_days == pytest.approx(6 + 10 / 24, abs=1e-3)  # e3 at 6 days, the clock at 12:00
    assert ws.inputs.coherence_sample == 8 and 0.3 < (ws.inputs.mean_top1_cosine or 0) < 1.0
    assert ws.band == band(ws.score) and ws.trigger == "schedule" and ws.date == "2026-03-10"
    c2 = by_scope[(WS, "c2")]
    assert (c2.inputs.memories, c2.inputs.accepted, c2.inputs.covered, c2.inputs.recall_hits) == (2, 3, 1, 1)
    assert c2.metrics.coherence is None  # one memory with a vector: no neighbour

    job = HealthJob(store, state, HealthConfig(half_life_days=30), clock=clock)
    assert job.latest(WS) == ws and job.latest(WS, "c2") == c2
    assert job.run_daily() == ([], [])  # at most once a day
    assert job.daily_due() is False

    # the next day: a restarted agent (a new group: every record comes again) takes the second snapshot
    clock.now = DAY0.replace(hour=12) + timedelta(days=1)
    metrics2, taken2 = Metrics(CollectorRegistry()), []
    runner = health_runner(broker, f"health-{uid}-b", topics, store=store, state=state, clock=clock,
                           metrics=metrics2, taken=taken2)  # fmt: skip
    await runner.start()
    try:
        await poll(lambda: len(taken2) >= 4, what="the second day's snapshots")
        # the event of 30 days ago was pruned with its day's tally (outside the window): counted again there,
        # harmlessly; the one of yesterday is a replay
        await poll(
            lambda: sample(metrics2, "episodic_health_inputs_total", input="recalls_replayed") == 1, what="replays"
        )
    finally:
        await runner.stop()
    day2 = HealthJob(store, state, HealthConfig(half_life_days=30), clock=clock).latest(WS)
    assert day2 is not None and day2.date == "2026-03-11"
    assert (day2.inputs.accepted, day2.inputs.recall_hits) == (11, 2)  # replays counted nothing twice

    await check_http_and_cli(store, state, clock, tmp_path, capsys)


async def no_kafka() -> Any:
    raise OSError("no Kafka in this test")


async def check_http_and_cli(
    store: MemoryStore, state: StateStore, clock: Clock, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=tmp_path, http_port=0, embed_model="none")
    role = HttpRole()
    res = Resources(
        settings=settings,
        metrics=Metrics(CollectorRegistry()),
        producer=None,  # no Kafka: memory.health events wait in the publisher's buffer (dropped at the end)
        kafka_connect=no_kafka,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": settings.bootstrap},
        fail=lambda code: None,
        store=store,
        state=state,
        bm25=Bm25Encoder(),
        clock=clock,
    )
    await role.start(res)
    url = f"http://127.0.0.1:{role.http_port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            r = await http.get("/v1/memory/health", params={"workspace_id": WS})
            assert r.status_code == 200 and r.json()["date"] == "2026-03-11" and r.json()["history"] is None
            r = await http.get("/v1/memory/health", params={"workspace_id": WS, "crew_id": "c2", "days": 7})
            body = r.json()
            assert [h["date"] for h in body["history"]] == ["2026-03-10", "2026-03-11"] and body["crew_id"] == "c2"
            r = await http.get("/v1/memory/health", params={"workspace_id": "nobody"})
            assert r.status_code == 404 and "POST /v1/admin/run/health" in r.json()["error"]
            r = await http.get("/v1/memory/health", params={"workspace_id": WS, "days": 0})
            assert r.status_code == 422 and r.json()["error"].startswith("days")

            clock.now += timedelta(hours=1)
            r = await http.post("/v1/admin/run/health", params={"workspace_id": WS})
            assert r.status_code == 200, r.text
            run = r.json()
            assert run["workspaces"] == 1 and [s["crew_id"] for s in run["snapshots"]] == [None, "c1", "c2"]
            assert run["snapshots"][0]["trigger"] == "admin"
            r = await http.get("/v1/memory/health", params={"workspace_id": WS, "days": 7})
            assert r.json()["trigger"] == "admin" and len(r.json()["history"]) == 2  # today's replaced
            assert (await http.post("/v1/admin/run/health", params={"workspace_id": "nobody"})).status_code == 404
            metrics_text = (await http.get("/metrics")).text
            assert 'episodic_memory_health_score{workspace_id="ws-h"}' in metrics_text
            assert 'episodic_health_snapshots_total{trigger="admin"} 3.0' in metrics_text

        # the CLI is synchronous: run it beside this loop, which serves the requests
        assert await asyncio.to_thread(health_cli.main, ["--workspace", WS, "--url", url, "--days", "3"]) == 0
        out = capsys.readouterr().out
        assert f"workspace {WS}" in out and "2026-03-11 (admin" in out
        assert any(word in out for word in ("RED", "YELLOW", "GREEN"))
        assert "last 3 days  ·" in out and "2026-03-10" in out  # no snapshot on the 9th: a dot
        assert await asyncio.to_thread(health_cli.main, ["--workspace", "nobody", "--url", url]) == 1
        assert "no memory-health snapshot" in capsys.readouterr().err
    finally:
        await role.drain()

    # a restart of the process: the store reopens, the snapshots are there, the gauges come back from them
    metrics = Metrics(CollectorRegistry())
    metrics.set_health(HealthJob(store, state, HealthConfig(), clock=clock).latest_of_workspaces(), 50)
    assert (
        sample(metrics, "episodic_memory_health_workspaces", band="red")
        + sample(metrics, "episodic_memory_health_workspaces", band="yellow")
        + sample(metrics, "episodic_memory_health_workspaces", band="green")
        == 2
    )
