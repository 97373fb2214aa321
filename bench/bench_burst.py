"""A burst of journal summaries through the whole embedded stack, produce -> dense vector, ÷ bare torch
`model.encode` of the same texts in the same run.

`episodic up` runs as child processes on free loopback ports, each with its own temporary data
directory, broker and model: one per ingestion backend (`EPISODIC_EMBED_BACKEND=onnx`, the default, and
`torch`, the fallback), both started before the first round and idle while the other is measured. A round:

  encode   this process: `SentenceTransformer.encode(texts, batch_size=B, normalize_embeddings=True)`
           over the N texts (torch's default threads: every core), the stacks idle;
  <stack>  N `summary.generated` entries produced as fast as the producer takes them to journal.entries
           (fresh workspaces each round, so nothing is a duplicate); timed from the first send to the
           `memory.indexed` event that says the last entry's dense vector is in (mode "vector": inline,
           or the densify loop's second event after a sparse-first write). Also reported: when the last
           entry was searchable at all (its first event, "sparse-only" or "vector").

Rounds are interleaved (encode, onnx stack, encode, torch stack, ...) and each stack's throughput is
compared with the median encode of the run. Target (issue #11): the default stack >= 1.0x encode.

    python -m bench.bench_burst            # N=2000 short summaries, 3 rounds
    python -m bench.bench_burst --quick    # N=300, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench_embed import run_baseline
from bench.bench_freshness import consume_until
from bench.common import (
    LOOPBACK,
    MIXES,
    Deadline,
    Row,
    child_process,
    emit,
    episodic_up_cmd,
    journal_entry,
    journal_summaries,
    load_embedder,
    median,
    stack_env,
    tmp_dir,
    uid,
    wait_http,
)

TARGET = 1.0
BACKENDS = ("onnx", "torch")


class Stack:
    """One running `episodic up` and a consumer of its memory.indexed events."""

    def __init__(self, name: str, bootstrap: str, base: str) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.base = base
        self.indexed: dict[str, float] = {}  # entry id -> first memory.indexed (searchable)
        self.vector: dict[str, float] = {}  # entry id -> the event saying its dense vector is in
        self.stop = asyncio.Event()
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def on_indexed(self, rec: Any, now: float) -> None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            ev = json.loads(rec.value)
            self.indexed.setdefault(ev["entry_id"], now)
            if ev.get("mode") == "vector":
                self.vector.setdefault(ev["entry_id"], now)

    async def start_consumer(self) -> None:
        from schemas import topics

        self.task = asyncio.create_task(
            consume_until(
                self.bootstrap,
                topics.MEMORY_INDEXED,
                self.on_indexed,
                self.stop,
                group=f"bench-burst-{uid()}",
                ready=self.ready,
            )
        )
        await asyncio.wait_for(self.ready.wait(), 60)

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


@contextlib.contextmanager
def started_stack(
    name: str, tmp: Path, timeout: float, extra: dict[str, str] | None = None
) -> Iterator[tuple[Stack, Any, Path]]:
    """`name`: a backend, or "onnx EPISODIC_KEY=VALUE" (a variant of the default, `--compare`)."""
    from infra.broker import free_port

    broker_port, http_port = free_port(LOOPBACK), free_port(LOOPBACK)
    backend, _, variant = name.partition(" ")
    label = name.replace(" ", "-").replace("=", "-")
    log_path = tmp / f"stack-{label}.log"
    extra = {**(extra or {}), **dict([variant.split("=", 1)] if variant else [])}
    env = stack_env(
        tmp / f"data-{label}", broker_port=broker_port, http_port=http_port, **extra, EPISODIC_EMBED_BACKEND=backend
    )
    with child_process(episodic_up_cmd(), env=env, log_path=log_path) as proc:
        base = f"http://{LOOPBACK}:{http_port}"
        wait_http(f"{base}/healthz", timeout=timeout, proc=proc, log_path=log_path)
        yield Stack(name, f"{LOOPBACK}:{broker_port}", base), proc, log_path


def burst_entries(texts: list[str], prefix: str, round_no: int, run_length: int) -> list[dict[str, Any]]:
    """The burst's entries: with `run_length`, consecutive blocks of that many are one agent run (one
    workspace, one agent, one run_id: what run context reads); 0: no run ids, entries spread round robin."""
    ids = [f"{prefix}-{i:05d}" for i in range(len(texts))]
    if run_length <= 0:
        return [
            journal_entry(entry_id=eid, workspace_id=f"burst-{round_no}-{i % 10}", agent_id=f"agent-{i % 3}", summary=t)
            for i, (eid, t) in enumerate(zip(ids, texts, strict=True))
        ]
    return [
        journal_entry(
            entry_id=eid,
            workspace_id=f"burst-{round_no}-{(i // run_length) % 10}",
            agent_id=f"agent-{(i // run_length) % 3}",
            run_id=f"{prefix}-run-{i // run_length}",
            summary=t,
        )
        for i, (eid, t) in enumerate(zip(ids, texts, strict=True))
    ]


async def burst(
    stack: Stack, texts: list[str], round_no: int, timeout: float, run_length: int = 40
) -> tuple[float, float]:
    """(seconds to the last dense vector, seconds to the last entry searchable) for one burst."""
    from episodic.bus.kafka import make_producer
    from schemas import topics

    entries = burst_entries(texts, f"r{round_no}-{stack.name}", round_no, run_length)
    ids = [e["id"] for e in entries]
    payloads = [(e["workspace_id"].encode(), json.dumps(e).encode()) for e in entries]
    producer = make_producer(stack.bootstrap, linger_ms=5)
    await producer.start()
    try:
        t0 = time.time()
        futs = [await producer.send(topics.JOURNAL_ENTRIES, key=k, value=v) for k, v in payloads]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    d = Deadline(timeout)
    want = set(ids)
    while not want.issubset(stack.vector.keys()):
        if d.passed():
            missing = len(want - stack.vector.keys())
            raise TimeoutError(f"{stack.name}: {missing}/{len(ids)} entries without a dense vector after {timeout}s")
        await asyncio.sleep(0.05)
    last_vector = max(stack.vector[i] for i in ids)
    last_indexed = max(stack.indexed[i] for i in ids)
    return last_vector - t0, last_indexed - t0


def linker_handled(base: str) -> float:
    """The stack's `vector` events the linker has acted on so far (every outcome but `ignored`: the
    `sparse-only` events of memories written BM25-first are passed over at once), from its /metrics."""
    import httpx

    text = httpx.get(f"{base}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith('episodic_agent_events_total{agent="linker"') and 'outcome="ignored"' not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def linker_done(stack: Stack, before: float, n: int, timeout: float) -> float | None:
    """Wait until the linker has handled `n` more events than `before` (its edges may lag the vectors: it
    yields to bulk embedding), so that the next measurement does not share the cores with it; the seconds
    waited, None if it did not finish within `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await asyncio.to_thread(linker_handled, stack.base) - before >= n:
            return time.monotonic() - t0
        await asyncio.sleep(0.2)
    return None


async def warm(stack: Stack, timeout: float) -> None:
    """One small burst: the gate and the consumer have joined, the model has run once."""
    await burst(stack, journal_summaries(20, seed=3, mix="short"), -1, timeout)


async def main_async(args: argparse.Namespace) -> list[Row]:
    n, rounds, batch = args.n, args.rounds, args.batch
    texts = journal_summaries(n, seed=11, mix=args.mix)
    names = [*args.backends, *(f"onnx {kv}" for kv in args.compare)]
    embedder = load_embedder(batch)
    embedder.model.encode(texts[:batch], batch_size=batch, show_progress_bar=False)  # warm-up
    print(
        f"bench_burst: N={n} {args.mix} summaries (mean {sum(map(len, texts)) / n:.0f} chars), "
        f"{rounds} rounds, stacks: {'; '.join(names)}"
    )
    enc: list[float] = []
    took: dict[str, list[float]] = {b: [] for b in names}
    seen: dict[str, list[float]] = {b: [] for b in names}
    with tmp_dir() as tmp, contextlib.ExitStack() as ctx:
        stacks: dict[str, Stack] = {}
        for b in names:
            stack, _proc, _log = ctx.enter_context(started_stack(b, tmp, args.start_timeout, args.env))
            stacks[b] = stack
            await stack.start_consumer()
        try:
            for s in stacks.values():
                await warm(s, args.start_timeout)
            for r in range(rounds):
                line = []
                for b, s in stacks.items():
                    enc.append(await asyncio.to_thread(run_baseline, embedder, texts, batch))
                    line.append(f"encode {n / enc[-1]:.1f}/s")
                    before = await asyncio.to_thread(linker_handled, s.base)
                    v, i = await burst(s, texts, r, args.timeout, args.run_length)
                    linker_on = args.env.get("EPISODIC_LINKER_ENABLED", "true").lower() not in ("false", "0")
                    lag = await linker_done(s, before, n, args.timeout) if linker_on else 0.0
                    took[b].append(v)
                    seen[b].append(i)
                    edges = "not done" if lag is None else f"{lag:.1f}s after the last vector"
                    line.append(f"{b} {n / v:.1f}/s (searchable {n / i:.1f}/s; linker {edges})")
                print(f"  round {r + 1}: " + "  ".join(line), flush=True)
        finally:
            for s in stacks.values():
                await s.close()
    base = n / median(enc)
    rows = []
    for b in names:
        rate = n / median(took[b])
        rows.append(
            Row(
                "burst",
                f"produce -> dense vector, EPISODIC_EMBED_BACKEND={b.replace(' ', ', ')} (entries/s)",
                rate,
                "",
                baseline=base,
                baseline_label=f"model.encode(texts, batch_size={batch}), torch",
                target=f"ratio >= {TARGET}" if b == "onnx" else "",
                ok=rate / base >= TARGET if b == "onnx" else None,
                note=f"N={n} {args.mix}, median of {rounds}; every round: "
                + ", ".join(f"{n / t:.1f}" for t in took[b])
                + f"/s; encode rounds: {', '.join(f'{n / t:.1f}' for t in enc)}/s; searchable (BM25 first) "
                f"median {n / median(seen[b]):.1f}/s",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="small sizes (a sanity check, not a figure)")
    ap.add_argument("--n", type=int, default=None, help="entries per burst (default 2000, quick 300)")
    ap.add_argument("--mix", choices=MIXES, default="short", help="summary lengths (default short: typical)")
    ap.add_argument("--batch", type=int, default=32, help="batch size of the bare encode (default 32)")
    ap.add_argument(
        "--run-length", type=int, default=40, help="entries per agent run (run context reads them; 0: no run ids)"
    )
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3, quick 1)")
    ap.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    ap.add_argument("--timeout", type=float, default=600.0, help="per burst, seconds")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE",
        help="a setting for the stacks (the shell's EPISODIC_* are not passed on): EPISODIC_LINKER_ENABLED=false",
    )  # fmt: skip
    ap.add_argument(
        "--compare", action="append", default=[], metavar="KEY=VALUE",
        help="one more ONNX stack with this setting, its rounds interleaved with the others: EPISODIC_EMBED_STREAMS=1",
    )  # fmt: skip
    args = ap.parse_args(argv)
    args.n = args.n or (300 if args.quick else 2000)
    bad = [kv for kv in [*args.env, *args.compare] if "=" not in kv or not kv.startswith("EPISODIC_")]
    if bad:
        ap.error(f"--env takes EPISODIC_KEY=VALUE, not {bad[0]!r}")
    args.env = dict(kv.split("=", 1) for kv in args.env)
    args.rounds = args.rounds or (1 if args.quick else 3)
    logging.basicConfig(level=logging.WARNING)
    rows = asyncio.run(main_async(args))
    emit(rows, f"burst: {args.n} summaries through the embedded stack, produce -> dense vector")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
