"""The embedding generations wired from the settings: the process's `ModelSwitch`, and the re-embed pass
run in the background when the configured model is not the store's active one (episodic.embedding.generations,
episodic.lifecycle.reembed).

`open_switch` reconciles the store with `EPISODIC_EMBED_MODEL` (starting or resuming a re-embed when they
differ) and loads the active generation's model too when it is not the configured one, so that recall keeps
its dense leg with the old vectors until the switch (when the old model cannot be loaded here, recall
answers from BM25 meanwhile). `ReembedRunner` runs the pass on a thread of its own, with its progress
in the metrics, and stops with the stack (its cursor is saved: the next start resumes it).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from episodic.domain.chunking import Scheme
from episodic.embedding.generations import Generation, Loader, ModelSwitch, adopt, embedder_making, model_key, plan
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import Embedder, StateStore
from episodic.kernel.settings import Settings
from episodic.lifecycle.reembed import DEFAULT_MAX_FAILED, Progress, Reembedder, ReembedFailed
from episodic.store.facade import QdrantStore

log = logging.getLogger(__name__)

STOP_S = 30.0  # a page in flight (one model call and its write) when the stack stops


def model_loader(
    settings: Settings, *, shared_process: bool, queries: bool, configured: Embedder | None = None
) -> Loader:
    """The embedder of another generation than the configured one's (None when it cannot be had): the
    configured model itself cutting texts the generation's way when only the pieces differ (no second
    copy of the weights), else that model loaded with the same settings but its pieces."""
    from episodic.embedding.embedder import load_embedder

    def load(gen: Generation) -> Embedder | None:
        try:
            scheme = Scheme.parse(gen.pieces)
        except ValueError as e:  # a document written by hand, or by an embedder that does not chunk
            log.warning("embedding: generation %s: %s; it cannot be loaded here", gen.vector, e)
            return None
        if configured is not None and model_key(configured.model_id) == model_key(gen.model):
            return embedder_making(gen, configured)  # the same weights cutting the generation's way
        update: dict[str, object] = {
            "embed_model": gen.model,
            "chunk_mode": scheme.mode,
            "chunk_words": scheme.words or settings.chunk_words,
        }
        if scheme.window:  # else windows of unrecorded sizes (LEGACY): the configured ones
            update["chunk_tokens"] = scheme.window + 2  # the embedder takes [CLS] and [SEP] off again
            update["chunk_overlap_tokens"] = scheme.overlap
        return load_embedder(settings.model_copy(update=update), shared_process=shared_process, queries=queries)

    return load


def open_switch(
    settings: Settings,
    *,
    store: QdrantStore,
    state: StateStore,
    embedder: Embedder | None,
    metrics: Metrics,
    shared_process: bool,
    queries: bool,
    documents: bool = True,
) -> ModelSwitch:
    # Only a process that embeds documents reconciles the store with its settings (starts, resumes or
    # abandons a re-embed); one that only embeds queries follows the active generation, whatever its own
    # model and pieces settings say (a query's vector does not depend on the pieces).
    doc = plan(store, state, embedder, wall=time.time) if documents else adopt(store, state, embedder)
    # Sparse-only (EPISODIC_EMBED_MODEL=none, or the model would not load) stays so: no other model is loaded.
    loader = (
        model_loader(settings, shared_process=shared_process, queries=queries, configured=embedder)
        if embedder is not None
        else None
    )
    embedders = [embedder] if embedder is not None else []
    active = Generation.of(doc["active"])
    if loader is not None and embedder is not None and not active.made_by(embedder):
        old = loader(active)  # now, not lazily: recall keeps its dense leg from the first request
        if old is not None and active.made_by(old):
            embedders.append(old)
        else:
            log.warning(
                "embedding: %s (pieces %s) cannot be loaded here; recall uses BM25 until the re-embed is done",
                active.model,
                active.pieces,
            )
    switch = ModelSwitch(
        store=store, state=state, embedders=embedders, loader=loader, on_change=metrics.observe_generations
    )
    metrics.observe_generations(switch.doc)
    return switch


class ReembedRunner:
    """The re-embed pass on a thread of its own (the model call holds a core for seconds; the event loop
    must not wait on it)."""

    def __init__(
        self,
        *,
        store: QdrantStore,
        state: StateStore,
        embedder: Embedder,
        switch: ModelSwitch,
        metrics: Metrics,
        max_failed: int = DEFAULT_MAX_FAILED,
    ) -> None:
        self.metrics = metrics
        self.switch = switch
        self._seen = (0, 0)
        self._stop = threading.Event()
        self.reembedder = Reembedder(
            store=store,
            state=state,
            embedder=embedder,
            on_progress=self._progress,
            on_switch=self._switched,
            max_failed=max_failed,
            on_failed=self._failed,
        )
        self._thread: threading.Thread | None = None

    @classmethod
    def wanted(cls, switch: ModelSwitch, embedder: Embedder | None) -> bool:
        """Whether this process should run the pass: a generation is pending, made by its model (or an old
        vector still waits to be dropped, left by a process that stopped before its grace was over)."""
        pending = switch.pending()
        if embedder is None:
            return False
        return (pending is not None and pending.made_by(embedder)) or (
            pending is None and bool(switch.doc.get("retired"))
        )

    def _progress(self, p: Progress) -> None:
        done, failed = self._seen
        if p.done >= done:  # counts of this run (a resumed run starts from the saved counts)
            self.metrics.reembed_points.labels(outcome="embedded").inc(p.done - done)
        if p.failed >= failed:
            self.metrics.reembed_points.labels(outcome="failed").inc(p.failed - failed)
        self._seen = (p.done, p.failed)
        self.metrics.reembed_ratio.set(p.ratio)
        self.metrics.reembed_remaining.set(p.remaining)

    def _switched(self, gen: Generation) -> None:
        self.metrics.reembed_switches.inc()
        self.switch.refresh(force=True)  # this process moves at once; the others within their poll

    def _failed(self, record: dict[str, Any]) -> None:
        self.switch.refresh(force=True)  # the failed generation shows in the metric at once
        self.metrics.reembed_ratio.set(1.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reembed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.reembedder.run(self._stop)
        except ReembedFailed as e:
            log.error("re-embed: %s (fix the model, then start again to retry)", e)
        except Exception:
            log.exception("re-embed: the pass stopped on an error; the next start resumes it")

    def stop(self, timeout: float = STOP_S) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
