"""Embedding generations: which model's vectors recall ranks with, and the switch to another model.

A generation is one model's dense vectors: a named dense vector of the memories' collection (`dense` for
the first, `dense_1`, `dense_2`, ... after), the model that makes them, their dim, and how a text is cut
into them (`pieces`, episodic.domain.chunking.Scheme's key: `EPISODIC_CHUNK_MODE` and its sizes). A change of any
of the three starts a new generation: re-chunking a store is a re-embed like a change of model. A
generation recorded before the cut was part of it is taken as the windows every store was cut into then
(`chunking.LEGACY`, of the sizes configured now); a process that makes it records the exact key. Every
memory records the model of each of its vectors in its payload (`model_field`: `model` for `dense`,
`model@<vector>` for the others).

One document in the state store (kind `embedding`, key `generations`) says which generation is active
and which one is being filled (`pending`, with the re-embed pass's cursor and counts; see
`episodic.lifecycle.reembed`). Every process reads it through a `ModelSwitch`: the active generation and the
embedder of its model, refreshed from the document every `poll_s`, so a switch made by one process
reaches the others within that time. Queries name the vector their query was embedded for
(`MemoryStore.query_hybrid(..., using=)`), so a switch between embedding a query and running it cannot
rank one model's query against another model's vectors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from episodic.domain.chunking import LEGACY, same_cut
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import DENSE, Embedder, StateStore
from episodic.kernel.settings import DEFAULT_MODEL
from episodic.store.facade import QdrantStore
from episodic.store.rules import model_field

log = logging.getLogger(__name__)

KIND = "embedding"
KEY = "generations"
POLL_S = 2.0  # how often a process reads the document (a switch reaches every process within this)
UNKNOWN_MODEL = "unknown"


def model_key(name: str) -> str:
    """A model name compared with another: the bundled model's aliases are one model."""
    n = name.strip()
    if n.lower() in (DEFAULT_MODEL.lower(), f"sentence-transformers/{DEFAULT_MODEL}".lower()):
        return DEFAULT_MODEL.lower()
    return n


@dataclass(frozen=True, slots=True)
class Generation:
    vector: str
    model: str
    dim: int
    pieces: str = LEGACY

    @property
    def key(self) -> tuple[str, str]:
        """The model and the pieces (the dim follows the model)."""
        return model_key(self.model), self.pieces

    def same_model(self, embedder: Embedder) -> bool:
        """Whether `embedder` is this generation's model (of its dim), whatever its pieces: its query vectors
        are this generation's (a query is embedded whole)."""
        return model_key(self.model) == model_key(embedder.model_id) and self.dim == embedder.dim

    def made_by(self, embedder: Embedder) -> bool:
        return self.same_model(embedder) and same_cut(self.pieces, embedder.pieces)

    def as_doc(self) -> dict[str, Any]:
        return {"vector": self.vector, "model": self.model, "dim": self.dim, "pieces": self.pieces}

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Generation:
        try:
            pieces = doc.get("pieces")
            return cls(str(doc["vector"]), str(doc["model"]), int(doc["dim"]), str(pieces) if pieces else LEGACY)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise StoreError(f"state {KIND}/{KEY}: malformed generation {doc!r}") from e

    @classmethod
    def made(cls, vector: str, embedder: Embedder) -> Generation:
        return cls(vector, embedder.model_id, embedder.dim, embedder.pieces)


def embedder_key(embedder: Embedder) -> tuple[str, str]:
    return model_key(embedder.model_id), embedder.pieces


def _recorded(doc: dict[str, Any], state: StateStore, configured: Embedder) -> dict[str, Any]:
    """The document with the active generation's pieces recorded exactly, when they were not (`LEGACY`) and
    the configured embedder makes that generation (windows of its sizes)."""
    active = doc["active"]
    if Generation.of(active).pieces != LEGACY or configured.pieces == LEGACY:
        return doc
    doc = {**doc, "active": {**active, "pieces": configured.pieces}}
    write(state, doc)
    return doc


def read(state: StateStore) -> dict[str, Any] | None:
    return state.get(KIND, KEY)


def follow_active(store: QdrantStore, state: StateStore) -> Generation | None:
    """For a command that opens the store without a ModelSwitch (export, import): the store reads and
    writes the active generation's vector, which is returned (None: no generation recorded yet, the store
    as it opened). Opening picks a vector by name, which is not the active one after a switch until the
    old vector is dropped."""
    doc = read(state)
    if not doc or not isinstance(doc.get("active"), dict):
        return None
    active = Generation.of(doc["active"])
    if active.vector in store.dense_layout():
        store.use_dense_vector(active.vector)
    return active


def embedder_making(gen: Generation, embedder: Embedder | None) -> Embedder | None:
    """An embedder that makes `gen`'s vectors: `embedder` itself, or the same model cutting texts `gen`'s
    way (`with_pieces`, when it has it); None when `embedder` is another model (or none)."""
    if embedder is None or gen.made_by(embedder):
        return embedder
    rechunk = getattr(embedder, "with_pieces", None)
    if not gen.same_model(embedder) or rechunk is None:
        return None
    try:
        other: Embedder = rechunk(gen.pieces)
    except ValueError:
        return None
    return other if gen.made_by(other) else None


def write(state: StateStore, doc: dict[str, Any]) -> None:
    state.put(KIND, KEY, doc)
    flush = getattr(state, "flush", None)  # the Qdrant state store: make the switch durable now
    if flush is not None:
        flush()


def next_vector(layout: dict[str, int], doc: dict[str, Any] | None) -> str:
    """A vector name no generation has used: `dense_<n>` after the highest one seen."""
    names = set(layout)
    for key in ("active", "pending"):
        if doc and isinstance(doc.get(key), dict):
            names.add(str(doc[key].get("vector")))
    names.update(str(r.get("vector")) for r in (doc or {}).get("retired") or [] if isinstance(r, dict))
    n = 1 + max((int(v.rsplit("_", 1)[1]) for v in names if v.rsplit("_", 1)[-1].isdigit()), default=0)
    return f"{DENSE}_{n}"


def adopt(store: QdrantStore, state: StateStore, configured: Embedder | None) -> dict[str, Any]:
    """The document, created for a store that has none (new, or written before generations): its one dense
    vector is the active generation, made by the model its memories record (else the configured one). Its
    pieces: the configured embedder's while no memory has a vector yet, else the windows every store was
    cut into before generations (`chunking.LEGACY`)."""
    doc = read(state)
    if doc is not None:
        return doc
    layout = store.dense_layout()
    vector = DENSE if DENSE in layout else sorted(layout)[0]
    model = _recorded_model(store, vector) or (configured.model_id if configured is not None else UNKNOWN_MODEL)
    fresh = configured is not None and store.count(has_dense=True) == 0
    pieces = configured.pieces if fresh and configured is not None else LEGACY
    doc = {"active": Generation(vector, model, layout[vector], pieces).as_doc(), "pending": None, "retired": []}
    write(state, doc)
    return doc


def _recorded_model(store: QdrantStore, vector: str) -> str | None:
    field = model_field(vector)
    page, _ = store.scroll_page(None, 64, fields=(field,))
    for _, payload in page:
        if isinstance(payload.get(field), str):
            return str(payload[field])
    return None


def plan(store: QdrantStore, state: StateStore, configured: Embedder | None, *, wall: Callable[[], float]) -> dict:
    """Reconcile the document with the configured model and pieces: nothing to do when the active generation
    is the configured embedder's (a pending one for another is abandoned); resume the pending one when it
    is the configured embedder's; else start a new pending generation (a new named vector) for it.
    Sparse-only (no model) changes nothing. Returns the document as saved."""
    doc = adopt(store, state, configured)
    if configured is None:
        return doc
    active = Generation.of(doc["active"])
    pending = Generation.of(doc["pending"]) if doc.get("pending") else None
    if active.made_by(configured) or (pending is not None and pending.made_by(configured)):
        if active.made_by(configured):
            doc = _recorded(doc, state, configured)
        if active.made_by(configured) and pending is not None:
            log.info("embedding: %s is active again; abandoning the re-embed to %s", _name(active), _name(pending))
            doc = {**doc, "pending": None, "retired": [*doc.get("retired", []), _retired(pending, wall())]}
            write(state, doc)
        return doc
    if pending is not None:
        log.info(
            "embedding: re-embed to %s replaced by one to %s", _name(pending), _name(Generation.made("", configured))
        )
        doc = {**doc, "retired": [*doc.get("retired", []), _retired(pending, wall())]}
    vector = next_vector(store.dense_layout(), doc)
    store.add_dense_vector(vector, configured.dim)
    gen = Generation.made(vector, configured)
    doc = {**doc, "pending": {**gen.as_doc(), **fresh_progress(wall())}}
    write(state, doc)
    log.info("embedding: re-embedding the store from %s to %s (vector %s)", _name(active), _name(gen), vector)
    return doc


def _name(gen: Generation) -> str:
    return f"{gen.model} (pieces {gen.pieces})"


def fresh_progress(now: float) -> dict[str, Any]:
    return {"cursor": None, "done": 0, "failed": 0, "sweeps": 0, "started_at": now, "holder": None, "lease_until": 0}


def _retired(gen: Generation, now: float) -> dict[str, Any]:
    return {"vector": gen.vector, "model": gen.model, "at": now}


Loader = Callable[[Generation], Embedder | None]  # an embedder that makes the generation's vectors


class ModelSwitch:
    """This process's view of the active generation, and the embedder of its model.

    `current()` is what recall and ingestion call: the active generation and its embedder (None while that
    model is not loaded here, or cannot be: then recall answers from BM25 and ingestion writes sparse-only,
    the densify backfill adding the vectors later). It reads the state document at most every `poll_s`;
    when the active generation changed, the store is switched to its vector at once and the model is loaded
    (in the background, by `loader`) if this process does not have it."""

    def __init__(
        self,
        *,
        store: QdrantStore,
        state: StateStore,
        embedders: list[Embedder] | None = None,
        loader: Loader | None = None,
        poll_s: float = POLL_S,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.store = store
        self.on_change = on_change
        self.state = state
        self.loader = loader
        self.poll_s = poll_s
        self.monotonic = monotonic
        self._embedders: dict[tuple[str, str], Embedder] = {embedder_key(e): e for e in embedders or []}
        self._loading: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {}
        self._active: Generation | None = None
        self._read_at = float("-inf")
        self.refresh(force=True)

    @property
    def doc(self) -> dict[str, Any]:
        return self._doc

    def add(self, embedder: Embedder) -> None:
        self._embedders[embedder_key(embedder)] = embedder

    def embedder_for(self, gen: Generation, *, queries: bool = False) -> Embedder | None:
        """An embedder that makes `gen`'s vectors: the one of its exact pieces, else (pieces not recorded
        exactly, `LEGACY`) any that makes them; `queries`: any of its model and dim (see `current`)."""
        found = self._embedders.get(gen.key)
        if found is None:
            fits = gen.same_model if queries else gen.made_by
            found = next((e for e in list(self._embedders.values()) if fits(e)), None)
        return found

    def refresh(self, *, force: bool = False) -> None:
        now = self.monotonic()
        if not force and now - self._read_at < self.poll_s:
            return
        with self._lock:
            if not force and now - self._read_at < self.poll_s:
                return
            self._read_at = now
            try:
                doc = read(self.state)
            except StoreError as e:  # keep serving the generation we know
                log.warning("embedding: cannot read the generations document (%s); keeping %s", e, self._active)
                return
            if doc is None:
                return
            changed = doc != self._doc
            self._doc = doc
            active = Generation.of(doc["active"])
            if active != self._active:
                self.store.use_dense_vector(active.vector)
                if self._active is not None:
                    log.info("embedding: switched to %s (vector %s)", _name(active), active.vector)
                self._active = active
        if changed and self.on_change is not None:
            self.on_change(doc)
        self._ensure_loaded(active)

    def _ensure_loaded(self, gen: Generation) -> None:
        key = gen.key
        if key in self._loading or self.loader is None or gen.model == UNKNOWN_MODEL or self.embedder_for(gen):
            return
        self._loading.add(key)
        loader = self.loader

        def load() -> None:
            try:
                embedder = loader(gen)
            except Exception as e:
                log.warning("embedding: cannot load %s here (%s); recall uses BM25 until it can", _name(gen), e)
                return
            if embedder is not None and not gen.made_by(embedder):
                log.warning(
                    "embedding: %s was asked for and %s loaded; recall uses BM25",
                    _name(gen),
                    _name(Generation.made(gen.vector, embedder)),
                )
            elif embedder is not None:
                self.add(embedder)

        threading.Thread(target=load, name=f"load-{key[0][-24:]}", daemon=True).start()

    def current(self, *, queries: bool = False) -> tuple[Generation, Embedder | None]:
        """The active generation and an embedder that makes its vectors (None: not loaded here). `queries`:
        for query vectors only, which a query embeds whole whatever the pieces: any embedder of the
        generation's model and dim serves while one of its exact cut is loading, or when its pieces key
        cannot be made here (a newer key during a rolling upgrade)."""
        self.refresh()
        active = self._active
        if active is None:  # pragma: no cover - refresh(force=True) at construction sets it or raised
            raise StoreError("no active embedding generation")
        return active, self.embedder_for(active, queries=queries)

    def pending(self) -> Generation | None:
        self.refresh()
        pending = self._doc.get("pending")
        return Generation.of(pending) if pending else None
