"""What the embedded broker costs (issue 44, item 1): `episodic up` on Apache Kafka against the same on Tansu (the
fallback, the embedded broker of the last release), interleaved in one run.

Each round starts `episodic up` on a fresh data directory with each engine in turn (EPISODIC_BROKER=kafka, then
tansu; the real model unless `--model none`) and measures:

- start: from the command to `/healthz` answering ok (the broker started, the topics made, every role up);
- the broker's own part of it: from the command to the broker's "listening" log line;
- RSS of the broker's process and of the stack's process once ready, then after `--entries` journal entries
  (short summaries, a fifth embeddable) went through and were indexed;
- the broker's CPU seconds to start, and the data directory's disk use at the end (`du`: Kafka's log,
  Qdrant Edge; Tansu keeps its records in memory, so only the store is on disk).

    python -m bench.bench_up                    # 3 rounds, 20k entries, the real model
    python -m bench.bench_up --rounds 1 --entries 5000 --model none
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from bench.common import (
    LOOPBACK,
    Row,
    child_process,
    children,
    cpu_seconds,
    emit,
    episodic_up_cmd,
    journal_entry,
    journal_summary,
    rss_mib,
    stack_env,
    tmp_dir,
    wait_http,
)

LISTENING = re.compile(r"embedded broker.*listening on")


@dataclass
class Sample:
    engine: str
    ready_s: float
    broker_s: float
    broker_cpu_s: float
    broker_rss: float
    stack_rss: float
    broker_rss_after: float
    stack_rss_after: float
    disk_mib: float


async def produce(bootstrap: str, n: int, engine: str) -> None:
    from episodic.bus.kafka import make_producer

    rng = random.Random(3)
    producer = make_producer(bootstrap, linger_ms=10, enable_idempotence=engine == "kafka")
    await producer.start()
    try:
        futs = []
        for i in range(n):
            kind = "summary.generated" if i % 5 == 0 else "exec.output_chunk"
            e = journal_entry(
                entry_id=f"u{i:07d}", workspace_id=f"ws-{i % 10}", agent_id="a", summary=journal_summary(rng)
            )
            e["entry_type"] = kind
            futs.append(
                await producer.send("journal.entries", key=e["workspace_id"].encode(), value=json.dumps(e).encode())
            )
            if len(futs) >= 2000:
                await asyncio.gather(*futs)
                futs = []
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


def broker_pid(stack_pid: int) -> int:
    """The broker: the stack's child that is a JVM or Tansu."""
    for pid in children(stack_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"kafka.Kafka" in cmd or b"tansu" in cmd.lower() or b"calfkit" in cmd.lower():
            return pid
    raise RuntimeError(f"no broker child of {stack_pid}")


def indexed(url: str) -> int:
    import httpx

    total = 0
    for i in range(10):
        r = httpx.get(f"{url}/v1/memory/stats", params={"workspace_id": f"ws-{i}"}, timeout=10)
        total += int(r.json()["indexed"])
    return total


def one(engine: str, args: argparse.Namespace, tmp: Path) -> Sample:
    from infra.broker import free_port

    data = tmp / f"data-{engine}-{time.monotonic_ns()}"
    broker_port, http_port = free_port(LOOPBACK), free_port(LOOPBACK)
    env = stack_env(data, broker_port=broker_port, http_port=http_port, EPISODIC_BROKER=engine,
                    EPISODIC_EMBED_MODEL=args.model, EPISODIC_LINKER_ENABLED="false")  # fmt: skip
    log = tmp / f"up-{engine}.log"
    url = f"http://{LOOPBACK}:{http_port}"
    t0 = time.monotonic()
    with child_process(episodic_up_cmd(), env=env, log_path=log) as proc:
        broker_s = 0.0
        while not broker_s:
            if LISTENING.search(log.read_text(errors="replace")):
                broker_s = time.monotonic() - t0
            elif proc.poll() is not None or time.monotonic() - t0 > 300:
                raise RuntimeError(log.read_text()[-3000:])
            time.sleep(0.02)
        wait_http(f"{url}/healthz", timeout=300, proc=proc, log_path=log)
        ready_s = time.monotonic() - t0
        bpid = broker_pid(proc.pid)
        sample = Sample(engine, ready_s, broker_s, cpu_seconds(bpid), rss_mib(bpid), rss_mib(proc.pid), 0, 0, 0)
        asyncio.run(produce(f"{LOOPBACK}:{broker_port}", args.entries, engine))
        want = args.entries // 5
        deadline = time.monotonic() + 900
        while indexed(url) < want and time.monotonic() < deadline:
            time.sleep(1.0)
        sample.broker_rss_after, sample.stack_rss_after = rss_mib(bpid), rss_mib(proc.pid)
    du = subprocess.run(["du", "-sm", str(data)], capture_output=True, text=True)
    sample.disk_mib = float(du.stdout.split()[0]) if du.returncode == 0 else 0.0
    return sample


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    args = ap.parse_args(argv)
    samples: dict[str, list[Sample]] = {"kafka": [], "tansu": []}
    with tmp_dir() as tmp:
        for _ in range(args.rounds):
            for engine in ("kafka", "tansu"):
                s = one(engine, args, tmp)
                print(f"  {s}", flush=True)
                samples[engine].append(s)

    def m(engine: str, attr: str) -> float:
        return median(getattr(s, attr) for s in samples[engine])

    rows = [
        Row("up", f"{label}, Kafka", m("kafka", attr), unit, m("tansu", attr), "Tansu, same run",
            note=f"median of {args.rounds}; model {args.model}")
        for label, attr, unit in (
            ("episodic up to /healthz ok", "ready_s", "s"),
            ("the broker listening", "broker_s", "s"),
            ("the broker's CPU to start", "broker_cpu_s", "s"),
            ("the broker's RSS, ready", "broker_rss", "MiB"),
            ("the stack's RSS, ready", "stack_rss", "MiB"),
            (f"the broker's RSS after {args.entries:,} entries", "broker_rss_after", "MiB"),
            (f"the stack's RSS after {args.entries:,} entries", "stack_rss_after", "MiB"),
            ("the data directory on disk", "disk_mib", "MiB"),
        )
    ]  # fmt: skip
    emit(rows, "what the embedded broker costs: Apache Kafka against Tansu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
