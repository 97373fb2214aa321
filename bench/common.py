"""Shared benchmark helpers: realistic journal text, records, percentiles, timing, cleanup, result rows.

Every benchmark is runnable on its own (`python -m bench.bench_embed [--quick]`) and prints its figure
next to a baseline measured in the same run. Nothing listens beyond 127.0.0.1; temporary directories
and child processes are removed on exit, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LOOPBACK = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
RESULTS_ENV = "EPISODIC_BENCH_RESULTS"  # run_all sets it: each bench appends its rows there as JSON lines


# -- result rows ------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the summary table: a measured figure next to its same-run baseline."""

    bench: str
    metric: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    target: str = ""
    ok: bool | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline  # type: ignore[operator]


def fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 10 else f"{v:.1f} s"
    if unit == "ms":
        return f"{v:.2f} ms"
    if abs(v) >= 100:
        return f"{v:,.0f}{(' ' + unit) if unit else ''}"
    return f"{v:.2f}{(' ' + unit) if unit else ''}"


def print_rows(rows: Sequence[Row], title: str = "") -> None:
    if title:
        print(f"\n== {title} ==")
    w = max([len(r.metric) for r in rows] + [6])
    print(f"{'metric':<{w}}  {'value':>12}  {'baseline':>12}  {'ratio':>6}  {'target':<16} ok   baseline is")
    for r in rows:
        ratio = r.ratio
        ok = "" if r.ok is None else ("yes" if r.ok else "NO")
        print(
            f"{r.metric:<{w}}  {fmt(r.value, r.unit):>12}  {fmt(r.baseline, r.unit):>12}  "
            f"{(f'{ratio:.2f}' if ratio is not None else '-'):>6}  {r.target:<16} {ok:<4} {r.baseline_label}"
        )
        if r.note:
            print(f"{'':<{w}}  note: {r.note}")


def emit(rows: Sequence[Row], title: str) -> None:
    """Print the rows and, under run_all, append them to its results file."""
    print_rows(rows, title)
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(asdict(r), default=str) + "\n")


# -- statistics -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def percentile_rows(
    bench: str, metric: str, values: Sequence[float], baseline: Sequence[float], baseline_label: str
) -> list[Row]:
    """p50 and p99 of `values` (seconds) in ms against the same percentile of `baseline`; `metric` names the
    percentile with "{p}"."""
    return [
        Row(
            bench,
            metric.format(p=p),
            percentile(values, p) * 1000,
            "ms",
            percentile(baseline, p) * 1000,
            baseline_label,
        )
        for p in (50, 99)
    ]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end


# -- realistic journal text -------------------------------------------------------------------------

SERVICES = [
    "checkout",
    "payments",
    "ledger",
    "billing-api",
    "search",
    "recommendations",
    "auth",
    "notifications",
    "inventory",
    "shipping",
    "fraud-scoring",
    "support-bot",
    "data-pipeline",
    "feature-store",
    "gateway",
]
TEAMS = ["platform", "payments", "growth", "sre", "ml-infra", "security", "support", "data"]
PEOPLE = ["Priya", "Marco", "Lena", "Tomás", "Aiko", "Femi", "Sven", "Noor", "Grace", "Ravi"]
TECH = [
    "Postgres 16",
    "Kafka",
    "Redis",
    "the Kubernetes HPA",
    "the CDN",
    "gRPC",
    "the feature flag service",
    "Terraform",
    "the canary controller",
    "the vector index",
    "S3 lifecycle rules",
    "the retry budget",
]
SYMPTOMS = [
    "was OOM-killed under load",
    "returned 502s for eleven minutes",
    "saw p99 latency climb to {n} ms",
    "dropped {n} events after a consumer rebalance",
    "exhausted its connection pool",
    "leaked file handles",
    "served stale prices from cache",
    "double-charged {n} customers",
    "timed out calling {tech}",
    "failed its readiness probe after the deploy",
    "lagged {n} seconds behind the primary",
]
ACTIONS = [
    "raised the memory limit from 512Mi to 1Gi",
    "rolled back to the previous release",
    "added a circuit breaker",
    "pinned the client library to the last good version",
    "moved the job to off-peak hours",
    "added an index on (tenant_id, created_at)",
    "enabled request hedging",
    "sharded the queue by workspace",
    "wrote a runbook entry and paged the owner",
    "increased the partition count to {n}",
    "disabled the flag for enterprise tenants",
    "backfilled the missing rows from the audit log",
]
OUTCOMES = [
    "error rate is back under 0.1%",
    "the follow-up ticket is OPS-{n}",
    "the customer was refunded",
    "we need a load test before Black Friday",
    "the owner agreed to add an alert",
    "no data was lost",
    "the eval score recovered from {p}% to {q}%",
    "the approval needs two reviewers next time",
]
OPENERS = [
    "Weekly summary:",
    "Escalation:",
    "Incident review:",
    "Decision:",
    "Eval regression:",
    "Note to self:",
    "Consolidated rule:",
    "Approval denied:",
    "Handoff:",
    "Postmortem excerpt:",
]


def _fill(rng: random.Random, s: str) -> str:
    return s.format(n=rng.randint(2, 9000), p=rng.randint(80, 99), q=rng.randint(60, 99), tech=rng.choice(TECH))


def sentence(rng: random.Random) -> str:
    svc, who = rng.choice(SERVICES), rng.choice(PEOPLE)
    kind = rng.random()
    if kind < 0.45:
        return _fill(rng, f"The {svc} service {rng.choice(SYMPTOMS)}; {who} {rng.choice(ACTIONS)}.")
    if kind < 0.75:
        return _fill(rng, f"{who} from {rng.choice(TEAMS)} {rng.choice(ACTIONS)} on {svc}, and {rng.choice(OUTCOMES)}.")
    return _fill(rng, f"For {svc}, {rng.choice(OUTCOMES)}; {rng.choice(TECH)} is the suspect.")


MIXES = ("mixed", "short")


def journal_summary(rng: random.Random, mix: str = "mixed") -> str:
    """A realistic journal summary.

    mixed: 70 % one to three sentences, 26 % paragraphs of five to ten, 4 % long reports (>256 pieces).
    short: the typical entry alone, one to three sentences (escalations, decisions, denials).
    """
    if mix == "short":
        return f"{rng.choice(OPENERS)} " + " ".join(sentence(rng) for _ in range(rng.randint(1, 3)))
    r = rng.random()
    n = rng.randint(1, 3) if r < 0.70 else rng.randint(5, 10) if r < 0.96 else rng.randint(30, 70)
    return f"{rng.choice(OPENERS)} " + " ".join(sentence(rng) for _ in range(n))


def journal_summaries(n: int, seed: int = 7, mix: str = "mixed") -> list[str]:
    rng = random.Random(seed)
    return [journal_summary(rng, mix) for _ in range(n)]


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def journal_entry(
    *,
    entry_id: str,
    workspace_id: str,
    agent_id: str,
    summary: str,
    entry_type: str = "summary.generated",
    severity: str = "info",
    crew_id: str | None = "crew-1",
    run_id: str | None = None,
    ts: datetime | None = None,
) -> dict[str, Any]:
    return {
        "id": entry_id,
        "workspace_id": workspace_id,
        "crew_id": crew_id,
        "agent_id": agent_id,
        "run_id": run_id,
        "ts": iso(ts or datetime.now(UTC)),
        "entry_type": entry_type,
        "severity": severity,
        "summary": summary,
        "payload": {"bench": True},
    }


def exec_noise(entry_id: str, workspace_id: str, summary: str) -> dict[str, Any]:
    """A high-volume entry the gate filters out (exec.output_chunk at debug)."""
    return journal_entry(
        entry_id=entry_id,
        workspace_id=workspace_id,
        agent_id="executor",
        entry_type="exec.output_chunk",
        severity="debug",
        summary=summary,
    )


def embeddable_record(entry: dict[str, Any], base_importance: float = 0.7) -> dict[str, Any]:
    """A `journal.embeddable` record as the gate would forward it."""
    return {**entry, "base_importance": base_importance, "accepted_at": iso(datetime.now(UTC))}


def uid() -> str:
    return uuid.uuid4().hex[:10]


# -- resources --------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmp_dir(prefix: str = "episodic-bench-") -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def started_broker(engine: str = "kafka") -> Iterator[Any]:
    """A started broker (`engine`: "kafka", the embedded default, or "tansu", the fallback) on a free loopback
    port, its log in a scratch directory; yields it (`.bootstrap`, `.pid`)."""
    from infra.broker import free_port, open_broker

    with tmp_dir() as d:
        b, _ = open_broker(engine=engine, data_dir=d, host=LOOPBACK, port=free_port(LOOPBACK))  # type: ignore[arg-type]
        b.start()
        try:
            yield b
        finally:
            b.stop()


@contextlib.contextmanager
def embedded_broker(engine: str = "kafka") -> Iterator[str]:
    """`started_broker`'s bootstrap."""
    with started_broker(engine) as b:
        yield b.bootstrap


def load_embedder(batch_size: int = 64) -> Any:
    from episodic.embedding.embedder import load_model
    from episodic.kernel.settings import Settings

    return load_model("all-MiniLM-L6-v2", Settings(batch_size=batch_size))


def record_generation(store: Any, embedder: Any) -> None:
    """Record the embedding generation of a store that a benchmark seeds directly, as the stack's own
    indexer would have: before the first vector, the embedder's model and pieces are the active generation
    (episodic.embedding.generations.adopt). Without the document, a stack started on the seeded store takes
    its vectors for the windows every store was cut into before generations (`chunking.LEGACY`) and
    re-embeds the whole store in the background while the benchmark measures it."""
    from episodic.embedding.generations import adopt
    from episodic.store.state import QdrantStateStore

    if store.count(has_dense=True):
        raise RuntimeError("record_generation: call it before seeding the first vector")
    adopt(store, QdrantStateStore.beside(store), embedder)


def pending_generation(store: Any) -> dict[str, Any] | None:
    """The re-embed a stack started on this store (None: none), from its generations document."""
    from episodic.embedding.generations import read
    from episodic.store.state import QdrantStateStore

    doc = read(QdrantStateStore.beside(store)) or {}
    return doc.get("pending")


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib(pid: int) -> float:
    """Resident memory of one process (MiB), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) one process has used so far, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def children(pid: int) -> list[int]:
    """The direct children of a process (every thread's), from /proc."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    return out


@contextlib.contextmanager
def child_process(cmd: list[str], *, env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped with SIGTERM (then SIGKILL) on exit; its output goes to
    `log_path`. The child does not get the terminal's signals (its own session), so a SIGTERM to the
    benchmark becomes SystemExit here while a child runs: the exit path stops the child instead of leaving
    a stack running."""
    fh = log_path.open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    term = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if term:
        signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        yield proc
    finally:
        if term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        fh.close()


def stack_env(data_dir: Path, *, broker_port: int, http_port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")}
    env.update(
        {
            "EPISODIC_DATA_DIR": str(data_dir),
            "EPISODIC_BROKER_PORT": str(broker_port),
            "EPISODIC_BROKER_HOST": LOOPBACK,
            "EPISODIC_HTTP_HOST": LOOPBACK,
            "EPISODIC_HTTP_PORT": str(http_port),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    env.update(extra)
    return env


def episodic_up_cmd() -> list[str]:
    return [sys.executable, "-m", "stack.cli", "up", "--log-level", "INFO"]


def wait_http(
    url: str, *, timeout: float, proc: subprocess.Popen[bytes] | None = None, log_path: Path | None = None
) -> dict[str, Any]:
    """Poll `url` (GET, JSON) until it answers 200; raise with the child's log tail if it dies or times out."""
    import httpx

    d = Deadline(timeout)
    last = ""
    while not d.passed():
        if proc is not None and proc.poll() is not None:
            break
        try:
            r = httpx.get(url, timeout=2.0)
            if r.status_code == 200:
                return dict(r.json())
            last = f"HTTP {r.status_code}"
        except (httpx.HTTPError, ValueError) as e:
            last = str(e)
        time.sleep(0.2)
    if proc is not None and proc.poll() is not None:
        last = f"the process exited with {proc.returncode}"
    tail = log_path.read_text(errors="replace")[-3000:] if log_path and log_path.exists() else ""
    raise RuntimeError(f"{url} did not come up within {timeout}s ({last})\n--- log tail ---\n{tail}")


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
