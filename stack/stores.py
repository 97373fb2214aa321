"""The store the settings ask for: `open_store(settings, dim=...)`, and `open_state(store)` beside it.

An `EdgeStore` (Qdrant Edge, on disk under the data directory) when `EPISODIC_QDRANT_URL` is unset, else a
`QdrantServerStore` against that server. Either way the collection exists and has its payload indexes
when it returns. The choice lives here, in the composition root, so that the shared store
(`episodic.store`) imports no engine.
"""

from __future__ import annotations

from episodic.client_options import qdrant_options
from episodic.ports import MemoryStore, StateStore
from episodic.settings import Settings
from episodic.state import QdrantStateStore
from episodic.store import QdrantStore


def open_store(settings: Settings, *, dim: int) -> MemoryStore:
    """The configured store with its collection ensured for `dim`-dimensional chunk vectors."""
    store: MemoryStore
    if settings.qdrant_url:
        from episodic.store_qdrant import QdrantServerStore

        store = QdrantServerStore(
            settings.qdrant_url,
            options=qdrant_options(settings),  # the API key and TLS (episodic.client_options)
            collection=settings.collection,
            prefetch_limit=settings.prefetch_limit,
        )
    else:
        from episodic.store_edge import EdgeStore

        store = EdgeStore(
            settings.data_dir / "qdrant-edge" / settings.collection,
            prefetch_limit=settings.prefetch_limit,
        )
    try:
        store.ensure_collection(dim)
    except BaseException:
        store.close()
        raise
    return store


def open_state(store: MemoryStore) -> StateStore:
    """The agents' and the lifecycle's state store beside `store`'s collection (same engine), ensured."""
    if not isinstance(store, QdrantStore):
        raise TypeError(f"no state store for a {type(store).__name__}")
    return QdrantStateStore.beside(store)
