"""Freshness: produce -> indexed latency with the whole embedded stack, at 20 embeddable entries/s among
420 entries/s (400/s of types the policy filters out).

`episodic up` runs as a child process on free loopback ports with a temporary data directory (its own
embedded broker, the gate, the embedding consumer, Qdrant Edge, the real model, the recall service).
This process produces journal entries in 50 ms ticks (1 `summary.generated` + 20 `exec.output_chunk`
per tick) and measures, per embeddable entry:

  indexed   produce time -> its first `memory.indexed` event arrives (a consumer on memory.indexed here):
            the memory is searchable. Mode "vector" when it was embedded inline, "sparse-only" when the
            consumer deferred its dense vector to stay within its visibility budget;
  vector    produce time -> the event saying its dense vector is in (the same event when inline);
  visible   produce time -> first `POST /v1/recall` that returns it (every 10th entry is sampled; one
            poller cycles over the pending samples every 50 ms, one request in flight, with the entry's
            first sentence and unique ref as the query, mode sparse, scope `own`, k 10).

Baselines in the same run: the broker round trip (a raw record produced and consumed through the same
broker at 20/s, no pipeline), and the seed's design (a 30-second sweep: an entry waits 0–30 s, p99 ≈ 29.7 s;
stated, not run).

    python -m bench.bench_freshness            # 45 s measured
    python -m bench.bench_freshness --quick    # 10 s measured
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    LOOPBACK,
    MIXES,
    Deadline,
    Row,
    child_process,
    emit,
    episodic_up_cmd,
    exec_noise,
    journal_entry,
    journal_summary,
    percentile,
    stack_env,
    tmp_dir,
    uid,
    wait_http,
)

TARGET_P99_S = 1.0
SEED_SWEEP_S = 30.0
TICK_S = 0.05
FILTERED_PER_TICK = 20  # 400/s
VISIBLE_EVERY = 10  # sample every 10th embeddable entry for the recall poll
VISIBLE_POLL_S = 0.05
VISIBLE_GIVE_UP_S = 10.0


class Probe:
    def __init__(self) -> None:
        self.produced: dict[str, float] = {}  # entry id -> wall time handed to the producer
        self.indexed: dict[str, float] = {}
        self.vector: dict[str, float] = {}
        self.deferred = 0
        self.visible: dict[str, float] = {}
        self.visible_missed: list[str] = []
        self.rt_sent: dict[str, float] = {}
        self.rt_recv: dict[str, float] = {}


async def consume_until(
    bootstrap: str, topic: str, on_value: Any, stop: asyncio.Event, *, group: str, ready: asyncio.Event
) -> None:
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="latest",
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        session_timeout_ms=6000,
        heartbeat_interval_ms=600,
    )
    await c.start()
    try:
        d = Deadline(60)
        while not c.assignment() and not d.passed():
            await c.getmany(timeout_ms=100)
        for tp in c.assignment():
            await c.seek_to_end(tp)
            await c.position(tp)
        ready.set()
        while not stop.is_set():
            got = await c.getmany(timeout_ms=100)
            now = time.time()
            for recs in got.values():
                for r in recs:
                    on_value(r, now)
    finally:
        await c.stop()


def visible_query(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "workspace_id": entry["workspace_id"],
        "agent_id": entry["agent_id"],
        "scope": "own",
        "query": entry["summary"].split(". ")[0][:200] + f" (ref {entry['id']})",
        "k": 10,
        # A point becomes visible to both legs at once (one upsert writes both vectors), so the cheap BM25
        # leg (the unique ref token) tells when it is recallable without loading the CPU with query
        # embeddings that would compete with the indexer being measured.
        "mode": "sparse",
    }


async def poll_visible(
    client: Any, url: str, pending: dict[str, dict[str, Any]], probe: Probe, done: asyncio.Event
) -> None:
    """One poller, one request in flight: cycles over the sampled entries not yet seen in recall."""
    while not (done.is_set() and not pending):
        for eid, entry in list(pending.items()):
            if time.time() - probe.produced[eid] > VISIBLE_GIVE_UP_S:
                probe.visible_missed.append(eid)
                pending.pop(eid, None)
                continue
            try:
                r = await client.post(url, json=visible_query(entry))
                if r.status_code == 200 and any(h.get("entry_id") == eid for h in r.json().get("hits", [])):
                    probe.visible[eid] = time.time()
                    pending.pop(eid, None)
                elif r.status_code in (401, 403, 404):
                    raise RuntimeError(f"/v1/recall answered {r.status_code}: {r.text[:200]}")
            except (OSError, ValueError) as e:  # connection reset under load: try again
                logging.getLogger("bench").debug("recall poll: %s", e)
        await asyncio.sleep(VISIBLE_POLL_S)


async def wait_warm(producer: Any, probe: Probe, ws: str, timeout: float) -> None:
    """Send embeddable entries until one comes back indexed: the gate and the consumer have joined."""
    from schemas import topics

    d = Deadline(timeout)
    rng = random.Random(1)
    i = 0
    while not d.passed():
        eid = f"warm-{i}"
        e = journal_entry(entry_id=eid, workspace_id=ws, agent_id="warm", summary=journal_summary(rng))
        await producer.send_and_wait(topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(e).encode())
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:
            if probe.indexed:
                return
            await asyncio.sleep(0.05)
        i += 1
    raise TimeoutError(f"the stack indexed nothing within {timeout}s")


async def run(
    args: argparse.Namespace,
    *,
    extra_env: dict[str, str] | None = None,
    on_metrics: Callable[[str], None] | None = None,
) -> list[Row]:
    """One measured run; `extra_env`: more EPISODIC_* settings for the stack; `on_metrics`: gets the stack's
    /metrics text after the load (bench_linker reads the linker's own lag from it)."""
    import httpx

    from episodic.bus.kafka import ensure_topics, make_producer
    from infra.broker import free_port
    from schemas import topics

    broker_port, http_port = free_port(LOOPBACK), free_port(LOOPBACK)
    bootstrap = f"{LOOPBACK}:{broker_port}"
    base = f"http://{LOOPBACK}:{http_port}"
    probe = Probe()
    rt_topic = f"bench.roundtrip.{uid()}"
    with tmp_dir() as tmp:
        log_path = tmp / "stack.log"
        env = stack_env(tmp / "data", broker_port=broker_port, http_port=http_port, **(extra_env or {}))
        with child_process(episodic_up_cmd(), env=env, log_path=log_path) as proc:
            health = wait_http(f"{base}/healthz", timeout=args.start_timeout, proc=proc, log_path=log_path)
            print(f"bench_freshness: stack up ({health.get('episodic')}), broker {bootstrap}, http {base}")
            await ensure_topics(bootstrap, partitions=1, topics=(rt_topic,))
            stop = asyncio.Event()
            ready_ix, ready_rt = asyncio.Event(), asyncio.Event()

            def on_indexed(rec: Any, now: float) -> None:
                with contextlib.suppress(ValueError, KeyError):
                    ev = json.loads(rec.value)
                    probe.indexed.setdefault(ev["entry_id"], now)
                    if ev.get("mode") == "vector":
                        probe.vector.setdefault(ev["entry_id"], now)
                    elif ev.get("mode") == "sparse-only":
                        probe.deferred += 1

            def on_rt(rec: Any, now: float) -> None:
                probe.rt_recv.setdefault(rec.value.decode(), now)

            tasks = [
                asyncio.create_task(
                    consume_until(
                        bootstrap, topics.MEMORY_INDEXED, on_indexed, stop, group=f"bench-ix-{uid()}", ready=ready_ix
                    )
                ),
                asyncio.create_task(
                    consume_until(bootstrap, rt_topic, on_rt, stop, group=f"bench-rt-{uid()}", ready=ready_rt)
                ),
            ]
            producer = make_producer(bootstrap, linger_ms=2)
            await producer.start()
            try:
                await asyncio.wait_for(asyncio.gather(ready_ix.wait(), ready_rt.wait()), 60)
                await wait_warm(producer, probe, "ws-warm", timeout=args.start_timeout)
                probe.indexed.clear()
                probe.vector.clear()
                probe.deferred = 0
                rows = await measure(args, producer, probe, rt_topic, f"{base}/v1/recall", httpx)
                print(stack_metrics_summary(f"{base}/metrics"))
                if on_metrics is not None:
                    on_metrics(httpx.get(f"{base}/metrics", timeout=5.0).text)
            finally:
                stop.set()
                await producer.stop()
                await asyncio.gather(*tasks, return_exceptions=True)
            if args.log:
                args.log.write_bytes(log_path.read_bytes())
            if proc.poll() is not None:
                raise RuntimeError(f"the stack exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
    return rows


def stack_metrics_summary(url: str) -> str:
    """The stack's own view (its /metrics): where the time goes, for diagnosis."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(url, timeout=5.0).text
    except httpx.HTTPError as e:
        return f"  (no /metrics: {e})"
    v: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name.endswith(("_sum", "_count")) or smp.name == "episodic_consumer_lag_records":
                v[smp.name] = v.get(smp.name, 0.0) + smp.value
            if smp.name == "episodic_gate_entries_total":
                key = f"gate {smp.labels.get('decision')}"
                v[key] = v.get(key, 0.0) + smp.value

    def mean(name: str) -> float:
        return v.get(f"{name}_sum", 0.0) / max(1.0, v.get(f"{name}_count", 0.0))

    gate = ", ".join(f"{k[5:]} {int(n)}" for k, n in sorted(v.items()) if k.startswith("gate "))
    return (
        f"  stack metrics: gate [{gate}]; batches {int(v.get('episodic_embed_batch_size_count', 0))} "
        f"(mean {mean('episodic_embed_batch_size'):.1f} records), embed mean "
        f"{mean('episodic_embed_duration_seconds') * 1000:.0f} ms, upsert mean "
        f"{mean('episodic_upsert_duration_seconds') * 1000:.0f} ms, embeddable-record->indexed mean "
        f"{mean('episodic_produce_to_index_seconds') * 1000:.0f} ms, consumer lag "
        f"{int(v.get('episodic_consumer_lag_records', 0))}, recall mean "
        f"{mean('episodic_recall_duration_seconds') * 1000:.0f} ms over "
        f"{int(v.get('episodic_recall_duration_seconds_count', 0))} requests"
    )


async def measure(
    args: argparse.Namespace, producer: Any, probe: Probe, rt_topic: str, recall_url: str, httpx: Any
) -> list[Row]:
    from schemas import topics

    rng = random.Random(42)
    run = uid()
    pending: dict[str, dict[str, Any]] = {}
    sampling_done = asyncio.Event()
    ticks = int(args.duration / TICK_S)
    sent_total = 0
    t_start = time.monotonic()
    async with httpx.AsyncClient(timeout=5.0, limits=httpx.Limits(max_connections=4)) as client:
        poller = asyncio.create_task(poll_visible(client, recall_url, pending, probe, sampling_done))
        for k in range(ticks):
            due = t_start + k * TICK_S
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            ws = f"ws-{k % 10}"
            eid = f"{run}-{k:06d}"
            entry = journal_entry(
                entry_id=eid,
                workspace_id=ws,
                agent_id=f"agent-{k % 3}",
                summary=f"{journal_summary(rng, args.mix)} (ref {eid})",
            )
            now = time.time()
            probe.produced[eid] = now
            await producer.send(
                topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(entry).encode(), timestamp_ms=int(now * 1000)
            )
            for j in range(FILTERED_PER_TICK):
                noise = exec_noise(
                    f"{eid}-x{j}", ws, f"stdout chunk {j}: compiled 37 files, 0 warnings, wrote build/{eid}.o"
                )
                await producer.send(topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(noise).encode())
            sent_total += 1 + FILTERED_PER_TICK
            rt_id = f"rt-{k}"
            probe.rt_sent[rt_id] = time.time()
            await producer.send(rt_topic, value=rt_id.encode())
            if k % VISIBLE_EVERY == 0:
                pending[eid] = entry
        elapsed = time.monotonic() - t_start
        await producer.flush()
        d = Deadline(30)
        while not d.passed() and (len(probe.indexed) < len(probe.produced) or len(probe.rt_recv) < len(probe.rt_sent)):
            await asyncio.sleep(0.1)
        d = Deadline(60)  # deferred vectors trail a heavy mix
        while not d.passed() and len(probe.vector) < len(probe.produced):
            await asyncio.sleep(0.1)
        sampling_done.set()
        await asyncio.wait_for(poller, VISIBLE_GIVE_UP_S + 10)

    rate = sent_total / elapsed
    lat_ix = [probe.indexed[e] - t for e, t in probe.produced.items() if e in probe.indexed]
    lat_vis = [probe.visible[e] - probe.produced[e] for e in probe.visible]
    lat_rt = [probe.rt_recv[r] - t for r, t in probe.rt_sent.items() if r in probe.rt_recv]
    lost = len(probe.produced) - len(lat_ix)
    print(
        f"  produced {sent_total} entries in {elapsed:.1f}s ({rate:.0f}/s; {len(probe.produced)} embeddable), "
        f"indexed {len(lat_ix)}, visible {len(lat_vis)}/{len(lat_vis) + len(probe.visible_missed)} sampled"
    )
    rt50, rt99 = percentile(lat_rt, 50), percentile(lat_rt, 99)
    sweep = f"seed: 30 s sweep (p99 ~{SEED_SWEEP_S * 0.99:.1f} s)"
    note = f"{len(lat_ix)} entries over {elapsed:.0f}s at {rate:.0f} entries/s"
    if lost:
        note += f"; {lost} never indexed within 30 s"
    rows = [
        Row("freshness", "produce -> memory.indexed p50", percentile(lat_ix, 50), "s", rt50, "broker round trip p50"),
        Row(
            "freshness",
            "produce -> memory.indexed p99",
            percentile(lat_ix, 99),
            "s",
            rt99,
            f"broker round trip p99; {sweep}",
            target="p99 <= 1 s",
            ok=bool(lat_ix) and not lost and percentile(lat_ix, 99) <= TARGET_P99_S,
            note=note,
        ),
    ]
    lat_vec = [probe.vector[e] - t for e, t in probe.produced.items() if e in probe.vector]
    if lat_vec:
        rows.append(
            Row(
                "freshness",
                "produce -> dense vector in, p99",
                percentile(lat_vec, 99),
                "s",
                rt99,
                "broker round trip p99",
                note=f"p50 {percentile(lat_vec, 50):.3f} s; {probe.deferred} of {len(probe.produced)} entries "
                f"written sparse first (vector deferred); {len(probe.produced) - len(lat_vec)} without a vector "
                "60 s after the load",
            )
        )
    if lat_vis or probe.visible_missed:
        rows += [
            Row(
                "freshness", "produce -> visible in /v1/recall p50", percentile(lat_vis, 50), "s", rt50, "broker rt p50"
            ),
            Row(
                "freshness",
                "produce -> visible in /v1/recall p99",
                percentile(lat_vis, 99),
                "s",
                rt99,
                "broker round trip p99",
                target="p99 <= 1 s",
                ok=bool(lat_vis) and not probe.visible_missed and percentile(lat_vis, 99) <= TARGET_P99_S,
                note=f"every {VISIBLE_EVERY}th entry polled every {VISIBLE_POLL_S * 1000:.0f} ms; "
                f"{len(probe.visible_missed)} not visible within {VISIBLE_GIVE_UP_S:.0f}s",
            ),
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10 s instead of 45 s (a sanity check, not a figure)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of load (default 45, quick 10)")
    ap.add_argument("--log", type=Path, default=None, help="copy the stack's log here")
    ap.add_argument(
        "--mix",
        choices=MIXES,
        default="mixed",
        help="summary lengths: mixed (26%% paragraphs, 4%% long reports) or short (1-3 sentences)",
    )
    ap.add_argument("--start-timeout", type=float, default=180.0, help="seconds for the stack to come up")
    args = ap.parse_args(argv)
    args.duration = args.duration or (10.0 if args.quick else 45.0)
    logging.basicConfig(level=logging.WARNING)
    rows = asyncio.run(run(args))
    emit(
        rows,
        f"freshness (embedded stack, {args.duration:.0f}s at 420 entries/s, 20/s embeddable, {args.mix} summaries)",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
