"""Two bound agents of one crew in one workspace, over the real store, its state store, the real model, the
real indexer, linker and forgetter, read through the app's own HTTP surface (the API and the explorer).

`Trust.write` indexes entries and links them as the pipeline would (the indexer, then the linker on the
`vector` events); forgets go through the API and are applied by the real Forgetter at once (the consumer's
place). `Trust.reads` gathers everything a token can read about the workspace: every memory id and run it
may ask for, listings, recall and render with walks and adjacency, and the explorer's memory, run, search
and forget-preview pages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.lifecycle.forget import Forgetter
from episodic.maintenance.linker import Linker
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from episodic.store.state import QdrantStateStore
from recall.app import create_app
from schemas.events import EmbeddableRecord
from tests.integration.test_memory_api import Sink
from tests.tmpfs import fast_tmp_dir

AGENTS = ("alice", "mallory")
CREW = "c1"
WORKSPACES = 4000  # a fresh workspace per example of a property, all named in the tokens file
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def token(agent: str) -> str:
    return f"token-of-{agent}-0123456789"


WS_TOKEN = "token-of-the-whole-workspace-0123"


@dataclass
class Read:
    """One answer a token read: where, what it asked for (ids it may see echoed), and the text."""

    where: str
    asked: frozenset[str]
    body: str


@dataclass
class Trust:
    store: EdgeStore
    state: QdrantStateStore
    indexer: Indexer
    linker: Linker
    api: dict[str, TestClient] = field(default_factory=dict)  # token -> client
    clock: list[datetime] = field(default_factory=lambda: [T0])

    def client(self, tok: str) -> TestClient:
        return self.api[tok]

    def rec(self, ws: str, i: str, summary: str, *, agent: str, run: str | None = None, minutes: float = 0,
            entry_type: str = "summary.generated", supports: list[str] | None = None) -> EmbeddableRecord:  # fmt: skip
        ts = T0 + timedelta(minutes=minutes)
        refs = {"supports": supports} if supports else None
        return EmbeddableRecord.from_dict(
            {"id": i, "workspace_id": ws, "agent_id": agent, "crew_id": CREW, "run_id": run,
             "ts": ts.isoformat(), "entry_type": entry_type, "severity": "warn", "summary": summary,
             "payload": {"note": summary[:20]}, "refs": refs, "base_importance": 0.7,
             "accepted_at": ts + timedelta(seconds=1)}
        )  # fmt: skip

    def write(self, records: list[EmbeddableRecord]) -> Any:
        """Index a batch and link its vectors, as the embedding consumer and the linker agent would."""
        result = self.indexer.index_batch(records)
        self.linker.link([e for e in result.events if e.mode == "vector"])
        return result

    def forget(self, agent: str, ws: str, entry_id: str) -> dict[str, Any]:
        r = self.client(token(agent)).delete(f"/v1/memory/{entry_id}", params={"workspace_id": ws, "wait": 5})
        assert r.status_code in (200, 202), r.text
        return dict(r.json())

    def reads(self, agent: str, ws: str, ids: list[str], runs: list[str], queries: list[str]) -> list[Read]:
        """Everything `agent`'s bound token reads of the workspace (see the module doc)."""
        c = self.client(token(agent))
        out: list[Read] = []

        def read(where: str, r: Any, *asked: str) -> None:
            assert r.status_code < 500, (where, r.status_code, r.text[:500])
            assert r.status_code in (200, 404), (where, r.status_code, r.text[:500])  # a read, not a refusal
            out.append(Read(where, frozenset(asked), unescape(r.text)))

        q = {"workspace_id": ws}
        # a memory's page shows its `refs` as its agent wrote them: the ids there are that agent's own words
        wrote: dict[str, set[str]] = {}  # an id (its own or an alias) -> the refs of the memory it names
        for p in _select(self.store, ws).values():
            if p.get("agent_id") == agent:
                for i in (p["entry_id"], *(p.get("aliases") or [])):
                    wrote[str(i)] = {str(x) for x in (p.get("refs") or {}).get("supports") or []}
        for i in ids:
            read(f"GET /v1/memory/{i}", c.get("/v1/memory", params={**q, "entry_id": i}), i, *wrote.get(i, ()))
            read(f"/ui/memory/{i}", c.get(f"/ui/memory/{i}", params=q), i, *wrote.get(i, ()))
        read("GET /v1/memories", c.get("/v1/memories", params=q))
        for run in runs:
            read(f"GET /v1/memories?run_id={run}", c.get("/v1/memories", params={**q, "run_id": run}), run)
            read(f"/ui/run/{run}", c.get(f"/ui/run/{run}", params=q), run)
        for text in queries:
            for extra in ({}, {"walk_depth": 1}, {"adjacent": True}):
                body = {"workspace_id": ws, "agent_id": agent, "query": text, "k": 10, **extra}
                read(f"POST /v1/recall {extra}", c.post("/v1/recall", json=body))
                read(f"POST /v1/recall/render {extra}", c.post("/v1/recall/render", json={**body, "max_chars": 4000}))
            read(f"/ui/search {text[:20]}", c.get("/ui/search", params={**q, "q": text, "walk_depth": "1"}), text)
        page = c.get("/ui/forget", params=q)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, page.text[:300]
        form = {"workspace_id": ws, "entry_ids": "\n".join(ids), "csrf": csrf.group(1)}
        read("POST /ui/forget (preview)", c.post("/ui/forget", data=form), *ids)
        run_form = {"workspace_id": ws, "run_id": runs[0] if runs else "none", "csrf": csrf.group(1)}
        read("POST /ui/forget run (preview)", c.post("/ui/forget", data=run_form), run_form["run_id"])
        return out


def _select(store: EdgeStore, ws: str) -> dict[str, dict[str, Any]]:
    from episodic.kernel.ports import Selection

    return dict(store.select(Selection(ws)))


@contextmanager
def trust_env(base: Path, embedder: Any) -> Iterator[Trust]:
    with fast_tmp_dir(base) as where:
        store = EdgeStore(where / "edge")
        store.ensure_collection(embedder.dim)
        state = QdrantStateStore.beside(store)
        bm25 = Bm25Encoder()
        env = Trust(
            store=store,
            state=state,
            indexer=Indexer(store=store, embedder=embedder, bm25=bm25, state=state),
            linker=Linker(store=store, state=state, clock=lambda: T0),
        )
        workspaces = [f"ws-{n}" for n in range(WORKSPACES)]
        tokens = [{"name": a, "token": token(a), "workspaces": workspaces, "agent_id": a, "crew_id": CREW}
                  for a in AGENTS]  # fmt: skip
        tokens.append({"name": "orchestrator", "token": WS_TOKEN, "workspaces": workspaces})
        path = where / "tokens.json"
        path.write_text(json.dumps({"tokens": tokens}))
        app = create_app(
            settings=Settings(tokens_file=path),
            store=store,
            embedder=embedder,
            bm25=bm25,
            publish=lambda t, k, v: None,
            status=lambda: {"kafka": "ok", "kafka_bootstrap": "127.0.0.1:1"},
            metrics=Metrics(),
            state=state,
            forget_sink=Sink(Forgetter(store=store, state=state, bm25=bm25)),
        )
        try:
            for tok in [*(token(a) for a in AGENTS), WS_TOKEN]:
                client = TestClient(app)
                client.headers["authorization"] = f"Bearer {tok}"
                env.api[tok] = client
            yield env
        finally:
            state.close()
            store.close()


# an entry's own `refs` as the API (JSON) and the explorer's memory page (a <pre> of JSON) show them
_REFS = re.compile(r'"refs":\{[^{}]*\}|<h3>refs</h3><pre class="bytes">.*?</pre>', re.S)


def leaks(reads: list[Read], ids: set[str], texts: set[str], written: AbstractSet[str] = frozenset()) -> list[str]:
    """Each read that names one of `ids` (beyond what it asked for) or holds one of `texts`. `written`: ids the
    reader itself wrote in its entries' refs (a rule's `supports`); the refs are shown as written, whether the
    id is a memory or not, so they tell nothing, and those ids count only outside the refs."""
    found = []
    for r in reads:
        bare = _REFS.sub("", r.body)
        for i in sorted(ids - r.asked):
            if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", bare if i in written else r.body):
                found.append(f"{r.where}: id {i!r}")
        for t in sorted(texts):
            # as a text, not inside a number or a word: the answers carry floats (scores, ages in seconds by the
            # real clock) whose digits held "4471" now and then (a failure of the full suite, 2026-12-02)
            hit = re.search(rf"(?<![\w.]){re.escape(t)}(?![\w])", r.body)
            if hit and not any(t in a for a in r.asked):
                found.append(f"{r.where}: text {t!r} in ...{r.body[max(0, hit.start() - 80) : hit.end() + 80]}...")
    return found


def memories_of(env: Trust, ws: str, agent: str) -> tuple[set[str], set[str]]:
    """The ids (entry ids, aliases, absorbed ids) and summaries of `agent`'s memories in the workspace."""
    ids: set[str] = set()
    texts: set[str] = set()
    for p in _select(env.store, ws).values():
        if p.get("agent_id") == agent:
            ids |= {str(p["entry_id"]), *(str(a) for a in p.get("aliases") or [])}
            texts.add(str(p["summary"]))
    return ids, texts


__all__ = ["AGENTS", "WS_TOKEN", "Read", "Trust", "leaks", "memories_of", "token", "trust_env"]
