"""The explorer's dead letters against the real broker (issue 45, part 6): the index reads only what is new,
bounded, and the pages read it off the event loop, in their own executor; a flood of requests waits there or
is told the pages are busy, and never holds the loop nor the thread pool that recall uses."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from episodic.bus.kafka import ensure_topics, start_producer
from episodic.lifecycle import dlq
from episodic.lifecycle.dlq import DlqTopics, replay
from episodic.lifecycle.dlq_index import DlqIndex
from recall.ui import dead_letters
from schemas.events import DlqRecord
from tests.integration.test_memory_api import scratch_env

pytestmark = pytest.mark.integration


def letter(i: int, ws: str = "ws-a") -> bytes:
    raw = json.dumps({"id": f"bad-{i}", "workspace_id": ws, "severity": "loud"}).encode()
    return DlqRecord.build(reason="bad_severity", error="severity: 'loud' is not one of ...", raw=raw,
                           topic="journal.entries", partition=0, offset=i).to_json()  # fmt: skip


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = await start_producer(bootstrap)
    try:
        await asyncio.gather(*[await producer.send(topic, key=b"ws-a", value=v) for v in values])
    finally:
        await producer.stop()


@pytest.fixture
def topics(broker: str, uid: str) -> DlqTopics:
    t = DlqTopics(dlq=f"dlq-{uid}", entries=f"entries-{uid}", replays=f"replays-{uid}")
    asyncio.run(ensure_topics(broker, partitions=2, topics=(t.dlq, t.entries, t.replays)))
    return t


def test_the_index_reads_what_is_new_keeps_the_newest_and_applies_the_ledger(broker: str, topics: DlqTopics) -> None:
    asyncio.run(produce(broker, topics.dlq, [letter(i) for i in range(30)]))
    index = DlqIndex(lambda: broker, topics=topics, capacity=20, min_interval_s=3600)
    kept = index.letters()
    assert index.total_read == 30 and len(kept) == 20 and index.refreshes == 1  # bounded: the newest 20
    assert all(x.record is not None and x.record.raw_text is None for x in kept)  # kept without their bytes
    assert kept[0].why_not_replayable() is None  # ... and still replayable as a whole letter is
    for _ in range(50):  # views within the interval read the index, not Kafka
        index.letters()
    assert index.refreshes == 1
    asyncio.run(produce(broker, topics.dlq, [letter(i) for i in range(30, 35)]))
    index.refresh(force=True)
    assert index.total_read == 35 and index.refreshes == 2  # only the 5 new ones were read
    newest = kept[-1]
    whole = index.fetch([(newest.partition, newest.offset)])[(newest.partition, newest.offset)]
    assert whole.record is not None and whole.record.raw_text is not None and "bad-" in whole.record.raw_text
    # a replay of letters it fetched marks them; the index sees the marks on its next refresh
    report = asyncio.run(replay(broker, dead_letters.Selector(ids=frozenset({(whole.partition, whole.offset)})),
                                topics=topics, partitions=2, given=[whole]))  # fmt: skip
    assert report.replayed == [whole.id]
    index.invalidate()
    marked = {x.id: x for x in index.letters()}[whole.id]
    assert marked.mark is not None and marked.status().startswith("replayed")
    assert index.total_read == 35  # the letters were not read again for it


@pytest.fixture
def env(tmp_path: Path, embedder: Any) -> Iterator[dict[str, Any]]:
    with scratch_env(tmp_path, embedder) as e:
        yield e


def test_the_pages_read_the_index_off_the_event_loop(
    env: dict[str, Any], broker: str, topics: DlqTopics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: a token looping on a dead letter's page. Every page of the loop is answered from the
    index (one read of the topic in all), and each record is decoded in the dead letters' own executor."""
    asyncio.run(produce(broker, topics.dlq, [letter(i) for i in range(12)]))
    c = env["client"]  # the open service
    services = c.app.state.services
    services.dlq_index = index = DlqIndex(lambda: broker, topics=topics, min_interval_s=3600)
    where: list[str] = []  # the thread each record of journal.dlq is decoded in
    real = dlq.letter_of

    def spy(*a: Any) -> Any:
        where.append(threading.current_thread().name)
        return real(*a)

    monkeypatch.setattr(dlq, "letter_of", spy)
    page = c.get("/ui/dlq")
    assert page.status_code == 200 and "12 dead letters" in page.text
    first = next(x for x in index.letters() if x.offset == 0)
    for _ in range(20):
        r = c.get(f"/ui/dlq/{first.id}")
        assert r.status_code == 200 and "bad-0" in r.text
    assert index.refreshes == 1 and index.total_read == 12
    assert len(where) == 12 + 1  # the topic read once, and the letter's bytes once (then kept whole)
    assert all(w.startswith("explorer-dlq") for w in where), set(where)


def test_a_flood_of_dead_letter_requests_is_told_to_wait(env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """When the dead letters' executor has MAX_WAITING requests already, one more is a 503 page at once; the
    recall API answers meanwhile."""
    hold = threading.Event()

    class Slow:
        exact = True
        total_read = 0

        def letters(self) -> list[Any]:
            hold.wait(30)
            return []

    c = env["client"]
    c.app.state.services.dlq_index = Slow()
    monkeypatch.setattr(dead_letters, "MAX_WAITING", 2)
    monkeypatch.setattr(dead_letters, "_SLOTS", threading.BoundedSemaphore(2))
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(c.get("/ui/dlq").status_code)) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = 50
        while dead_letters._SLOTS._value > 0 and deadline:  # type: ignore[attr-defined]
            threading.Event().wait(0.1)
            deadline -= 1
        busy = c.get("/ui/dlq")
        assert busy.status_code == 503 and "busy" in busy.text
        recall = c.post("/v1/recall", json={"workspace_id": "ws-a", "agent_id": "a1", "query": "checkout"})
        assert recall.status_code == 200
    finally:
        hold.set()
        for t in threads:
            t.join(30)
    assert results == [200, 200]
