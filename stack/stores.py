"""The store the settings ask for: `open_store(settings, dim=...)`, and `open_state(store)` beside it.

An `EdgeStore` (Qdrant Edge, on disk under the data directory) when `EPISODIC_QDRANT_URL` is unset, else a
`QdrantServerStore` against that server. Either way the collection exists and has its payload indexes
when it returns. The choice lives here, in the composition root, so that the shared store
(`episodic.store.facade`) imports no engine.
"""

from __future__ import annotations

from episodic.kernel.ports import DENSE, MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import qdrant_options
from episodic.store.facade import QdrantStore
from episodic.store.state import QdrantStateStore


def open_store(settings: Settings, *, dim: int, background_index: bool = False) -> MemoryStore:
    """The configured store with its collection ensured for `dim`-dimensional chunk vectors. `background_index`
    (the long-running stack): an embedded store builds its dense index in a worker process as it grows
    (`EPISODIC_EDGE_INDEX_AFTER`); one-off commands leave it alone."""
    store: MemoryStore
    if settings.qdrant_url:
        from episodic.store.qdrant_server import QdrantServerStore

        store = QdrantServerStore(
            settings.qdrant_url,
            options=qdrant_options(settings),  # the API key and TLS (episodic.kernel.transport_security)
            collection=settings.collection,
            prefetch_limit=settings.prefetch_limit,
        )
    else:
        from episodic.store.edge import EdgeStore

        store = EdgeStore(
            settings.data_dir / "qdrant-edge" / settings.collection,
            prefetch_limit=settings.prefetch_limit,
            index_after=settings.edge_index_after if background_index else 0,  # built in a worker, swapped in
            index_threads=settings.edge_index_threads,
        )
    try:
        ensure_existing(store, dim)
    except BaseException:
        store.close()
        raise
    return store


def ensure_existing(store: MemoryStore, dim: int) -> None:
    """A new collection for `dim`; an existing one with the layout it has (its vectors may be another model's,
    or several models' during a re-embed: `stack.embedding.open_switch` then picks the active one)."""
    layout = store.dense_layout() if isinstance(store, QdrantStore) else {}
    if not layout or not isinstance(store, QdrantStore):
        store.ensure_collection(dim)
        return
    vector = DENSE if DENSE in layout else sorted(layout)[0]
    store.ensure_collection(layout[vector], vector=vector)


def open_state(store: MemoryStore) -> StateStore:
    """The agents' and the lifecycle's state store beside `store`'s collection (same engine), ensured."""
    if not isinstance(store, QdrantStore):
        raise TypeError(f"no state store for a {type(store).__name__}")
    return QdrantStateStore.beside(store)
