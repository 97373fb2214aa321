"""kill -9 the whole stack, its embedded Kafka included, during ingestion; `episodic up` again on the same data.

What the journal on Kafka's log must give (issue 44, item 2), checked against a real `episodic up` in a
subprocess with its own embedded broker:
- every entry acknowledged before the kill (a 202 from `POST /v1/journal`, or the producer's ack) is indexed,
  exactly once (one memory per id, and the restarted consumer writes only the points that were missing);
- the dead letters and their replay ledger are still there: the letter replayed before the kill is not
  replayed again, the others still are;
- the forget and the review sent just before the kill are applied;
- the groups go on from their committed offsets: the restarted gate reads only the tail it had not committed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.kernel.settings import Settings
from episodic.lifecycle.dlq import Selector, letters, replay
from infra.broker import KafkaBroker, free_port
from stack.stores import open_store
from tests.e2e.conftest import poll, produce_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WS = "crash-ws"
N_HTTP = 1200  # entries over HTTP, in batches of 100
N_KAFKA = 1200  # entries produced straight to journal.entries
BAD = 6  # records the gate dead-letters (bad severity)


def entry(i: str, text: str, **over: Any) -> dict[str, Any]:
    doc = {
        "id": i, "workspace_id": WS, "agent_id": "agent", "run_id": f"run-{hash(i) % 7}",
        "ts": "2026-11-21T10:00:00Z", "entry_type": "summary.generated", "severity": "info", "summary": text,
        "payload": {},
    }  # fmt: skip
    doc.update(over)
    return doc


def start(data: Path, broker_port: int, http_port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]),
        "EPISODIC_BROKER": "kafka",
        "EPISODIC_DATA_DIR": str(data),
        "EPISODIC_BROKER_PORT": str(broker_port),
        "EPISODIC_HTTP_PORT": str(http_port),
        "EPISODIC_TOPIC_PARTITIONS": "2",
        "EPISODIC_BATCH_SIZE": "32",
        "EPISODIC_VISIBLE_BUDGET_MS": "0",
        "EPISODIC_LINKER_ENABLED": "false",
        "EPISODIC_DECAY_SCHEDULE": "0 0 29 2 *",
        "HF_HUB_OFFLINE": "1",
    })  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "stack.cli", "up"], env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def broker_pid(data: Path) -> int:
    """The embedded Kafka of the stack on `data` (its JVM names the log directory in its command line)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" in cmd and any(str(data).encode() in part for part in cmd):
            return int(proc.name)
    raise AssertionError(f"no Kafka process for {data}")


def gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


async def ready(http: httpx.AsyncClient) -> bool:
    try:
        r = await http.get("/healthz")
        return r.status_code == 200 and r.json()["status"] == "ok" and r.json()["journal"] == "durable"
    except (httpx.HTTPError, ValueError, KeyError):
        return False


async def indexed(http: httpx.AsyncClient) -> int:
    try:
        r = await http.get("/v1/memory/stats", params={"workspace_id": WS})
        return int(r.json()["indexed"]) if r.status_code == 200 else -1
    except (httpx.HTTPError, ValueError, KeyError):
        return -1


def metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


async def test_kill_9_of_the_stack_and_its_broker_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "stack.log"
    broker_port, http_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{broker_port}"
    url = f"http://127.0.0.1:{http_port}"
    acked: set[str] = set()
    proc = start(data, broker_port, http_port, log)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await poll(lambda: ready(http), timeout=180, what="the stack up on Kafka")
            # dead letters, one of them replayed (and dead-lettered again: it is still bad) before the kill
            bad = [json.dumps(entry(f"bad-{i}", f"bad {i}", severity="fatal")).encode() for i in range(BAD)]
            await produce_lines(bootstrap, bad)

            async def dead() -> list[Any]:
                return [x async for x in letters(bootstrap) if x.entry_id and x.entry_id.startswith("bad-")]

            first = await poll(lambda: _at_least(dead(), BAD), timeout=60, what="the bad records dead-lettered")
            replayed_before = first[0]
            done = await replay(
                bootstrap, Selector(ids=frozenset({(replayed_before.partition, replayed_before.offset)}))
            )
            assert done.replayed == [replayed_before.id]
            seed = [entry(f"s{i}", f"seed memory {i}: the cache on node {i} was warmed") for i in range(3)]
            assert (await http.post("/v1/journal", json={"entries": seed})).status_code == 202
            acked |= {e["id"] for e in seed}
            await poll(lambda: _is(indexed(http), 3), timeout=60, what="the seed indexed")

            async def over_http() -> None:
                for b in range(0, N_HTTP, 100):
                    batch = [
                        entry(f"h{i}", f"http entry {i}: deploy {i % 13} of service {i % 29}")
                        for i in range(b, b + 100)
                    ]
                    r = await http.post("/v1/journal", json={"entries": batch})
                    if r.status_code == 202:
                        acked.update(e["id"] for e in batch)

            async def over_kafka() -> None:
                from episodic.bus.kafka import make_producer

                producer = make_producer(bootstrap)
                await producer.start()
                try:
                    for i in range(N_KAFKA):
                        doc = entry(f"k{i}", f"kafka entry {i}: node {i % 17} restarted after {i % 5} tries")
                        fut = await producer.send("journal.entries", key=WS.encode(), value=json.dumps(doc).encode())
                        fut.add_done_callback(lambda f, i=doc["id"]: f.exception() is None and acked.add(i))
                        if i % 50 == 0:
                            await asyncio.sleep(0.05)
                    await producer.flush()
                finally:
                    await producer.stop()

            writers = asyncio.gather(over_http(), over_kafka())
            await poll(lambda: _at_least_n(indexed(http), 400), timeout=180, what="ingestion under way")
            # a forget and a review in flight, then the kill
            forgotten = {"s0", "h5"}
            r = await http.post(
                "/v1/memory/forget", params={"wait": 0}, json={"workspace_id": WS, "entry_ids": sorted(forgotten)}
            )
            assert r.status_code == 202, r.text
            review = {"workspace_id": WS, "agent_id": "agent", "reviews": [{"entry_id": "s1", "rating": "easy"}]}
            assert (await http.post("/v1/memory/review", json=review)).status_code == 202
            kafka_pid = broker_pid(data)
            os.kill(kafka_pid, signal.SIGKILL)
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.gather(writers, return_exceptions=True)  # their sends after the kill fail: not acked
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    await poll(lambda: gone(kafka_pid), timeout=10, what="the killed broker gone")
    assert len(acked) > 400, "too little was acknowledged before the kill"
    # What the killed stack left: its points (nothing runs now, the store can be opened) and, from its own
    # Kafka log started alone, how far each group had committed.
    store = open_store(Settings(data_dir=data), dim=384)
    try:
        stored_at_kill = store.count(WS)
    finally:
        store.close()
    tails = await asyncio.to_thread(uncommitted, data, broker_port)

    proc2 = start(data, broker_port, http_port, log)  # the same data directory: its Kafka log, its store
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await poll(lambda: ready(http), timeout=180, what="the stack up again")
            # every acknowledged entry but the forgotten ones, exactly once (ids are the memories' identity)
            want = acked - forgotten
            await poll(lambda: _all_there(http, want), timeout=240, what="every acknowledged entry indexed")
            for gone_id in sorted(forgotten):
                assert (await http.get(f"/v1/memory/{gone_id}", params={"workspace_id": WS})).status_code == 404
            detail = (await http.get("/v1/memory/s1", params={"workspace_id": WS})).json()
            await poll(lambda: _reviewed(http, "s1"), timeout=60, what="the review applied")
            assert detail["occurrences"] == 1
            text = (await http.get("/metrics")).text
            # the groups went on from their committed offsets: the gate read exactly what it had not committed,
            # the consumer wrote exactly the points missing at the kill (what was stored is not written again)
            gated = metric(text, "episodic_gate_entries_total")
            assert gated == tails["episodic-gate"], (gated, tails)
            written = metric(text, "episodic_points_written_total")
            total = await indexed(http)
            # (the forget may have removed up to two stored points after the restart)
            missing = total - stored_at_kill
            assert missing <= written <= missing + len(forgotten), (written, total, stored_at_kill)
            assert 0 < written <= tails["episodic-embedder"], (written, tails)
            # the dead letters and their ledger: the one replayed before the kill is not replayed again
            again = await replay(bootstrap, Selector(ids=frozenset((x.partition, x.offset) for x in first)))
            assert replayed_before.id not in again.replayed
            assert set(again.replayed) == {x.id for x in first} - {replayed_before.id}
            assert again.skipped.get("replayed already (--force to replay it again)", 0) == 1, again.skipped
        proc2.send_signal(signal.SIGTERM)
        assert proc2.wait(90) == 0, log.read_text()[-3000:]
    finally:
        if proc2.poll() is None:
            proc2.kill()
            proc2.wait(10)


def uncommitted(data: Path, port: int) -> dict[str, int]:
    """group -> the records of its topic past its committed offsets, read from the stack's Kafka log with the
    broker started alone on it (and stopped again)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    async def read(bootstrap: str) -> dict[str, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await admin.start()
        await consumer.start()
        try:
            out = {}
            for group, topic in (("episodic-gate", "journal.entries"), ("episodic-embedder", "journal.embeddable")):
                tps = [TopicPartition(topic, p) for p in range(2)]
                # both groups committed before the kill; a coordinator still loading its log answers with none
                committed: dict[Any, int] = {}
                while not committed:
                    found = await admin.list_consumer_group_offsets(group, partitions=tps)
                    committed = {tp: m.offset for tp, m in found.items() if m.offset >= 0}
                    await asyncio.sleep(0.2)
                ends = await consumer.end_offsets(tps)
                out[group] = sum(ends[tp] - committed.get(tp, 0) for tp in tps)
            return out
        finally:
            await consumer.stop()
            await admin.close()

    broker = KafkaBroker(data_dir=data / "kafka", port=port)
    broker.start()
    try:
        return asyncio.run(read(broker.bootstrap))
    finally:
        broker.stop()


async def _at_least(found: Any, n: int) -> Any:
    got = await found
    return got if len(got) >= n else None


async def _at_least_n(count: Any, n: int) -> bool:
    return bool(await count >= n)


async def _is(count: Any, n: int) -> bool:
    return bool(await count == n)


async def _all_there(http: httpx.AsyncClient, want: set[str]) -> bool:
    """Every id of `want` is a memory of its own (a page of the listing at a time), and nothing else is."""
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"workspace_id": WS, "limit": 100}
        if cursor:
            params["cursor"] = cursor
        r = await http.get("/v1/memories", params=params)
        if r.status_code != 200:
            return False
        body = r.json()
        seen += [m["entry_id"] for m in body["memories"]]
        cursor = body.get("next_cursor")
        if not cursor:
            break
    assert len(seen) == len(set(seen)), "a memory listed twice"
    return want <= set(seen)


async def _reviewed(http: httpx.AsyncClient, entry_id: str) -> bool:
    r = await http.get(f"/v1/memory/{entry_id}", params={"workspace_id": WS})
    return r.status_code == 200 and bool((r.json().get("review") or {}).get("count"))
