"""Soak: the embedded stack under a steady mixed load for minutes, reported per minute against minute 1.

`episodic up` runs as a child process on free loopback ports with a temporary data directory (its own
embedded broker, the gate, the embedding consumer, Qdrant Edge, the real model, the recall service, the
linker and the importance agent). This process applies, for `--minutes` (10 by default):

  ingest    400 journal entries/s in 50 ms ticks, 5 % embeddable (1 `summary.generated` per tick, 19
            `exec.output_chunk` at debug that the gate filters out), over 8 workspaces; the summaries are
            `--mix short` (typical 1-3 sentence entries, the freshness headline's mix) or `mixed` (26 %
            paragraphs, 4 % long reports: at 20/s that saturates the model on 2 CPU cores);
  recall    20 `POST /v1/recall`/s (hybrid: the ONNX query embedding, dense + BM25), open loop: one request
            started every 50 ms whatever the previous ones do (at most 40 in flight; a request that
            cannot start then is counted as skipped, not hidden).

Per minute it reports freshness (produce -> the entry's first `memory.indexed` event: searchable) p50/p99,
recall latency p50/p99, the rates achieved, errors, and the resident memory (RSS, from /proc) of the stack
process and of its broker at the end of the minute, and the CPU each used in the minute (% of one core),
each next to minute 1 as the baseline. At the end
the producer stops and the check waits for the tail: lost entries are the embeddable entries without a
`memory.indexed` event plus the entries the gate never consumed (`episodic_gate_entries_total` against
the count produced): both must be 0. RSS "does not grow without bound" when the last minute's is within
10 % of the middle minute's (a plateau after warm-up; the model, the ONNX session and the store's
segments settle in the first minutes); runs shorter than 6 minutes report it without a verdict. The
embedded broker (Apache Kafka, or the Tansu fallback) is shown apart: its RSS, its CPU and its log on disk;
the soak's topics get a short retention (`--retention-minutes`, 5 by default) so that Kafka's deletes bite
within the run and the log on disk has a plateau (Tansu keeps every record: it grows with the traffic).

    python -m bench.bench_soak                 # 10 minutes
    python -m bench.bench_soak --minutes 3     # a shorter run
    python -m bench.bench_soak --quick         # 2 minutes
    python -m bench.bench_soak --minutes 30 --rate 0.5   # half the load (200 entries/s, 10 recalls/s)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_freshness import consume_until, wait_warm
from bench.common import (
    LOOPBACK,
    MIXES,
    Deadline,
    Row,
    child_process,
    children,
    cpu_seconds,
    emit,
    episodic_up_cmd,
    exec_noise,
    journal_entry,
    journal_summary,
    percentile,
    rss_mib,
    stack_env,
    tmp_dir,
    uid,
    wait_http,
)

TICK_S = 0.05
FILTERED_PER_TICK = 19  # + 1 embeddable = 20 per tick = 400/s, 5 % embeddable
RECALL_EVERY_S = 0.05  # 20/s
MAX_IN_FLIGHT = 40
WORKSPACES = [f"soak-ws-{i}" for i in range(8)]
RSS_PLATEAU = 0.10
INDEX_LOG = "dense index rebuilt in a worker"  # episodic.store.edge's log line for each background index cycle
FLAT = 1.2  # issue 27: the last 5 minutes' p99 within this of minutes 2-6
MIN_MINUTES_FOR_VERDICT = 6  # shorter runs are mostly warm-up: the RSS plateau is reported, not judged
TAIL_S = 180.0


@dataclass
class Minute:
    produced: int = 0
    fresh: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    recall_errors: int = 0
    recall_skipped: int = 0
    rss_stack: float = 0.0
    rss_broker: float = 0.0
    cpu_stack: float = 0.0  # % of one core over the minute
    cpu_broker: float = 0.0
    disk_broker: float = 0.0  # MiB of the embedded Kafka's log directory at the end of the minute
    disk_topics: dict[str, float] = field(default_factory=dict)  # ... by topic (its partitions summed)
    seconds: float = 60.0


@dataclass
class Soak:
    minutes: list[Minute]
    produced_at: dict[str, tuple[float, int]] = field(default_factory=dict)  # embeddable id -> (time, minute)
    indexed: set[str] = field(default_factory=set)
    produced_total: int = 0
    send_errors: int = 0
    rate: float = 1.0  # the load's scale: 1.0 is 400 entries/s and 20 recalls/s (--rate)

    def on_indexed(self, rec: Any, now: float) -> None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            eid = json.loads(rec.value)["entry_id"]
            if eid in self.produced_at and eid not in self.indexed:
                self.indexed.add(eid)
                t, minute = self.produced_at[eid]
                self.minutes[minute].fresh.append(now - t)


def recall_body(rng: random.Random) -> dict[str, Any]:
    ws = rng.choice(WORKSPACES)
    return {
        "workspace_id": ws,
        "agent_id": f"agent-{WORKSPACES.index(ws) % 3}",
        "scope": "own",
        "query": journal_summary(rng, "short")[:200],
        "k": 5,
    }


async def recall_load(client: Any, url: str, soak: Soak, clock: Any, stop: asyncio.Event) -> None:
    """Open loop: start one recall every RECALL_EVERY_S; each records its latency in its start minute."""
    rng = random.Random(11)
    in_flight: set[asyncio.Task[None]] = set()
    t0 = time.monotonic()
    k = 0

    async def one(minute: int, body: dict[str, Any]) -> None:
        t = time.perf_counter()
        try:
            r = await client.post(url, json=body)
            ok = r.status_code == 200
        except Exception:
            ok = False
        if ok:
            soak.minutes[minute].recall.append(time.perf_counter() - t)
        else:
            soak.minutes[minute].recall_errors += 1

    while not stop.is_set():
        delay = t0 + k * RECALL_EVERY_S / soak.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        k += 1
        minute = clock()
        if minute >= len(soak.minutes):
            break
        if len(in_flight) >= MAX_IN_FLIGHT:
            soak.minutes[minute].recall_skipped += 1
            continue
        task = asyncio.create_task(one(minute, recall_body(rng)))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight, return_exceptions=True)


async def ingest_load(producer: Any, soak: Soak, clock: Any, run: str, mix: str) -> None:
    """400 entries/s for the whole run, 1 in 20 embeddable, ticks on absolute times (no drift)."""
    from schemas import topics

    rng = random.Random(42)
    t0 = time.monotonic()
    k = 0
    pending: list[asyncio.Future[Any]] = []
    while True:
        delay = t0 + k * TICK_S / soak.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        minute = clock()
        if minute >= len(soak.minutes):
            break
        ws = WORKSPACES[k % len(WORKSPACES)]
        eid = f"{run}-{k:07d}"
        entry = journal_entry(
            entry_id=eid,
            workspace_id=ws,
            agent_id=f"agent-{k % len(WORKSPACES) % 3}",
            summary=f"{journal_summary(rng, mix)} (ref {eid})",
        )
        now = time.time()
        soak.produced_at[eid] = (now, minute)
        batch = [json.dumps(entry).encode()]
        batch += [
            json.dumps(
                exec_noise(f"{eid}-x{j}", ws, f"stdout chunk {j}: compiled 37 files, wrote build/{eid}.o")
            ).encode()
            for j in range(FILTERED_PER_TICK)
        ]
        for value in batch:
            pending.append(await producer.send(topics.JOURNAL_ENTRIES, key=ws.encode(), value=value))
        soak.minutes[minute].produced += len(batch)
        soak.produced_total += len(batch)
        k += 1
        if len(pending) >= 2000:  # acknowledged by the broker (acks=all); failures are counted, not hidden
            results = await asyncio.gather(*pending, return_exceptions=True)
            soak.send_errors += sum(isinstance(r, Exception) for r in results)
            pending = []
    results = await asyncio.gather(*pending, return_exceptions=True)
    soak.send_errors += sum(isinstance(r, Exception) for r in results)


def gate_consumed(metrics_text: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for f in text_string_to_metric_families(metrics_text)
        for s in f.samples
        if s.name == "episodic_gate_entries_total"
    )


def write_conflicts(metrics_text: str) -> dict[str, float]:
    """episodic_store_write_conflicts_total by writer (issue 25: how often writers met under the load)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        s.labels.get("writer", "?"): s.value
        for f in text_string_to_metric_families(metrics_text)
        for s in f.samples
        if s.name == "episodic_store_write_conflicts_total" and s.value
    }


async def run(args: argparse.Namespace) -> list[Row]:
    import httpx

    from episodic.bus.kafka import make_producer
    from infra.broker import free_port
    from schemas import topics

    broker_port, http_port = free_port(LOOPBACK), free_port(LOOPBACK)
    bootstrap = f"{LOOPBACK}:{broker_port}"
    base = f"http://{LOOPBACK}:{http_port}"
    soak = Soak(minutes=[Minute() for _ in range(args.minutes)], rate=args.rate)
    with tmp_dir("episodic-soak-") as tmp:
        log_path = tmp / "stack.log"
        env = stack_env(tmp / "data", broker_port=broker_port, http_port=http_port, **args.env)
        with child_process(episodic_up_cmd(), env=env, log_path=log_path) as proc:
            health = wait_http(f"{base}/healthz", timeout=args.start_timeout, proc=proc, log_path=log_path)
            print(f"bench_soak: stack up ({health.get('episodic')}), broker {bootstrap}, http {base}", flush=True)
            stop, ready = asyncio.Event(), asyncio.Event()
            warm = Soak(minutes=[Minute()])  # the warm-up's indexed events, apart from the measured ones

            def on_indexed(rec: Any, now: float) -> None:
                warm.indexed.add("any")
                soak.on_indexed(rec, now)

            reader = asyncio.create_task(
                consume_until(bootstrap, topics.MEMORY_INDEXED, on_indexed, stop, group=f"soak-{uid()}", ready=ready)
            )
            producer = make_producer(bootstrap, linger_ms=5)
            await producer.start()
            try:
                await asyncio.wait_for(ready.wait(), 60)
                await wait_warm(producer, warm, WORKSPACES[0], timeout=args.start_timeout)  # type: ignore[arg-type]
                gate_before = gate_consumed(httpx.get(f"{base}/metrics", timeout=5).text)
                t0 = time.monotonic()

                def clock() -> int:
                    return int((time.monotonic() - t0) // 60)

                async with httpx.AsyncClient(
                    timeout=10.0, limits=httpx.Limits(max_connections=MAX_IN_FLIGHT)
                ) as client:
                    kafka_log = tmp / "data" / "kafka" / "data"
                    sampler = asyncio.create_task(sample_processes(proc.pid, soak, clock, t0, kafka_log))
                    recalls = asyncio.create_task(recall_load(client, f"{base}/v1/recall", soak, clock, stop))
                    await ingest_load(producer, soak, clock, uid(), args.mix)
                    await recalls
                    await sampler
                lost_ix, lost_gate, tail_s = await wait_tail(soak, f"{base}/metrics", gate_before)
                conflicts = write_conflicts(httpx.get(f"{base}/metrics", timeout=5).text)
            finally:
                stop.set()
                await producer.stop()
                await asyncio.gather(reader, return_exceptions=True)
            if args.log:
                args.log.write_bytes(log_path.read_bytes())
            cycles = [line for line in log_path.read_text(errors="replace").splitlines() if INDEX_LOG in line]
            print(f"background index cycles in the stack's log: {len(cycles)}")
            for line in cycles:
                print("  " + line[line.index(INDEX_LOG) :][:400])
            if proc.poll() is not None:
                raise RuntimeError(f"the stack exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
    total = sum(conflicts.values())
    print(f"write conflicts (the write discipline's re-reads, issue 25): {total:.0f} {dict(sorted(conflicts.items()))}")
    return [*report(soak, lost_ix, lost_gate, tail_s), Row("soak", "write conflicts, all writers", total, "")]


def du_topics(path: Path) -> dict[str, float]:
    """MiB allocated under the log directory by topic (a partition's folder is `<topic>-<n>`; files at the
    top under "(broker)"): what grows when the log does."""
    out: dict[str, float] = {}
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file():
                rel = f.relative_to(path).parts
                topic = rel[0].rsplit("-", 1)[0] if len(rel) > 1 else "(broker)"
                # allocated, not apparent: Kafka preallocates its indexes
                out[topic] = out.get(topic, 0.0) + f.stat().st_blocks * 512 / 2**20
    return out


def du_mib(path: Path) -> float:
    return sum(du_topics(path).values())


async def sample_processes(pid: int, soak: Soak, clock: Any, t0: float, kafka_log: Path) -> None:
    """RSS of the stack and of its broker (its child) at the end of every minute, and the CPU each used in it
    (what grows when the latencies do: the stack's work, or the embedded broker's fetches)."""
    used = (cpu_seconds(pid), sum(cpu_seconds(c) for c in children(pid)))
    since = time.monotonic()
    for m in range(len(soak.minutes)):
        delay = t0 + (m + 1) * 60 - 0.5 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        minute, brokers = soak.minutes[m], children(pid)
        minute.rss_stack = rss_mib(pid)
        minute.rss_broker = sum(rss_mib(c) for c in brokers)
        now, spent = time.monotonic(), (cpu_seconds(pid), sum(cpu_seconds(c) for c in brokers))
        minute.cpu_stack, minute.cpu_broker = (100 * (b - a) / (now - since) for a, b in zip(used, spent, strict=True))
        minute.disk_topics = await asyncio.to_thread(du_topics, kafka_log)
        minute.disk_broker = sum(minute.disk_topics.values())
        used, since = spent, now


async def wait_tail(soak: Soak, metrics_url: str, gate_before: float) -> tuple[int, int, float]:
    """After the load: wait until every embeddable entry is indexed and the gate consumed every entry (or
    TAIL_S passed); returns (embeddable entries never indexed, entries never consumed, seconds waited)."""
    import httpx

    t = time.monotonic()
    d = Deadline(TAIL_S)
    consumed = 0.0
    while not d.passed():
        with contextlib.suppress(httpx.HTTPError):
            consumed = gate_consumed(httpx.get(metrics_url, timeout=5).text) - gate_before
        if len(soak.indexed) >= len(soak.produced_at) and consumed >= soak.produced_total:
            break
        await asyncio.sleep(0.5)
    return len(soak.produced_at) - len(soak.indexed), max(0, soak.produced_total - int(consumed)), time.monotonic() - t


def report(soak: Soak, lost_ix: int, lost_gate: int, tail_s: float) -> list[Row]:
    first = soak.minutes[0]
    base_f, base_r = percentile(first.fresh, 99), percentile(first.recall, 99)

    def ratio(v: float, b: float) -> str:
        return f"{v / b:5.2f}" if b and b == b and v == v else "    -"

    print("\nper minute (ratios against minute 1):")
    print(
        f"{'min':>3} {'in/s':>5} {'fresh p50':>9} {'p99':>7} {'x1':>5} {'recall/s':>8} {'p50':>7} {'p99':>7} "
        f"{'x1':>5} {'err':>4} {'skip':>4} {'RSS MiB':>8} {'x1':>5} {'broker':>7} {'CPU %':>6} {'broker':>6} "
        f"{'log MiB':>7}"
    )
    for i, m in enumerate(soak.minutes, 1):
        f50, f99 = percentile(m.fresh, 50), percentile(m.fresh, 99)
        r50, r99 = percentile(m.recall, 50), percentile(m.recall, 99)
        print(
            f"{i:>3} {m.produced / m.seconds:5.0f} {f50 * 1000:7.0f}ms {f99 * 1000:5.0f}ms {ratio(f99, base_f)} "
            f"{len(m.recall) / m.seconds:8.1f} {r50 * 1000:5.0f}ms {r99 * 1000:5.0f}ms {ratio(r99, base_r)} "
            f"{m.recall_errors:>4} {m.recall_skipped:>4} {m.rss_stack:8.0f} {ratio(m.rss_stack, first.rss_stack)} "
            f"{m.rss_broker:7.0f} {m.cpu_stack:6.0f} {m.cpu_broker:6.0f} {m.disk_broker:7.1f}"
        )
    last, mid = soak.minutes[-1], soak.minutes[len(soak.minutes) // 2]
    growth = (last.rss_stack - mid.rss_stack) / mid.rss_stack if mid.rss_stack else float("nan")
    if last.disk_topics:  # which topic the broker's log is, at the first, middle and last minute
        print("\nbroker log by topic, MiB (minute 1 / middle / last):")
        for topic in sorted(last.disk_topics, key=lambda t: -last.disk_topics[t])[:8]:
            sizes = (m.disk_topics.get(topic, 0.0) for m in (first, mid, last))
            print(f"  {topic:<40} " + " / ".join(f"{v:7.2f}" for v in sizes))
    print(
        f"\nproduced {soak.produced_total} entries ({len(soak.produced_at)} embeddable), send errors "
        f"{soak.send_errors}; tail waited {tail_s:.0f}s; lost: {lost_ix} embeddable never indexed, "
        f"{lost_gate} never consumed by the gate; RSS last vs middle minute {growth:+.1%}"
    )
    label = "minute 1 of the same run"
    # issue 27's steady state: the last 5 minutes pooled against minutes 2-6 pooled, within FLAT
    early, late = soak.minutes[1:6], soak.minutes[-5:]
    flat_rows = []
    for what, key in (("freshness", "fresh"), ("recall", "recall")):
        e99 = percentile([x for m in early for x in getattr(m, key)], 99)
        l99 = percentile([x for m in late for x in getattr(m, key)], 99)
        judged = len(soak.minutes) >= 10
        flat_rows.append(
            Row(
                "soak",
                f"{what} p99, last 5 minutes",
                l99,
                "s",
                e99,
                "minutes 2-6 of the same run",
                target=f"<= {FLAT:.1f}x" if judged else "",
                ok=(l99 <= FLAT * e99) if judged else None,
                note="" if judged else "windows overlap in a run under 10 minutes: not judged",
            )
        )
        print(f"{what} p99: last 5 minutes {l99 * 1000:.0f} ms, minutes 2-6 {e99 * 1000:.0f} ms ({l99 / e99:.2f}x)")
    return [
        *flat_rows,
        Row("soak", "freshness p99, last minute", percentile(last.fresh, 99), "s", base_f, label),
        Row("soak", "recall p99, last minute", percentile(last.recall, 99), "s", base_r, label),
        Row("soak", "stack RSS, last minute", last.rss_stack, "MiB", first.rss_stack, label),
        Row(
            "soak",
            "broker RSS, last minute",
            last.rss_broker,
            "MiB",
            mid.rss_broker,
            "the middle minute",
            target=f"< {1 + RSS_PLATEAU:.2f}x",
            ok=last.rss_broker < (1 + RSS_PLATEAU) * mid.rss_broker
            if len(soak.minutes) >= MIN_MINUTES_FOR_VERDICT
            else None,
        ),
        Row(
            "soak",
            "broker log on disk, last minute",
            last.disk_broker,
            "MiB",
            max(m.disk_broker for m in soak.minutes),
            "its peak in the run",
            note="retention deletes segments: bounded when the last is not the peak",
        ),
        Row(
            "soak",
            "stack RSS growth, last vs middle minute",
            growth * 100,
            "%",
            target=f"< {RSS_PLATEAU:.0%}",
            ok=growth < RSS_PLATEAU if len(soak.minutes) >= MIN_MINUTES_FOR_VERDICT else None,
            note="" if len(soak.minutes) >= MIN_MINUTES_FOR_VERDICT else "too short a run to judge (warm-up)",
        ),
        Row(
            "soak",
            "lost entries at the end",
            lost_ix + lost_gate + soak.send_errors,
            "",
            target="0",
            ok=(lost_ix + lost_gate + soak.send_errors == 0),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--minutes", type=int, default=10, help="measured minutes (default 10)")
    ap.add_argument("--quick", action="store_true", help="2 minutes")
    ap.add_argument(
        "--rate", type=float, default=1.0,
        help="scale of the load: 1.0 (default) is 400 entries/s (20 embeddable) and 20 recalls/s, 0.5 half of both",
    )  # fmt: skip
    ap.add_argument("--mix", choices=MIXES, default="short", help="journal summaries (default short)")
    ap.add_argument("--start-timeout", type=float, default=180.0)
    ap.add_argument("--log", type=Path, help="keep the stack's log here")
    ap.add_argument(
        "--retention-minutes", type=float, default=5.0,
        help="the journal topics' retention (EPISODIC_JOURNAL_RETENTION_HOURS), short so that it bites in the run "
        "(default 5; segments checked every 30 s)",
    )  # fmt: skip
    ap.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE",
        help="a setting for the stack (the shell's EPISODIC_* are not passed on), e.g. EPISODIC_EDGE_INDEX_AFTER=0",
    )  # fmt: skip
    args = ap.parse_args(argv)
    bad = [kv for kv in args.env if "=" not in kv or not kv.startswith("EPISODIC_")]
    if bad:
        ap.error(f"--env takes EPISODIC_KEY=VALUE, not {bad[0]!r}")
    args.env = {
        "EPISODIC_JOURNAL_RETENTION_HOURS": str(args.retention_minutes / 60),
        "EPISODIC_BROKER_RETENTION_CHECK_S": "30",
        **dict(kv.split("=", 1) for kv in args.env),
    }
    if args.quick:
        args.minutes = 2
    if args.minutes < 1:
        ap.error("--minutes must be at least 1")
    if not 0.05 <= args.rate <= 4:
        ap.error("--rate must be from 0.05 to 4")
    rows = asyncio.run(run(args))
    emit(
        rows,
        f"soak: {args.minutes} min at {400 * args.rate:g} entries/s (5 % embeddable, {args.mix} mix)"
        f" + {20 * args.rate:g} recalls/s",
    )
    lost = next(r for r in rows if r.metric == "lost entries at the end")
    return 0 if lost.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
