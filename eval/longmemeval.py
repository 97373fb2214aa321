"""`make eval`: LongMemEval turn-level evidence recall through the real pipeline and the recall API.

    python -m eval.longmemeval [--set oracle|s|both] [--limit N] [--url URL] [--no-baseline]

Every turn becomes a journal entry (``summary.generated``, severity info, ``summary = "role: content"``,
``run_id`` = the session id, ``ts`` from the haystack date), one workspace per corpus (oracle: one
pooled workspace; s: one per question), one agent, scope ``own``. The entries are produced to
``journal.entries`` of an ``episodic up`` stack (started here on free ports under eval/results/stack
unless ``--url``/``--bootstrap`` name a running one); once ``/v1/memory/stats`` shows them indexed, every
question is asked through ``POST /v1/recall`` (k=10) in modes dense, sparse and hybrid, and hybrid with
``adjacent: true``. The other columns are the same store served with other settings (the stack is
restarted on the same data directory; nothing is re-ingested): the seed's equal-weight RRF k=60
(``EPISODIC_FUSION=rrf_equal``), the previous four-leg default (no context leg) and the context leg
alone (every other leg weighted 0).

Prints recall@5/@10 (and hit@10) per set, over all questions and split into dev and holdout
(``eval.data.holdout``, as the sweeps), and writes eval/results/longmemeval-<ts>.json.
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
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from episodic.domain.identity import normalise_summary
from eval.data import Corpus, holdout, load
from eval.embcache import RESULTS
from eval.metrics import Score, score

AGENT = "lme-agent"
MAX_SUMMARY = 16_384
MODES = ("dense", "sparse", "hybrid", "hybrid+adjacent")
# columns served by a restart of the same store with other settings: name -> environment
RESTARTS: dict[str, dict[str, str]] = {
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
PARTS = ("all", "dev", "holdout")
LATENCY: dict[str, list[float]] = {}  # mode -> seconds per POST /v1/recall (client side), this run
ROOT = Path(__file__).resolve().parents[1]


def workspace(c: Corpus) -> str:
    return f"lme-{c.name}"


def _ts(date: str, index: int) -> str:
    """'2023/05/20 (Sat) 00:59' -> RFC 3339, one second per turn so a session keeps its order."""
    try:
        d = datetime.strptime(date.split(" (")[0] + " " + date.split(") ")[-1], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    except (ValueError, IndexError):
        d = datetime(2023, 1, 1, tzinfo=UTC)
    return (d + timedelta(seconds=index)).isoformat().replace("+00:00", "Z")


def entries(c: Corpus) -> Iterator[dict[str, Any]]:
    ws = workspace(c)
    for t in c.turns:
        yield {
            "id": t.id,
            "workspace_id": ws,
            "crew_id": None,
            "agent_id": AGENT,
            "run_id": t.session_id,
            "ts": _ts(t.date, t.index),
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
    """`episodic up` in a child process on free ports, with its own data directory."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None, log: Path | None = None) -> None:
        self.data_dir = data_dir
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
        env.pop("EPISODIC_KAFKA_BOOTSTRAP", None)
        env.pop("EPISODIC_QDRANT_URL", None)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stack.cli", "up"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
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
    want = {workspace(c): expected_points(c) for c in corpora}
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


def ask(
    client: httpx.Client, corpora: list[Corpus], modes: tuple[str, ...], k: int = 10, label: str | None = None
) -> dict[str, dict[str, Score]]:
    """mode -> part (all, dev, holdout) -> Score. A mode "hybrid+adjacent" is hybrid with `adjacent: true`."""
    hold = holdout(q.id for c in corpora for q in c.scored_questions)
    out: dict[str, dict[str, Score]] = {}
    for mode in modes:
        took: list[float] = []
        pairs: dict[str, list[tuple[list[list[str]], frozenset[str]]]] = {p: [] for p in PARTS}
        for c in corpora:
            for q in c.scored_questions:
                body: dict[str, Any] = {
                    "workspace_id": workspace(c),
                    "agent_id": AGENT,
                    "scope": "own",
                    "query": q.question,
                    "k": k,
                    "mode": mode.split("+")[0],
                }
                if mode.endswith("+adjacent"):
                    body["adjacent"] = True
                t0 = time.perf_counter()
                r = client.post("/v1/recall", json=body)
                took.append(time.perf_counter() - t0)
                r.raise_for_status()
                data = r.json()
                if data.get("degraded"):
                    raise RuntimeError(f"{mode} answered degraded (sparse-only): the model is not loaded")
                ranked = [[h["entry_id"], *h.get("aliases", [])] for h in data["hits"]]
                pairs["all"].append((ranked, q.evidence))
                pairs["holdout" if q.id in hold else "dev"].append((ranked, q.evidence))
        out[mode] = {p: score(v) for p, v in pairs.items() if v}
        if took:
            LATENCY.setdefault(label or mode, []).extend(took)
    return out


def print_table(results: dict[str, dict[str, dict[str, Score]]]) -> str:
    """One row per method; per set and part: R@5 / R@10 (hit@10)."""
    sets = list(results)
    methods = list(dict.fromkeys(m for r in results.values() for m in r))
    cols = [(s, p) for s in sets for p in PARTS]
    head = f"{'method':<30}" + "".join(f" {s + '/' + p:>22}" for s, p in cols)
    lines = [head, "-" * len(head)]
    for m in methods:
        row = f"{m:<30}"
        for s, p in cols:
            sc = results[s].get(m, {}).get(p)
            row += f" {f'{sc.recall5:.3f}/{sc.recall10:.3f} ({sc.hit10:.3f})' if sc else '-':>22}"
        lines.append(row)
    n = {
        f"{s}/{p}": next(iter(results[s].values()))[p].n
        for s, p in cols
        if results[s] and p in next(iter(results[s].values()))
    }
    lines.append("cells: R@5/R@10 (hit@10); questions: " + ", ".join(f"{k}={v}" for k, v in n.items()))
    return "\n".join(lines)


def latency_table() -> str:
    """POST /v1/recall as the eval's client saw it, per column (one stack, the machine as it was)."""
    rows = []
    for mode, took in LATENCY.items():
        ms = sorted(t * 1000 for t in took)
        rows.append(
            f"  {mode:<30} p50 {ms[len(ms) // 2]:6.1f} ms  p95 {ms[int(len(ms) * 0.95)]:6.1f} ms  (n={len(ms)})"
        )
    return "recall latency (client side):\n" + "\n".join(rows) if rows else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="LongMemEval recall@5/@10 through the pipeline and the recall API")
    ap.add_argument("--set", default="both", choices=["oracle", "s", "both"])
    ap.add_argument(
        "--limit", type=int, default=None, help="first N questions of each set (oracle: their sessions pooled)"
    )
    ap.add_argument(
        "--s-limit", type=int, default=None, help="first N s haystacks (types interleaved); default --limit"
    )
    ap.add_argument("--url", help="recall service of a running stack (needs --bootstrap); default: start one")
    ap.add_argument("--bootstrap", help="Kafka bootstrap of that running stack")
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the restarted columns (seed RRF, no piece prior, four legs, context leg)",
    )
    ap.add_argument("--no-ingest", action="store_true", help="the store under --data-dir already holds the corpora")
    ap.add_argument("--data-dir", type=Path, default=None, help="stack data directory (default: a fresh one)")
    ap.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra settings for the stack started here"
    )
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
        help="only these restarted columns (repeatable; default: all)",
    )
    # a TERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the stack started here is stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    a = ap.parse_args(argv)

    names = ["oracle", "s"] if a.set == "both" else [a.set]
    limits = {"oracle": a.limit, "s": a.s_limit if a.s_limit is not None else a.limit}
    sets = {n: load(n, limit=limits[n]) for n in names}
    corpora = [c for cs in sets.values() for c in cs]
    n_turns = sum(len(c.turns) for c in corpora)
    summary = ", ".join(
        f"{n}: {len(cs)} corpora, {sum(len(c.scored_questions) for c in cs)} questions" for n, cs in sets.items()
    )
    print(f"LongMemEval: {summary}; {n_turns} turns", flush=True)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    data_dir = a.data_dir or RESULTS / f"stack-{stamp}"
    results: dict[str, dict[str, dict[str, Score]]] = {n: {} for n in names}
    stack: Stack | None = None
    extra = dict(e.split("=", 1) for e in a.env)
    try:
        if a.url:
            if not a.bootstrap and not a.no_ingest:
                ap.error("--url needs --bootstrap (or --no-ingest)")
            url, bootstrap = a.url.rstrip("/"), a.bootstrap
        else:
            stack = Stack(data_dir, env=extra)
            print(f"starting episodic up (data {data_dir}, log {stack.log})", flush=True)
            stack.start(a.start_timeout)
            url, bootstrap = stack.url, stack.bootstrap
        with httpx.Client(base_url=url, timeout=60) as client:
            if not a.no_ingest:
                t0 = time.monotonic()
                sent = produce(corpora, bootstrap)
                print(f"produced {sent} entries in {time.monotonic() - t0:.0f}s", flush=True)
                t0 = time.monotonic()
                wait_indexed(client, corpora, a.index_timeout)
                print(f"indexed in {time.monotonic() - t0:.0f}s", flush=True)
            for n, cs in sets.items():
                results[n].update(ask(client, cs, MODES))
        if not a.no_baseline and stack is None:
            print("(restarted columns skipped: they need the stack started here)")
        if not a.no_baseline and stack is not None:
            for name, env in RESTARTS.items():
                if a.restart and name not in a.restart:
                    continue
                stack.stop()
                slug = name.split(" ")[0]
                stack = Stack(data_dir, env={**extra, **env}, log=data_dir / f"stack-{slug}.log")
                try:
                    stack.start(a.start_timeout)
                except TimeoutError as e:  # keep the columns measured so far
                    print(f"{name}: skipped: {e}", flush=True)
                    continue
                with httpx.Client(base_url=stack.url, timeout=60) as client:
                    for n, cs in sets.items():
                        results[n][name] = ask(client, cs, ("hybrid",), label=name)["hybrid"]
    finally:
        if stack:
            stack.stop()

    text = print_table(results) + "\n" + latency_table()
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"longmemeval-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(a) | {"data_dir": str(data_dir)},
                "results": {
                    n: {m: {p: asdict(sc) for p, sc in parts.items()} for m, parts in r.items()}
                    for n, r in results.items()
                },
                "table": text,
                "latency_ms": {m: sorted(t * 1000 for t in took) for m, took in LATENCY.items()},
            },
            indent=1,
            default=str,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
