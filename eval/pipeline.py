"""`make eval`: the dev sets through a real `episodic up` stack and the recall API, by question category.

    python -m eval.pipeline [--set oracle,s,locomo] [--limit N] [--clients 4] [--url URL --bootstrap HOST:PORT]

Every turn becomes a journal entry (``summary.generated``, severity info, ``summary`` = the turn's text,
``run_id`` = its session, ``ts`` = the session's date plus j seconds for the session's j-th turn), one
workspace per corpus (``Corpus.workspace``), one agent, produced to ``journal.entries`` of a stack (started
here on free ports under eval/results unless ``--url``/``--bootstrap`` name a running one), so every entry
goes through the gate and the embedding consumer. Once ``/v1/memory/stats`` shows every memory with its
dense vector, each question with evidence is one ``POST /v1/recall`` (scope own, that agent, k 10, the
question as the query) from ``--clients`` (4) concurrent clients, in each mode: dense and sparse (each leg
alone) and hybrid (the default). Restarted columns (``RESTARTS``) are the same store served with other
settings (the stack restarted on the same data directory; nothing re-ingested).

R@k of a question = |evidence ∩ the turns of the top k hits| / |evidence|, a hit standing for its own turn,
its exact-duplicate aliases and the turns folded into it (``covered``); the figure is the mean over the
questions. The report has one table per set: its dev part (choices are made there), its holdout part (the
final check: ``eval.data.holdout_of``) and all questions, each whole and by question type (LongMemEval) or
category (LoCoMo), with the 95 % bootstrap interval of each part's R@5 (``eval.noise``). Every answer is
written to eval/results/<name>-<ts>.json, which ``python -m eval.compare`` reads (the choice protocol).

``eval.longmemeval`` and ``eval.locomo`` are this harness with one set's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from episodic.domain.identity import normalise_summary
from eval.data import SETS, Corpus, Question, haystack_time, holdout_of, load, set_names
from eval.embcache import RESULTS
from eval.metrics import evidence_recall
from eval.noise import interval

MAX_SUMMARY = 16_384
MODES = ("dense", "sparse", "hybrid")
CLIENTS = 4  # concurrent recall clients (the protocol's)
# columns served by a restart of the same store with other settings: name -> environment
RESTARTS: dict[str, dict[str, str]] = {
    # issue 46, fourth pass: the default before the neighbour lift (a short memory lifted by its short neighbours)
    "no neighbour lift (main's default)": {"EPISODIC_RRF_NEIGHBOUR_WEIGHT": "0"},
    # issue 46: the default before the time legs, and the run-level re-rank (an option, off by default)
    "main-default (no time legs)": {"EPISODIC_RRF_TIME_WEIGHT": "0"},
    "shipped-again (the default once more: A-B-A, for latency drift)": {},
    "run-level 0.5 depth 3 (option)": {"EPISODIC_RRF_RUN_WEIGHT": "0.5", "EPISODIC_RRF_RUN_DEPTH": "3"},
    # the dense query as it was before the common words were left out of it
    "whole dense query (before)": {"EPISODIC_DENSE_QUERY_COMMON": "0"},
    "run-level-0.25 depth 1 (option)": {"EPISODIC_RRF_RUN_WEIGHT": "0.25", "EPISODIC_RRF_RUN_DEPTH": "1"},
    "rrf60 (seed)": {"EPISODIC_FUSION": "rrf_equal"},
    # the default before the lexical confidence: every BM25-based leg at its full weight for any query
    "no lexical confidence (previous default)": {"EPISODIC_RRF_LEXICAL_FULL": "0"},
    # the default before the piece prior: dense weight 1, the dense leg ranked by its raw max-sim
    "no piece prior (previous default)": {
        "EPISODIC_RRF_LEXICAL_FULL": "0",
        "EPISODIC_RRF_PIECE_PENALTY": "0",
        "EPISODIC_RRF_DENSE_WEIGHT": "1",
        "EPISODIC_RRF_HEAD": "5",
    },
    "four legs (default before context)": {
        "EPISODIC_RRF_LEXICAL_FULL": "0",
        "EPISODIC_RRF_CONTEXT_WEIGHT": "0",
        "EPISODIC_RRF_BOTH_CONTEXT": "false",
        "EPISODIC_RRF_PIECE_PENALTY": "0",
        "EPISODIC_RRF_DENSE_WEIGHT": "1",
        "EPISODIC_RRF_HEAD": "5",
    },
    "context leg alone": {
        "EPISODIC_RRF_DENSE_WEIGHT": "0",
        "EPISODIC_RRF_SPARSE_WEIGHT": "0",
        "EPISODIC_RRF_BOTH_WEIGHT": "0",
        "EPISODIC_RRF_HEAD_WEIGHT": "0",
    },
}
ROOT = Path(__file__).resolve().parents[1]


def entries(c: Corpus) -> Iterator[dict[str, Any]]:
    for t in c.turns:
        yield {
            "id": t.id,
            "workspace_id": c.workspace,
            "crew_id": None,
            "agent_id": c.agent_id,
            "run_id": t.session_id,
            "ts": t.ts,
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": t.text()[:MAX_SUMMARY],
            "payload": {"session_id": t.session_id, "turn": t.index, "role": t.role},
        }


def expected_points(c: Corpus) -> int:
    """Points the store will hold: exact duplicates (normalised summary) collapse into one memory."""
    return len({normalise_summary(t.text()[:MAX_SUMMARY]) for t in c.turns})


# ---- the stack ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """`episodic up` in a child process on free ports, with its own data directory; `root`: the source tree it
    runs (another checkout of the project, e.g. a `git worktree` of main for a same-run baseline)."""

    def __init__(
        self, data_dir: Path, env: dict[str, str] | None = None, log: Path | None = None, root: Path = ROOT
    ) -> None:
        self.data_dir = data_dir
        self.root = root
        self.broker_port = _free_port()
        self.http_port = _free_port()
        self.extra = env or {}
        self.log = log or data_dir / "stack.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self, timeout: float = 180.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "EPISODIC_DATA_DIR": str(self.data_dir),
            "EPISODIC_BROKER_PORT": str(self.broker_port),
            "EPISODIC_HTTP_PORT": str(self.http_port),
            "EPISODIC_HTTP_HOST": "127.0.0.1",
            **self.extra,
        }
        if self.root != ROOT:  # its own packages first (the venv's editable install points at this tree)
            env["PYTHONPATH"] = os.pathsep.join([str(self.root), *filter(None, [os.environ.get("PYTHONPATH")])])
        env.pop("EPISODIC_KAFKA_BOOTSTRAP", None)
        env.pop("EPISODIC_QDRANT_URL", None)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stack.cli", "up"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.root
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"episodic up exited with {self.proc.returncode}; see {self.log}")
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"{self.url}/healthz", timeout=2)
                if r.status_code == 200 and r.json().get("episodic") == "vector":
                    return
            time.sleep(1)
        raise TimeoutError(f"episodic up not healthy after {timeout:.0f}s; see {self.log}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- ingest, wait, query -----------------------------------------------------------------------------


def produce(corpora: list[Corpus], bootstrap: str) -> int:
    from episodic.bus.producer import produce_file

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for c in corpora:
            for e in entries(c):
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
        path = Path(f.name)
    try:
        return asyncio.run(produce_file(path, bootstrap=bootstrap, progress=False))
    finally:
        path.unlink(missing_ok=True)


def wait_indexed(client: httpx.Client, corpora: list[Corpus], timeout: float) -> dict[str, dict[str, int]]:
    """Poll /v1/memory/stats until every workspace holds its expected points, all with dense vectors."""
    want = {c.workspace: expected_points(c) for c in corpora}
    total = sum(want.values())
    deadline = time.monotonic() + timeout
    last_print = 0.0
    stats: dict[str, dict[str, int]] = {}
    pending = set(want)
    while pending and time.monotonic() < deadline:
        for ws in sorted(pending):
            r = client.get("/v1/memory/stats", params={"workspace_id": ws})
            r.raise_for_status()
            stats[ws] = r.json()
            if stats[ws]["dense"] >= want[ws]:
                pending.discard(ws)
        if time.monotonic() - last_print > 15 or not pending:
            done = sum(min(stats.get(w, {}).get("dense", 0), want[w]) for w in want)
            print(f"  indexed {done}/{total} memories ({len(want) - len(pending)}/{len(want)} workspaces)", flush=True)
            last_print = time.monotonic()
        if pending:
            time.sleep(2)
    if pending:
        raise TimeoutError(f"not indexed after {timeout:.0f}s: {sorted(pending)[:5]}")
    return stats


def covered(hit: Mapping[str, Any]) -> list[str]:
    """The turns one hit stands for: its own entry, its exact-duplicate aliases and the near duplicates folded
    into it."""
    return [str(hit["entry_id"]), *map(str, hit.get("aliases") or []), *map(str, hit.get("folded") or [])]


@dataclass(frozen=True, slots=True)
class Answer:
    """One question's answer in one column."""

    question: str
    set: str
    type: str
    part: str  # "dev" or "holdout"
    evidence: frozenset[str]
    ranked: tuple[tuple[str, ...], ...]  # per hit, the turns it stands for
    seconds: float  # POST /v1/recall as the client saw it
    started: float = 0.0  # when it was sent (time.monotonic), for a timeline of the run

    def recall(self, k: int) -> float:
        return evidence_recall(self.ranked, self.evidence, k)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.question,
            "set": self.set,
            "type": self.type,
            "part": self.part,
            "r5": self.recall(5),
            "r10": self.recall(10),
            "ms": round(1000 * self.seconds, 2),
            "evidence": sorted(self.evidence),
            "ranked": [list(h) for h in self.ranked],
        }


def body(c: Corpus, q: Question, mode: str, k: int) -> dict[str, Any]:
    """The recall request of one question, asked at its date (`as_of`: LongMemEval's question date, LoCoMo's
    last session's), so relative times ("two weeks ago") are read as the asker meant them. Suffixes of the
    mode: "+adjacent" sends `adjacent: true`, "+now" no `as_of` (relative times read from the service's clock,
    the harness before `as_of`): "hybrid+now"."""
    base, *flags = mode.split("+")
    out: dict[str, Any] = {
        "workspace_id": c.workspace,
        "agent_id": c.agent_id,
        "scope": "own",
        "query": q.question,
        "k": k,
        "mode": base,
    }
    if "adjacent" in flags:
        out["adjacent"] = True
    if q.date and "now" not in flags:
        out["as_of"] = haystack_time(q.date).isoformat().replace("+00:00", "Z")
    return out


def ask(url: str, sets: Mapping[str, list[Corpus]], mode: str, *, k: int = 10, clients: int = CLIENTS) -> list[Answer]:
    """Every scored question of every set, in `mode`, from `clients` concurrent clients (one connection each);
    the answers in question order."""
    jobs = [
        (name, c, q, part)
        for name, corpora in sets.items()
        for hold in [holdout_of(corpora)]
        for c in corpora
        for q in c.scored_questions
        for part in ["holdout" if q.id in hold else "dev"]
    ]
    local = threading.local()
    opened: list[httpx.Client] = []
    lock = threading.Lock()

    def one(job: tuple[str, Corpus, Question, str]) -> Answer:
        name, c, q, part = job
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=url, timeout=120)
            with lock:
                opened.append(client)
        sent, t0 = time.monotonic(), time.perf_counter()
        r = client.post("/v1/recall", json=body(c, q, mode, k))
        took = time.perf_counter() - t0
        r.raise_for_status()
        data = r.json()
        if data.get("degraded") and mode != "sparse":
            raise RuntimeError(f"{mode} answered degraded (sparse-only): the model is not loaded")
        ranked = tuple(tuple(covered(h)) for h in data["hits"])
        return Answer(q.id, name, q.type, part, q.evidence, ranked, took, sent)

    try:
        with ThreadPoolExecutor(max_workers=max(1, clients)) as pool:
            return list(pool.map(one, jobs))
    finally:
        for client in opened:
            client.close()


# ---- the report ----------------------------------------------------------------------------------------


def cells(answers: Sequence[Answer]) -> dict[str, list[Answer]]:
    """'<set>/<part>' and '<set>/<part>/<type>' for the dev and holdout parts, '<set>/all' (and by type)."""
    out: dict[str, list[Answer]] = {}
    for a in answers:
        for part in (a.part, "all"):
            out.setdefault(f"{a.set}/{part}", []).append(a)
            out.setdefault(f"{a.set}/{part}/{a.type}", []).append(a)
    return out


def _cell(answers: Sequence[Answer], spread: bool) -> str:
    r5 = [a.recall(5) for a in answers]
    text = f"{np.mean(r5):.3f}/{np.mean([a.recall(10) for a in answers]):.3f}"
    if spread:
        lo, hi = interval(r5)
        text += f" ±{(hi - lo) / 2:.3f}"
    return text


def report(columns: Mapping[str, Sequence[Answer]]) -> str:
    """One table per set: rows = its dev part, holdout part and all questions, each whole (with the 95 %
    interval of R@5, ±half its width) and by type; one column per mode or restarted column."""
    names = list(columns)
    by_column = {n: cells(a) for n, a in columns.items()}
    first = by_column[names[0]] if names else {}
    out: list[str] = []
    for s in dict.fromkeys(k.split("/")[0] for k in first):
        out += [f"### {s}", "", "| part / type (questions) | " + " | ".join(names) + " |"]
        out.append("|---" * (len(names) + 1) + "|")
        for part in ("dev", "holdout", "all"):
            key = f"{s}/{part}"
            if key not in first:
                continue
            types = sorted(k for k in first if k.startswith(key + "/"))
            for row in [key, *types]:
                label = row.split("/", 1)[1]
                got = [_cell(by_column[n][row], row == key) if row in by_column[n] else "-" for n in names]
                shown = f"**{label}**" if row == key else label
                out.append(f"| {shown} ({len(first[row])}) | " + " | ".join(got) + " |")
        out.append("")
    out.append("cells: R@5/R@10 (whole parts: ± half the 95 % bootstrap interval of R@5)")
    return "\n".join(out)


def latency(columns: Mapping[str, Sequence[Answer]]) -> str:
    """POST /v1/recall as the harness's clients saw it, per column (the machine as it was)."""
    rows = []
    for name, answers in columns.items():
        ms = np.array(sorted(1000 * a.seconds for a in answers))
        if len(ms):
            p50, p95, p99 = np.percentile(ms, [50, 95, 99])
            rows.append(f"  {name:<40} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  p99 {p99:6.1f} ms  (n={len(ms)})")
    return "recall latency (client side):\n" + "\n".join(rows) if rows else ""


# ---- the run -------------------------------------------------------------------------------------------


def arguments(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--url", help="recall service of a running stack (needs --bootstrap); default: start one")
    ap.add_argument("--bootstrap", help="Kafka bootstrap of that running stack")
    ap.add_argument("--no-ingest", action="store_true", help="the store under --data-dir already holds the corpora")
    ap.add_argument("--data-dir", type=Path, default=None, help="stack data directory (default: a fresh one)")
    ap.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra settings for the stack started here"
    )
    ap.add_argument("--clients", type=int, default=CLIENTS, help="concurrent recall clients")
    ap.add_argument("--mode", action="append", default=None, help="recall modes (repeatable; default: the harness's)")
    ap.add_argument("--index-timeout", type=float, default=7200.0)
    ap.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        help="seconds for a stack to become healthy (a loaded CPU is slow)",
    )
    ap.add_argument(
        "--restart",
        action="append",
        choices=list(RESTARTS),
        default=None,
        help="restarted columns (repeatable; default: the harness's)",
    )
    ap.add_argument("--no-baseline", action="store_true", help="no restarted columns")
    return ap


def run(
    a: argparse.Namespace,
    sets: Mapping[str, list[Corpus]],
    *,
    name: str,
    modes: Sequence[str] = MODES,
    restarts: Sequence[str] = (),
) -> int:
    """Ingest `sets` (unless --no-ingest), ask every question in every mode and restarted column, print the
    report and write eval/results/<name>-<ts>.json."""
    # a TERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the stack started here is stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    corpora = [c for cs in sets.values() for c in cs]
    summary = ", ".join(
        f"{n}: {len(cs)} corpora, {sum(len(c.scored_questions) for c in cs)} questions" for n, cs in sets.items()
    )
    print(f"{summary}; {sum(len(c.turns) for c in corpora)} turns", flush=True)
    modes = tuple(a.mode or modes)
    chosen = [] if a.no_baseline else (a.restart or list(restarts))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data_dir = a.data_dir or RESULTS / f"stack-{stamp}"
    columns: dict[str, list[Answer]] = {}
    timings: dict[str, float] = {}
    stack: Stack | None = None
    extra = dict(e.split("=", 1) for e in a.env)
    try:
        if a.url:
            if not a.bootstrap and not a.no_ingest:
                raise SystemExit("--url needs --bootstrap (or --no-ingest)")
            url, bootstrap = a.url.rstrip("/"), a.bootstrap
        else:
            stack = Stack(data_dir, env=extra)
            print(f"starting episodic up (data {data_dir}, log {stack.log})", flush=True)
            stack.start(a.start_timeout)
            url, bootstrap = stack.url, stack.bootstrap
        if not a.no_ingest:
            with httpx.Client(base_url=url, timeout=60) as client:
                t0 = time.monotonic()
                sent = produce(corpora, bootstrap)
                timings["produce_s"] = time.monotonic() - t0
                print(f"produced {sent} entries in {timings['produce_s']:.0f}s", flush=True)
                t0 = time.monotonic()
                wait_indexed(client, corpora, a.index_timeout)
                timings["index_s"] = time.monotonic() - t0
                print(f"indexed in {timings['index_s']:.0f}s", flush=True)
        for mode in modes:
            columns[mode] = ask(url, sets, mode, clients=a.clients)
            print(f"  {mode}: {len(columns[mode])} questions asked", flush=True)
        if chosen and stack is None:
            print("(restarted columns skipped: they need the stack started here)")
        for column in chosen if stack is not None else []:
            if stack is not None:
                stack.stop()
            slug = column.split(" ")[0]
            stack = Stack(data_dir, env={**extra, **RESTARTS[column]}, log=data_dir / f"stack-{slug}.log")
            try:
                stack.start(a.start_timeout)
            except TimeoutError as e:  # keep the columns measured so far
                print(f"{column}: skipped: {e}", flush=True)
                continue
            columns[column] = ask(stack.url, sets, "hybrid", clients=a.clients)
    finally:
        if stack:
            stack.stop()

    text = report(columns) + "\n\n" + latency(columns)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}-{stamp}.json"
    record = {
        "args": {k: v for k, v in vars(a).items() if k != "func"} | {"data_dir": str(data_dir)},
        "timings": timings,
        "table": text,
        "answers": {col: [x.as_dict() for x in answers] for col, answers in columns.items()},
    }
    out.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = arguments("Both dev sets (LongMemEval oracle and s, LoCoMo) through the pipeline and the recall API")
    ap.add_argument("--set", default="all", help=f"all, both (oracle and s) or a comma-separated list of {SETS}")
    ap.add_argument("--limit", type=int, default=None, help="first N questions (oracle) / corpora (s, locomo)")
    a = ap.parse_args(argv)
    return run(a, {n: load(n, limit=a.limit) for n in set_names(a.set)}, name="eval")


if __name__ == "__main__":
    sys.exit(main())
