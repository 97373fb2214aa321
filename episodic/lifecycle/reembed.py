"""The re-embed pass: fill the pending generation's vector for every memory, then switch to it.

Runs in the background of a process that has the new model (the one started with the new
`EPISODIC_EMBED_MODEL`, or `episodic reindex --model M`) while recall keeps ranking with the active
generation and ingestion keeps writing it.

**Resumable.** Each page is the next memories without the new vector, in point id order from the cursor,
which is saved in the generations document after the page's vectors are written; a restart resumes at the
cursor (a page done twice writes the same vectors). A sweep ends at the end of the id space; memories
written meanwhile behind the cursor are left for the next sweep, each shorter than the last.

**The switch.** When a sweep ends with at most a page of memories still without the new vector (those
ingested during the last moments, and the quarantined ones), the document's active generation becomes the
new one, in one write: every process's `ModelSwitch` moves to it within its poll, and the densify backfill
(which fills memories without the *active* vector) catches the stragglers. The old vector is dropped
`retire_after_s` later, once every process has stopped querying it.

**Only on success.** The switch needs the new vector on every memory but at most `max_failed` (quarantined
ones count as failures; default 5, `EPISODIC_REEMBED_MAX_FAILED`), and no memory still being retried: a
model that fails on more stops the pass as failed (`ReembedFailed`): the old generation stays active with
its vectors, the pending vector is retired, and the generations document keeps `failed` (the model, the
counts, the reason) for `episodic reindex --status`, the metrics (`episodic_embedding_generation_info
{state="failed"}`, `episodic_reembed_failed_points`) and `episodic doctor`. `episodic reindex` exits 1
with the reason.

**Failures.** A text the model fails on is embedded alone; one that still fails gets `reembed_failures`
counted in its payload and leaves the pass at `quarantine_after` (the densify backfill retries it after the
switch). One run at a time: the document holds a lease (`holder`, `lease_until`), renewed every page.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from episodic.domain.identity import summary_digest
from episodic.embedding.generations import Generation, model_field, read, write
from episodic.indexing.indexer import embed_each_on_failure
from episodic.kernel.errors import EpisodicError
from episodic.kernel.ports import Change, Embedder, StateStore
from episodic.store.facade import QdrantStore
from episodic.store.rules import vector_of_field

log = logging.getLogger(__name__)

FAILURES = "reembed_failures"  # payload: how many times the pending model failed on this memory's text
FIELDS = ("summary", FAILURES)
RETIRE_ATTEMPTS = 10  # then the old vector stays (it costs disk, not correctness) and the next pass retries


class ReembedBusy(EpisodicError):
    """Another process holds the re-embed's lease."""


class ReembedFailed(EpisodicError):
    """The pass stopped as failed: too many memories failed the new model (the old generation stays)."""


DEFAULT_MAX_FAILED = 5  # memories that may fail the new model (quarantined) for the switch to happen


@dataclass
class Progress:
    """Where the pass is: `done` memories re-embedded of `total` (those with the new vector plus those
    without), `remaining` still without it, `switched` once the new generation is active."""

    model: str
    vector: str
    done: int = 0
    failed: int = 0
    remaining: int = 0
    total: int = 0
    switched: bool = False

    @property
    def ratio(self) -> float:
        return 1.0 if self.switched or self.total == 0 else (self.total - self.remaining) / self.total


class Reembedder:
    def __init__(
        self,
        *,
        store: QdrantStore,
        state: StateStore,
        embedder: Embedder,
        page_size: int = 64,
        quarantine_after: int = 3,
        retire_after_s: float = 30.0,
        lease_s: float = 120.0,
        wall: Callable[[], float] = time.time,
        on_progress: Callable[[Progress], None] | None = None,
        on_switch: Callable[[Generation], None] | None = None,
        max_failed: int = DEFAULT_MAX_FAILED,
        on_failed: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.store = store
        self.state = state
        self.embedder = embedder
        self.page_size = page_size
        self.quarantine_after = quarantine_after
        self.retire_after_s = retire_after_s
        self.lease_s = lease_s
        self.wall = wall
        self.on_progress = on_progress
        self.on_switch = on_switch
        if max_failed < 0:
            raise ValueError(f"max_failed must be >= 0, got {max_failed}")
        self.max_failed = max_failed
        self.on_failed = on_failed
        self.last_error: str | None = None  # the model's last error on a text (kept with a failed pass)
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # -- one step -------------------------------------------------------------------------------------

    def _pending(self) -> tuple[dict[str, Any], Generation] | None:
        doc = read(self.state)
        if not doc or not doc.get("pending"):
            return None
        gen = Generation.of(doc["pending"])
        return (doc, gen) if gen.made_by(self.embedder) else None

    def step(self) -> bool:
        """One page (and, at the end of a sweep, the switch). False when there is nothing (more) to do for
        this model: no pending generation of it."""
        found = self._pending()
        if found is None:
            return False
        doc, gen = found
        pending = dict(doc["pending"])
        now = self.wall()
        if pending.get("holder") not in (None, self.holder) and float(pending.get("lease_until") or 0) > now:
            raise ReembedBusy(f"the re-embed to {gen.model} is running in {pending['holder']}")
        page, nxt = self.store.without_vector(
            gen.vector,
            self.page_size,
            pending.get("cursor"),
            fields=FIELDS,
            failures=FAILURES,
            quarantine_after=self.quarantine_after,
        )
        if page:
            written, failed = self._embed_page(gen, page)
            pending["done"] = int(pending.get("done") or 0) + written
            pending["failed"] = int(pending.get("failed") or 0) + failed
            if failed and self.last_error:
                pending["last_error"] = self.last_error
        pending.update(cursor=nxt, holder=self.holder, lease_until=now + self.lease_s)
        if nxt is None:
            remaining = self.store.count_without_vector(
                gen.vector, failures=FAILURES, quarantine_after=self.quarantine_after
            )
            retrying = self.store.count_failing(gen.vector, failures=FAILURES, quarantine_after=self.quarantine_after)
            if remaining <= self.page_size and retrying == 0:
                missing = self.store.count_without_vector(gen.vector, failures=FAILURES)
                failed = missing - remaining  # quarantined: the model failed on them `quarantine_after` times
                if failed > self.max_failed:
                    self._fail(doc, gen, pending, failed)
                self._switch(doc, gen)
                return False
            pending["sweeps"] = int(pending.get("sweeps") or 0) + 1
        write(self.state, {**doc, "pending": pending})
        self._report(gen, pending, switched=False)
        return True

    def _embed_page(self, gen: Generation, page: list[tuple[str, dict[str, Any]]]) -> tuple[int, int]:
        texts = [str(p.get("summary") or "") for _, p in page]
        vecs = embed_each_on_failure(self.embedder, texts, what="re-embed")
        rows = {pid: v.tolist() for (pid, _), v in zip(page, vecs, strict=True) if not isinstance(v, BaseException)}
        summaries = {pid: p.get("summary") for pid, p in page}
        fields = {model_field(gen.vector): gen.model}

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            # the vector of the summary that was embedded: one the consumer replaced meanwhile is left to
            # the next sweep (its new text is embedded then)
            if payload.get("summary") != summaries[pid]:
                return None
            made_from = {vector_of_field(gen.vector): summary_digest(str(summaries[pid] or ""))}
            return Change({**fields, **made_from}, vectors={gen.vector: rows[pid]})

        report = self.store.update_memories(rows, change, writer="re-embed", fields=("summary",)) if rows else None
        written = len(report.applied) if report is not None else 0
        failures = {
            pid: {FAILURES: int(p.get(FAILURES) or 0) + 1}
            for (pid, p), v in zip(page, vecs, strict=True)
            if isinstance(v, BaseException)
        }
        errors = [v for v in vecs if isinstance(v, BaseException)]
        if errors:
            self.last_error = f"{type(errors[0]).__name__}: {errors[0]}"[:300]
        if failures:
            log.warning("re-embed: %d texts failed with %s (counted; retried next sweep)", len(failures), gen.model)
            self.store.set_payloads(failures)
        return written, len(failures)

    def _switch(self, doc: dict[str, Any], gen: Generation) -> None:
        old = Generation.of(doc["active"])
        retired = [*(doc.get("retired") or []), {"vector": old.vector, "model": old.model, "at": self.wall()}]
        write(
            self.state,
            {
                **doc,
                "active": gen.as_doc(),
                "pending": None,
                "failed": None,
                "retired": retired,
                "switched_at": self.wall(),
            },
        )
        self.store.use_dense_vector(gen.vector)  # this process at once; the others through their ModelSwitch
        log.info("re-embed: done; %s is active (vector %s), %s retires", gen.model, gen.vector, old.vector)
        if self.on_switch is not None:
            self.on_switch(gen)
        self._report(gen, {}, switched=True)

    def _fail(self, doc: dict[str, Any], gen: Generation, pending: dict[str, Any], failed: int) -> None:
        total = self.store.count()
        got = total - self.store.count_without_vector(gen.vector, failures=FAILURES)
        reason = (
            f"{failed} of {total} memories failed the model {gen.model} {self.quarantine_after} times "
            f"(at most {self.max_failed} may: EPISODIC_REEMBED_MAX_FAILED); {got} got its vector"
        )
        old = Generation.of(doc["active"])
        record = {
            **gen.as_doc(),
            "reason": reason,
            "failed": failed,
            "embedded": got,
            "total": total,
            "at": self.wall(),
            "last_error": pending.get("last_error"),
        }
        retired = [*(doc.get("retired") or []), {"vector": gen.vector, "model": gen.model, "at": self.wall()}]
        write(self.state, {**doc, "pending": None, "failed": record, "retired": retired})
        log.error("re-embed: stopped as failed: %s; %s stays active (vector %s)", reason, old.model, old.vector)
        if self.on_failed is not None:
            self.on_failed(record)
        raise ReembedFailed(f"the re-embed to {gen.model} failed: {reason}; {old.model} stays active")

    def _report(self, gen: Generation, pending: dict[str, Any], *, switched: bool) -> None:
        if self.on_progress is None:
            return
        total = self.store.count()
        remaining = 0 if switched else self.store.count_without_vector(gen.vector, failures=FAILURES)
        self.on_progress(
            Progress(
                model=gen.model,
                vector=gen.vector,
                done=int(pending.get("done") or 0),
                failed=int(pending.get("failed") or 0),
                remaining=remaining,
                total=total,
                switched=switched,
            )
        )

    def release(self) -> None:
        """Give up the lease (a stopped run), so that the next run, here or elsewhere, resumes at once."""
        try:
            found = self._pending()
            if found is not None and found[0]["pending"].get("holder") == self.holder:
                doc, _ = found
                write(self.state, {**doc, "pending": {**doc["pending"], "lease_until": 0}})
        except EpisodicError as e:
            log.warning("re-embed: could not release the lease: %s", e)

    # -- retiring old vectors ---------------------------------------------------------------------------

    def retire(self) -> list[str]:
        """Drop the retired generations' vectors that every process has had `retire_after_s` to leave."""
        doc = read(self.state)
        if not doc:
            return []
        now = self.wall()
        keep, dropped = [], []
        active = Generation.of(doc["active"]).vector
        pending = (doc.get("pending") or {}).get("vector")
        for r in doc.get("retired") or []:
            vector = str(r.get("vector"))
            if vector in (active, pending):
                continue  # made active (or pending) again since: not ours to drop
            if now - float(r.get("at") or 0) < self.retire_after_s:
                keep.append(r)
                continue
            self.store.drop_dense_vector(vector)
            dropped.append(vector)
        if dropped or len(keep) != len(doc.get("retired") or []):
            write(self.state, {**(read(self.state) or doc), "retired": keep})
            log.info("re-embed: dropped the retired vectors %s", dropped)
        return dropped

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, idle_s: float = 1.0) -> bool:
        """Pages until the switch (True) or `stop` (False); then retires the old vector after its grace.
        Store errors are logged and retried after `idle_s`."""
        switched = False
        while not stop.is_set():
            try:
                if not self.step():
                    switched = True
                    break
            except ReembedBusy as e:
                log.info("re-embed: %s; waiting", e)
                stop.wait(self.lease_s / 4)
            except ReembedFailed:
                raise
            except EpisodicError as e:
                log.warning("re-embed: a page failed (retried): %s", e)
                stop.wait(idle_s)
        if not switched:
            self.release()
        failures = 0
        while switched and not stop.is_set() and failures < RETIRE_ATTEMPTS:
            try:
                self.retire()
                doc = read(self.state) or {}
                if not doc.get("retired"):
                    break
            except EpisodicError as e:
                failures += 1
                log.warning("re-embed: retiring the old vector failed (%d/%d): %s", failures, RETIRE_ATTEMPTS, e)
            stop.wait(min(idle_s * 5, max(self.retire_after_s / 4, 0.05)))
        return switched
