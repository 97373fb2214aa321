"""`episodic reindex --model M`: re-embed the store with another model, then switch recall to it.

The pieces are the configured ones (`EPISODIC_CHUNK_MODE`, `EPISODIC_CHUNK_WORDS`, ...): without `--model`
it re-embeds with the configured model, which re-cuts a store whose vectors were cut another way (its
generation records how: episodic.embedding.generations) and does nothing when they are the configured ones.

Runs the re-embed pass (episodic.lifecycle.reembed) in this process, in the foreground, with a progress line, until
the new model's vectors are complete and it is the active generation; Ctrl-C stops it with its cursor saved
(run it again to resume). `--status` prints where the store stands (and why the last pass failed, if it did).

It switches only on success: when more than `EPISODIC_REEMBED_MAX_FAILED` memories (default 5) fail the new
model, the pass stops as failed, the old model stays active with its vectors, and this exits 1 with the
reason.

With a Qdrant server (`EPISODIC_QDRANT_URL`) this runs beside the serving stack: recall keeps ranking with
the old vectors meanwhile and every process switches within seconds when it is done. The embedded store
(Qdrant Edge) is single-process, so there stop the stack first, or instead restart it with
`EPISODIC_EMBED_MODEL=M`, which runs the same pass in the background while the stack serves.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from episodic.kernel.errors import EmbedderUnavailable, EpisodicError
from episodic.kernel.settings import Settings

RETIRE_AFTER_S = 30.0  # other processes (a Qdrant server's) leave the old vector within their poll


def _status(store: Any, state: Any) -> dict[str, Any]:
    from episodic.embedding.generations import read
    from episodic.lifecycle.reembed import FAILURES

    doc = read(state) or {}
    out: dict[str, Any] = {"memories": store.count(), **doc}
    pending = doc.get("pending")
    if pending:
        out["remaining"] = store.count_without_vector(pending["vector"], failures=FAILURES)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="episodic reindex", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--model",
        help="the new model: the bundled name, or a local sentence-transformers directory "
        "(default: EPISODIC_EMBED_MODEL)",
    )
    ap.add_argument("--status", action="store_true", help="print the generations and the progress, change nothing")
    ap.add_argument("--page-size", type=int, default=64, help="memories per model call (default 64)")
    args = ap.parse_args(argv)
    if args.page_size < 1:
        ap.error("--page-size must be at least 1")
    settings = Settings()
    if not args.status and not args.model:
        if settings.sparse_only_forced:
            ap.error("--model is required: EPISODIC_EMBED_MODEL=none configures no model")
        args.model = settings.embed_model
    try:
        return _run(settings, args)
    except EmbedderUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except EpisodicError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _run(settings: Settings, args: argparse.Namespace) -> int:
    from episodic.embedding.embedder import load_model
    from episodic.embedding.generations import Generation, plan
    from episodic.lifecycle.reembed import Progress, Reembedder
    from episodic.store.facade import QdrantStore
    from stack.stores import open_state, open_store

    embedder = None if args.status else load_model(args.model, settings)
    store = open_store(settings, dim=embedder.dim if embedder is not None else 384)
    try:
        state = open_state(store)
        try:
            if embedder is None:
                print(json.dumps(_status(store, state), indent=2, default=str))
                return 0
            assert isinstance(store, QdrantStore)
            doc = plan(store, state, embedder, wall=time.time)
            if doc.get("pending") is None:
                active = doc["active"]
                print(
                    f"{embedder.model_id} is already the active model, pieces {embedder.pieces} "
                    f"(vector {active['vector']})"
                )
                return 0
            last = [0.0]

            def progress(p: Progress) -> None:
                if time.monotonic() - last[0] >= 1.0 or p.switched:
                    last[0] = time.monotonic()
                    print(f"re-embed to {p.model}: {p.ratio:.0%} ({p.remaining} to go, {p.failed} failed)", flush=True)

            stop = threading.Event()
            before = signal.signal(signal.SIGINT, lambda *_: stop.set())  # put back when the pass ends
            retire = RETIRE_AFTER_S if settings.qdrant_url else 0.0  # Edge: no other process can hold it
            pass_ = Reembedder(
                store=store,
                state=state,
                embedder=embedder,
                page_size=args.page_size,
                retire_after_s=retire,
                on_progress=progress,
                max_failed=settings.reembed_max_failed,
            )
            try:
                finished = pass_.run(stop, idle_s=1.0)
            finally:
                signal.signal(signal.SIGINT, before)
            if not finished:
                print("stopped; the cursor is saved: run the same command again to resume", file=sys.stderr)
                return 130
            active = Generation.of(_status(store, state)["active"])
            print(f"done: recall now ranks with {active.model}, pieces {active.pieces} (vector {active.vector})")
            if settings.embed_model != args.model:
                print(
                    f"set EPISODIC_EMBED_MODEL={args.model} for the stack: started with another model, "
                    "it would re-embed the store back to that one",
                    file=sys.stderr,
                )
            return 0
        finally:
            state.close()
    finally:
        store.close()
