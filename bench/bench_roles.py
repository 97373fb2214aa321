"""Distributed roles under load (issue 27, item 4): gate and embedder processes in consumer groups on a
broker with several partitions, each configuration against one gate and one embedder in the same run.

Each configuration `G:K` gets a fresh embedded Tansu broker (the Kafka-compatible broker of `episodic up`,
memory storage) with `--partitions` partitions per topic, `G` `episodic run gate` and `K` `episodic run
embedder` processes (`python -m stack.cli run ROLE`, the real model, one consumer group per role), a
warm-up (every embedder has embedded at least one entry: the group is balanced and the model loaded), then
a backlog of `--entries` short summaries produced at once to `journal.entries` over 12 workspaces (keys
spread over the partitions). Timed: from the first produced entry until every one has its dense vector in a
store, summed over the embedders: `memory.indexed` events of mode "vector" plus the vectors densified after a
sparse-first write (under a backlog the embedder writes BM25 first and adds the vectors behind it).

What it cannot show: several embedders writing one store. Qdrant Edge (and qdrant-client's local mode) is
one process per directory and no Qdrant server exists here, so each embedder writes an Edge store of its
own (its `EPISODIC_DATA_DIR`), as each would write its share of a server collection; recall over those
stores is not served (docs/distributed.md). And on a 2-core machine, K embedders share the same two cores:
the figure is the machine's, not K machines'. The model threads of each embedder are fixed at
max(1, cores // K) (`EPISODIC_EMBED_THREADS`) so that K processes do not oversubscribe the cores.

    python -m bench.bench_roles                                 # 1:1, 1:2, 2:2 on 4 partitions, 1,200 entries
    python -m bench.bench_roles --entries 2000 --config 1:1 --config 2:2 --config 2:3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    LOOPBACK,
    Deadline,
    Row,
    embedded_broker,
    emit,
    journal_entry,
    journal_summary,
    rss_mib,
    tmp_dir,
)

WORKSPACES = [f"roles-ws-{i}" for i in range(12)]
READY_TIMEOUT_S = 300.0
DRAIN_TIMEOUT_S = 900.0
INDEXED = "episodic_indexed_total"
DENSIFIED = "episodic_densified_total"


def short_summary(rng: random.Random) -> str:
    for _ in range(20):
        s = journal_summary(rng)
        if len(s) < 400:
            return s
    return s[:400]


class Role:
    """One `episodic run ROLE` process with its own data directory and ops port."""

    def __init__(self, role: str, bootstrap: str, data_dir: Path, log: Path, env: dict[str, str]) -> None:
        from infra.broker import free_port

        self.role, self.port, self.data_dir = role, free_port(LOOPBACK), data_dir
        full = {k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")}
        full.update(
            {
                "EPISODIC_KAFKA_BOOTSTRAP": bootstrap,
                "EPISODIC_DATA_DIR": str(data_dir),
                "EPISODIC_HTTP_HOST": LOOPBACK,
                "EPISODIC_HTTP_PORT": str(self.port),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                **env,
            }
        )
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stack.cli", "run", role],
            env=full,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def healthy(self) -> bool:
        import httpx

        try:
            return httpx.get(f"http://{LOOPBACK}:{self.port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples (those with `labels`); -1 while the process does not answer."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        try:
            text = httpx.get(f"http://{LOOPBACK}:{self.port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return -1.0
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def dense(self) -> float:
        """Memories whose dense vector is written: inline (`memory.indexed` mode "vector") or added after a
        sparse-first write (densified); -1 while the process does not answer."""
        inline, later = self.metric(INDEXED, mode="vector"), self.metric(DENSIFIED)
        return -1.0 if min(inline, later) < 0 else inline + later

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@dataclass
class Result:
    gates: int
    embedders: int
    entries: int
    seconds: float
    per_embedder: list[int]
    load: tuple[float, float]  # load average (1 min) before and after the timed backlog
    rss_mib: float  # the embedders' RSS summed, after the backlog

    @property
    def rate(self) -> float:
        return self.entries / self.seconds if self.seconds > 0 else 0.0


async def produce(bootstrap: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    from episodic.bus.kafka import make_producer
    from schemas import topics

    producer = make_producer(bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = [
            await producer.send(topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(e).encode())
            for ws, e in entries
        ]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


def make_entries(prefix: str, n: int, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i in range(n):
        ws = WORKSPACES[i % len(WORKSPACES)]
        out.append(
            (
                ws,
                journal_entry(
                    entry_id=f"{prefix}{i:06d}", workspace_id=ws, agent_id="agent", summary=short_summary(rng)
                ),
            )
        )
    return out


def total(procs: list[Role]) -> float:
    values = [p.dense() for p in procs]
    return -1.0 if min(values) < 0 else sum(values)


def run_config(gates: int, embedders: int, args: argparse.Namespace, tmp: Path) -> Result:
    rng = random.Random(7)
    threads = max(1, (os.cpu_count() or 2) // embedders)
    env = {
        "EPISODIC_TOPIC_PARTITIONS": str(args.partitions),
        "EPISODIC_EMBED_THREADS": str(threads),
        "EPISODIC_SESSION_TIMEOUT_MS": "10000",
    }
    name = f"{gates}g{embedders}e"
    log = tmp / f"{name}.log"
    procs: list[Role] = []
    with embedded_broker() as bootstrap:
        try:
            procs += [Role("gate", bootstrap, tmp / f"{name}-gate{i}", log, env) for i in range(gates)]
            embs = [Role("embedder", bootstrap, tmp / f"{name}-emb{i}", log, env) for i in range(embedders)]
            procs += embs
            d = Deadline(READY_TIMEOUT_S)
            while not all(p.healthy() for p in procs):
                if d.passed() or any(p.proc.poll() is not None for p in procs):
                    raise RuntimeError(f"{name}: the roles did not start:\n{log.read_text()[-3000:]}")
                time.sleep(1.0)
            # warm-up: every embedder holds partitions and has its model loaded
            warm = make_entries("warm", 12 * args.partitions, rng)
            asyncio.run(produce(bootstrap, warm))
            while not all(p.dense() >= 1 for p in embs):
                if d.passed():
                    counts = [p.dense() for p in embs]
                    raise RuntimeError(f"{name}: not every embedder got work in the warm-up ({counts})")
                asyncio.run(produce(bootstrap, make_entries(f"warm{int(time.time() * 1000)}-", 12, rng)))
                time.sleep(2.0)
            settled = Deadline(60)
            before = total(embs)
            while not settled.passed():  # the warm-up drained: nothing else in flight
                time.sleep(2.0)
                now = total(embs)
                if now == before:
                    break
                before = now
            backlog = make_entries("e", args.entries, rng)
            load0 = os.getloadavg()[0]
            t0 = time.perf_counter()
            asyncio.run(produce(bootstrap, backlog))
            done = Deadline(DRAIN_TIMEOUT_S)
            last, last_t = before, t0
            while last < before + args.entries:
                if done.passed():
                    raise RuntimeError(f"{name}: {last - before:.0f} of {args.entries} indexed in {DRAIN_TIMEOUT_S}s")
                time.sleep(0.2)
                now = total(embs)
                if now > last:
                    last, last_t = now, time.perf_counter()
            seconds = last_t - t0
            per = [int(p.dense()) for p in embs]
            rss = sum(rss_mib(p.proc.pid) for p in embs)
            return Result(gates, embedders, args.entries, seconds, per, (load0, os.getloadavg()[0]), rss)
        finally:
            for p in procs:
                p.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--entries", type=int, default=1200, help="the timed backlog (short summaries, all embeddable)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--config", action="append", default=None, help="GATES:EMBEDDERS, repeatable (default 1:1 1:2 2:2)")
    args = ap.parse_args(argv)
    configs = [tuple(int(x) for x in c.split(":")) for c in (args.config or ["1:1", "1:2", "2:2"])]
    results: list[Result] = []
    with tmp_dir() as tmp:
        for g, k in configs:
            r = run_config(g, k, args, tmp)
            print(
                f"  {g} gate(s), {k} embedder(s), {args.partitions} partitions: {r.entries} entries in "
                f"{r.seconds:.1f}s = {r.rate:.1f}/s; per embedder {r.per_embedder}; load average "
                f"{r.load[0]:.1f} -> {r.load[1]:.1f}; embedders' RSS {r.rss_mib:.0f} MiB",
                flush=True,
            )
            results.append(r)
    base = next((r for r in results if r.gates == 1 and r.embedders == 1), None)
    rows = [
        Row(
            "roles",
            f"{r.gates} gate(s), {r.embedders} embedder(s) on {args.partitions} partitions: entries/s",
            r.rate,
            "/s",
            base.rate if base is not None and r is not base else None,
            "1 gate, 1 embedder, same run" if base is not None and r is not base else "",
            note=f"per embedder {r.per_embedder}; load average {r.load[0]:.1f} -> {r.load[1]:.1f}; "
            f"{os.cpu_count()} cores",
        )
        for r in results
    ]
    emit(rows, f"distributed roles: {args.entries} short summaries through gate and embedder processes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
