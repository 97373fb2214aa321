"""`QdrantStateStore`: the `StateStore` port on the same engine as the memories (SPEC §6: relations,
snapshots and the agents' state are stored so that a restart loses nothing).

Documents live in a collection of their own beside the memories (`<collection>_state`: another shard
directory on Qdrant Edge, another collection on a server), so memory counts, scrolls and queries never
see them. A document is one point: id uuid5(kind, key), payload = the document plus `_kind` and `_key`,
and no vector (the layout has the memories' vectors, which the state points leave empty, so both
engines take it as it is). `_kind`, `workspace_id`, `day` and `absorbed_by` are indexed; other `where`
fields are matched by the engine's scan, fine for the small kinds this holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryPoint, SparseVec, StateStore
from episodic.store.facade import SCROLL_PAGE, Engine, QdrantStore
from episodic.store.query import Filter, Match
from episodic.store.rules import IndexKind

STATE_NAMESPACE = uuid.UUID("0b7c2f0e-5a3d-5d1b-9a64-8d2e4c1f7a90")
# `day`: the UTC day of a dated document (the reference ledger is pruned day by day)
STATE_INDEXES: dict[str, IndexKind] = {
    "_kind": "keyword",
    "_key": "keyword",
    "workspace_id": "keyword",
    "day": "keyword",
    "absorbed_by": "keyword",  # the memory that absorbed an id (episodic.indexing.absorbed): a forget reads them
}
STATE_DIM = 1  # the layout's dense size; state points carry no dense vector
_EMPTY = SparseVec([], [])


def state_point_id(kind: str, key: str) -> str:
    return str(uuid.uuid5(STATE_NAMESPACE, f"{kind}\x00{key}"))


def _check(kind: str, key: str, doc: Any) -> None:
    if not kind or not isinstance(kind, str):
        raise StoreError("state: kind must be a non-empty string")
    if not isinstance(key, str):
        raise StoreError(f"state {kind}: key must be a string, got {type(key).__name__}")
    if not isinstance(doc, dict):
        raise StoreError(f"state {kind}/{key}: a document must be a JSON object, got {type(doc).__name__}")
    bad = [k for k in doc if not isinstance(k, str) or k.startswith("_")]
    if bad:
        raise StoreError(f"state {kind}/{key}: field names may not start with '_' ({bad[0]!r})")


class QdrantStateStore(StateStore):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def beside(cls, store: QdrantStore) -> QdrantStateStore:
        """The state store next to `store`'s collection (`<collection>_state`), created if missing."""
        state = cls(store.engine.sibling("state"))
        state.ensure()
        return state

    def ensure(self) -> None:
        self.engine.ensure(STATE_DIM, STATE_INDEXES)

    def _filter(self, kind: str, where: dict[str, str] | None) -> Filter:
        conds = [Match("_kind", kind)]
        for field, value in (where or {}).items():
            if not isinstance(value, str):
                raise StoreError(f"state {kind}: where[{field!r}] must be a string, got {type(value).__name__}")
            conds.append(Match(field, value))
        return Filter(must=tuple(conds))

    def put_many(self, kind: str, docs: dict[str, dict[str, Any]]) -> None:
        points = []
        for key, doc in docs.items():
            _check(kind, key, doc)
            points.append(
                MemoryPoint(
                    point_id=state_point_id(kind, key), sparse=_EMPTY, payload={**doc, "_kind": kind, "_key": key}
                )
            )
        if points:
            self.engine.upsert(points)

    def get_many(self, kind: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        if not keys:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for r in self.engine.retrieve([state_point_id(kind, k) for k in dict.fromkeys(keys)]):
            payload = dict(r.payload or {})
            if payload.pop("_kind", None) != kind:
                continue
            out[str(payload.pop("_key"))] = payload
        return out

    def delete(self, kind: str, keys: list[str]) -> None:
        if keys:
            self.engine.delete([state_point_id(kind, k) for k in dict.fromkeys(keys)])

    def scan(
        self, kind: str, *, where: dict[str, str] | None = None, limit: int | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        flt = self._filter(kind, where)
        offset: Any = None
        seen = 0
        while True:
            page = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - seen)
            if page <= 0:
                return
            records, offset = self.engine.scroll(flt, page, offset, False)
            for r in records:
                payload = dict(r.payload or {})
                payload.pop("_kind", None)
                yield str(payload.pop("_key")), payload
            seen += len(records)
            if offset is None or not records:
                return

    def count(self, kind: str, *, where: dict[str, str] | None = None) -> int:
        return self.engine.count(self._filter(kind, where))

    def flush(self) -> None:
        self.engine.flush()

    def close(self) -> None:
        self.engine.close()
