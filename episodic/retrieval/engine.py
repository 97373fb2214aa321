"""RecallEngine: a validated request -> scored hits from the store, over the ports (SPEC §7, §10).

- Workspace isolation: every store query is built from a `ScopeFilter` carrying the request's
  workspace; as a second line of defence, any hit whose payload names another workspace is dropped
  (and logged), so a buggy adapter cannot leak across workspaces through this engine.
- Scores come from the store: dense = max-sim cosine × importance, sparse = BM25 × importance,
  hybrid = fused legs × importance (fusion from settings, at least 100 candidates per leg).
- Sparse-only (no embedder, or the query embedding fails): dense and hybrid requests are answered from
  the sparse leg with `degraded=True`.
- Dense mode while memories in the scope still wait for their dense vector (written BM25-first, or
  quarantined by the backfill): the dense leg cannot see them, so the answer says `degraded=True`. Hybrid
  is not degraded by them: its BM25 legs find them.
- `cosine` on each hit is the query-memory cosine (max over the point's dense chunks), for
  `memory.referenced`; None when the point or the service has no dense vector, and in sparse mode (which
  computes no query vector, so that BM25 recalls stay cheap).
- Filters (SPEC §11: since/until on ts, entry types, minimum severity, run, excluded run, and crew_id in
  scope `own`) ride on the `ScopeFilter`, so the store applies them inside every leg of the query (and to
  the walk): a filtered recall returns k hits whenever k memories pass, never a filtered top-k.
- "High-value" crew entries (scope crew_shared) are those with importance_score >=
  `settings.high_value_threshold` (default 0.6).
- `walk_depth=1`: one hop along `similar` and `supports` edges, in both directions (edges point new ->
  old; the inverse is implied at read time). A neighbour scores its parent's score × the edge weight,
  is fetched through the request's scope filter (so the walk never leaves the scope or the workspace),
  is marked `via="similar"|"supports"`, and competes with the direct hits for the k places (a direct hit
  wins a tie).
- `adjacent` (request, default `settings.recall_adjacent`, off): each direct hit brings in its previous and
  next memory in its run (the `previous` / `next` edges of `episodic.indexing.context`), fetched through the scope
  filter, scored `adjacent_weight` (0.5) × the hit's score (so below it), marked `via="adjacent"`; they
  compete for the k places. Off by default: it cost LongMemEval 2 to 12 points of R@5 (eval/README.md).
- A hit carries `context`: the run context it was indexed with (`episodic.indexing.context`), or null.
- A hit says why it stands where it does (`placed`): "direct", "walk", "adjacent" or "newer" (`expand`).
- Model changes (episodic.embedding.generations): with a `ModelSwitch`, the query is embedded by the active
  generation's model and the store query names that generation's vector (its dense legs, the
  context-re-scored one included), so one ranking never mixes two models; while that model is not loaded
  here, recall answers from BM25 (`degraded=True`).

Size: about 450 lines: the request's whole path (scope, legs, hits, walk) reads in one place.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from episodic.domain.chunking import mode_of
from episodic.domain.scoring import parse_time
from episodic.domain.supersession import SUPERSEDED_BY, SUPERSEDES
from episodic.domain.surprise import key_moment, surprise_of
from episodic.domain.timespan import spans
from episodic.indexing.context import shown_context
from episodic.indexing.folding import AGENTS, folded_ids
from episodic.kernel.errors import EpisodicError, StoreError
from episodic.kernel.ports import (
    SEVERITIES,
    Embedder,
    Fusion,
    MemoryStore,
    RecallFilter,
    ScopeFilter,
    SparseVec,
    StoredHit,
)
from episodic.kernel.settings import FUSION_BY_CHUNK_MODE, Settings
from episodic.retrieval import expand as expand
from episodic.retrieval.common import CommonTerms
from episodic.store.sparse import Bm25Encoder
from episodic_client.models import RecallRequest
from episodic_client.timestamps import parse_timestamp

if TYPE_CHECKING:
    from episodic.embedding.generations import ModelSwitch

log = logging.getLogger(__name__)

MIN_PREFETCH = 100
# (query embedder, the vector its queries run on, the hybrid fusion, the query vector): `RecallEngine.query_for`
QueryModel = tuple[Embedder | None, str | None, Fusion, np.ndarray | None]


def _now() -> datetime:
    return datetime.now(UTC)


def fusion_from_settings(settings: Settings) -> Fusion:
    """The hybrid fusion configured in settings; `rrf_equal` is the seed's equal-weight RRF, k=60."""
    prefetch = max(MIN_PREFETCH, settings.prefetch_limit)
    if settings.fusion == "rrf_equal":
        return Fusion(method="rrf", k=60, dense_weight=1.0, sparse_weight=1.0, prefetch_limit=prefetch)
    return Fusion(
        method="dbsf" if settings.fusion == "dbsf" else "rrf",
        k=settings.rrf_k,
        dense_weight=settings.dense_weight,
        sparse_weight=settings.rrf_sparse_weight,
        prefetch_limit=prefetch,
        both_weight=settings.rrf_both_weight,
        head=settings.head,
        head_weight=settings.rrf_head_weight,
        context_weight=0.0 if settings.context.off else settings.rrf_context_weight,
        both_by_context=settings.rrf_both_context and not settings.context.off,
        piece_penalty=settings.rrf_piece_penalty,
        lexical_full=settings.lexical_full,
        lexical_floor=settings.rrf_lexical_floor,
        time_weight=settings.rrf_time_weight,
        run_weight=settings.rrf_run_weight,
        run_pool=settings.rrf_run_pool,
        run_depth=settings.rrf_run_depth,
        neighbour_weight=settings.rrf_neighbour_weight,
        neighbour_words=settings.rrf_neighbour_words,
    )


def fusions_by_mode(settings: Settings) -> dict[str, Fusion]:
    """The fusion for each chunk mode, when its weights follow the mode (`rrf_dense_weight`, `rrf_head` or
    `rrf_lexical_full` unset); empty when all are set (one fusion for any cut)."""
    if None not in (settings.rrf_dense_weight, settings.rrf_head, settings.rrf_lexical_full):
        return {}
    return {m: fusion_from_settings(settings.model_copy(update={"chunk_mode": m})) for m in FUSION_BY_CHUNK_MODE}


def timed(fusion: Fusion, query: str, now: datetime) -> Fusion:
    """`fusion` with the spans of time `query` names (`episodic.domain.timespan`; relative ones from `now`) as its
    `when`, for the time legs; unchanged when they are off or the query names no time."""
    if fusion.time_weight <= 0:
        return fusion
    found = spans(query, now)
    if not found:
        return fusion
    return replace(fusion, when=tuple((_rfc3339(s.start), _rfc3339(s.end)) for s in found))


def asked_at(req: RecallRequest, clock: Callable[[], datetime]) -> datetime:
    """When `req` is asked: its `as_of` (validated RFC 3339 with an offset), else the clock's now; the instant
    the query's relative times ("two weeks ago") are read from."""
    return parse_timestamp(req.as_of) if req.as_of is not None else clock()


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def recall_filter(req: RecallRequest) -> RecallFilter:
    """The request's filters (SPEC §11), for the store query. In scope `own`, `crew_id` narrows to the
    agent's memories of that crew (in `crew_shared` it is the scope itself)."""
    return RecallFilter(
        since=req.since,
        until=req.until,
        entry_types=tuple(dict.fromkeys(req.entry_types or ())),
        severities=SEVERITIES[SEVERITIES.index(req.min_severity) :] if req.min_severity else (),
        run_id=req.run_filter,
        exclude_run_id=req.exclude_run_id,
        crew_id=req.crew_id if req.scope == "own" else None,
    )


def age_seconds(ts: Any, now: datetime) -> float:
    """now - ts in seconds, never negative (0 for future or unparseable timestamps)."""
    dt = parse_time(ts)
    if dt is None:
        return 0.0
    return max(0.0, (now - dt).total_seconds())


def max_sim(query: np.ndarray | None, dense: list[list[float]] | None) -> float | None:
    """Max over the point's chunk vectors of the cosine with the (unit) query vector."""
    if query is None or not dense:
        return None
    m = np.asarray(dense, dtype=np.float32)
    if m.ndim == 1:
        m = m.reshape(1, -1)
    if m.shape[1] != query.shape[0]:
        return None
    norms = np.linalg.norm(m, axis=1)
    norms[norms == 0] = 1.0
    qn = float(np.linalg.norm(query)) or 1.0
    return float(np.max((m @ query) / (norms * qn)))


@dataclass(slots=True)
class RecallHit:
    entry_id: str
    score: float
    age_seconds: float
    summary: str
    entry_type: str
    severity: str
    agent_id: str | None
    crew_id: str | None
    ts: str
    payload: dict[str, Any]
    via: str = "direct"
    placed: str = "direct"  # why it stands where it does (expand.PLACED, expand.newer_first)
    aliases: list[str] = field(default_factory=list)
    occurrences: int = 1
    folded: list[str] = field(default_factory=list)  # entry ids of near duplicates folded into it
    supersedes: list[str] = field(default_factory=list)  # older memories whose fact this one changed
    superseded_by: str | None = None  # the newer memory that changed this one's fact
    agents: list[str] = field(default_factory=list)  # the agents it stands for when folded from several
    cosine: float | None = None
    point_id: str = ""
    workspace_id: str = ""
    importance: float | None = None
    context: list[dict[str, str]] | None = None
    relations: list[dict[str, Any]] = field(default_factory=list)
    surprise: float | None = None  # seed 003: 1 - best cosine to what its agent held when it was linked
    similar_left_out: int = 0  # render: hits left out because they say what this one says (retrieval.repeats)
    mean: np.ndarray | None = None  # its pieces' normalised mean vector, when the store returned its rows

    @property
    def key_moment(self) -> bool:
        return key_moment(self.surprise)

    def public(self) -> dict[str, Any]:
        """The fields of a hit in the HTTP response (SPEC §7)."""
        return {
            "entry_id": self.entry_id,
            "score": self.score,
            "age_seconds": self.age_seconds,
            "summary": self.summary,
            "entry_type": self.entry_type,
            "severity": self.severity,
            "agent_id": self.agent_id,
            "crew_id": self.crew_id,
            "ts": self.ts,
            "payload": self.payload,
            "via": self.via,
            "placed": self.placed,
            "aliases": self.aliases,
            "context": self.context,
            "occurrences": self.occurrences,
            "folded": self.folded,
            "agents": self.agents,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "surprise": self.surprise,
            "key_moment": self.key_moment,
            "similar_left_out": self.similar_left_out,
        }

    def referenced(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "score": self.score, "cosine": self.cosine}


@dataclass(slots=True)
class RecallResult:
    mode: str
    degraded: bool
    hits: list[RecallHit]
    scope: str = "own"
    workspace_id: str = ""
    at: datetime = field(default_factory=_now)

    def referenced_event(self, hits: list[RecallHit] | None = None) -> dict[str, Any]:
        """The `memory.referenced` record for `hits` (default: all hits), with a fresh `event_id`."""
        chosen = self.hits if hits is None else hits
        return {
            "event_id": uuid.uuid4().hex,  # the importance agent counts a re-delivered event once
            "workspace_id": self.workspace_id,
            "scope": self.scope,
            "mode": self.mode,
            "at": self.at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "hits": [h.referenced() for h in chosen],
        }


class RecallEngine:
    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder | None,
        bm25: Bm25Encoder,
        fusion: Fusion | None = None,
        high_value: float = 0.6,
        clock: Callable[[], datetime] = _now,
        switch: ModelSwitch | None = None,
        adjacent: bool = False,
        adjacent_weight: float = 0.5,
        fusion_by_mode: Mapping[str, Fusion] | None = None,
        newer_first: bool = True,
        dense_query_common: float = 0.0,
    ) -> None:
        self.store = store
        self.embedder = embedder
        # With a switch, the query model is the active embedding generation's (episodic.embedding.generations), and
        # every query names the vector it was embedded for.
        self.switch = switch
        self.bm25 = bm25
        self.fusion = fusion or Fusion(prefetch_limit=MIN_PREFETCH)
        # With a switch: the fusion of the chunk mode the active generation was cut in (the weights that
        # follow the mode were chosen per cut), e.g. windows still ranked while a re-cut pass runs.
        self.fusion_by_mode = dict(fusion_by_mode or {})
        self.high_value = high_value
        self.clock = clock
        self.adjacent = adjacent
        self.adjacent_weight = adjacent_weight
        self.newer_first = newer_first  # a superseded hit gets its newer memory right above it
        # the hybrid's dense query leaves out the words more than this share of the workspace's memories hold
        self.dense_query_common = dense_query_common
        self.common = CommonTerms(store, bm25)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        store: MemoryStore,
        embedder: Embedder | None,
        bm25: Bm25Encoder,
        switch: ModelSwitch | None = None,
    ) -> RecallEngine:
        return cls(
            store=store,
            embedder=embedder,
            bm25=bm25,
            fusion=fusion_from_settings(settings),
            high_value=settings.high_value_threshold,
            switch=switch,
            adjacent=settings.recall_adjacent,
            adjacent_weight=settings.adjacent_weight,
            newer_first=settings.supersede_enabled,
            fusion_by_mode=fusions_by_mode(settings),
            dense_query_common=settings.dense_query_common,
        )

    @property
    def sparse_only(self) -> bool:
        return self._query_model()[0] is None

    def _query_model(self) -> tuple[Embedder | None, str | None, Fusion]:
        """The query embedder, the vector its queries run on (None: the store's active one) and the hybrid
        fusion for that generation's cut (the configured one without a switch): read once per request, so a
        switch meanwhile cannot pair one generation's vector with the other's fusion."""
        if self.switch is None:
            return self.embedder, None, self.fusion
        gen, embedder = self.switch.current(queries=True)
        mode = mode_of(gen.pieces) if self.fusion_by_mode else None
        return embedder, gen.vector, (self.fusion_by_mode.get(mode, self.fusion) if mode else self.fusion)

    def query_for(self, req: RecallRequest) -> QueryModel:
        """The query embedder, its vector name, the fusion and the query vector (None in sparse mode, or with
        no embedder, or when embedding failed) that `recall` uses for `req`, read once."""
        embedder, using, fusion = self._query_model()
        qvec = self._embed_query(self.dense_query(req), embedder) if req.mode != "sparse" else None
        return embedder, using, fusion, qvec

    def dense_query(self, req: RecallRequest) -> str:
        """The text the query vector is made of: in hybrid mode the query without the words most of the
        workspace's memories hold (the asking agent's, when it names one: `episodic.retrieval.common`; the BM25
        legs read the whole query), else the query."""
        if req.mode != "hybrid" or self.dense_query_common <= 0:
            return req.query
        return self.common.dense_query(req.query, req.workspace_id, self.dense_query_common, req.agent_id, req.crew_id)

    def scope_filter(self, req: RecallRequest) -> ScopeFilter:
        return ScopeFilter(
            workspace_id=req.workspace_id,
            scope=req.scope,
            agent_id=req.agent_id,
            crew_id=req.crew_id,
            high_value=self.high_value,
            filters=recall_filter(req),
        )

    def _embed_query(self, text: str, embedder: Embedder | None) -> np.ndarray | None:
        if embedder is None:
            return None
        try:
            return np.asarray(embedder.embed_query(text), dtype=np.float32)
        except Exception:  # a failing model degrades to the sparse leg, never a 5xx
            log.exception("query embedding failed; answering from the sparse leg")
            return None

    def recall(self, req: RecallRequest, *, model: QueryModel | None = None) -> RecallResult:
        """Run one recall. Raises ValueError for an invalid scope, StoreUnavailable/StoreError on store failure.
        `model`: the query's model, fusion and vector when the caller made them already (`query_for`: the
        explorer's why runs the legs with the same ones, embedding the query once)."""
        now = self.clock()
        scope = self.scope_filter(req)
        # Sparse mode needs no query vector: skipping it keeps BM25 recalls cheap (their hits carry
        # cosine null in memory.referenced).
        _, using, fusion, qvec = model if model is not None else self.query_for(req)
        degraded = req.mode != "sparse" and qvec is None
        # Ask for the candidates' dense vectors only where the query cosine can be computed.
        with_dense = qvec is not None
        stored = self._query(req, scope, qvec, with_dense, using, fusion)
        if req.mode == "dense" and not degraded:
            # Memories written BM25-first (or quarantined) are invisible to the dense leg: say so rather
            # than leave a silent gap. Hybrid finds them through its BM25 legs.
            degraded = self._guarded("count", lambda: self.store.count_without_dense(scope, using=using)) > 0
        hits: list[RecallHit] = []
        for s in stored:
            hit = self._to_hit(s, qvec, now)
            if hit.workspace_id != req.workspace_id:
                log.error(
                    "store returned a memory of workspace %r for a query on %r; dropped",
                    hit.workspace_id,
                    req.workspace_id,
                )
                continue
            hits.append(hit)
        hits = hits[: req.k]
        if (self.adjacent if req.adjacent is None else req.adjacent) and hits:
            near = expand.adjacent(hits, self.adjacent_weight)
            hits = self._bring_in(hits, near, scope, qvec, now, req.k, using)
        if req.walk_depth == 1 and hits:
            hits = self._walk(hits, scope, qvec, now, req.k, using)
        if self.newer_first and any(h.superseded_by for h in hits):
            hits = self._newer_first(hits, scope, qvec, now, req.k, using)
        return RecallResult(
            mode=req.mode,
            degraded=degraded,
            hits=hits,
            scope=req.scope,
            workspace_id=req.workspace_id,
            at=now,
        )

    def _query(
        self,
        req: RecallRequest,
        scope: ScopeFilter,
        qvec: np.ndarray | None,
        with_dense: bool,
        using: str | None = None,
        fusion: Fusion | None = None,
    ) -> list[StoredHit]:
        sparse: SparseVec | None = None
        # The generation the query vector was made for (only with a switch: other stores take no `using`).
        named: dict[str, Any] = (
            {"with_dense": with_dense} if using is None else {"with_dense": with_dense, "using": using}
        )
        try:
            if req.mode == "dense" and qvec is not None:
                return self.store.query_dense(qvec.tolist(), scope, req.k, **named)
            sparse = self.bm25.query(req.query)
            if req.mode == "hybrid" and qvec is not None:
                # With no searchable term (only stop words) the BM25 legs are left out and the hybrid's dense
                # leg alone ranks, the piece prior included: the same order as that leg in any other query.
                fused = timed(fusion or self.fusion, req.query, asked_at(req, self.clock))
                return self.store.query_hybrid(qvec.tolist(), sparse, scope, req.k, fused, **named)
            if not sparse.indices:  # no searchable term (e.g. only stop words): nothing matches
                return []
            return self.store.query_sparse(sparse, scope, req.k, with_dense=with_dense)
        except EpisodicError:
            raise
        except Exception as e:  # adapters should wrap; never let a raw driver error become a 500
            raise StoreError(f"store query failed: {type(e).__name__}: {e}") from e

    @staticmethod
    def _guarded(what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except EpisodicError:
            raise
        except Exception as e:  # adapters should wrap; never let a raw driver error become a 500
            raise StoreError(f"store {what} failed: {type(e).__name__}: {e}") from e

    def _walk(
        self,
        hits: list[RecallHit],
        scope: ScopeFilter,
        qvec: np.ndarray | None,
        now: datetime,
        k: int,
        using: str | None = None,
    ) -> list[RecallHit]:
        ids = [h.entry_id for h in hits]
        relations = self._guarded("relation lookup", lambda: self.store.relations_of(scope.workspace_id, ids))
        return self._bring_in(hits, expand.walked(hits, relations), scope, qvec, now, k, using)

    def _newer_first(
        self,
        hits: list[RecallHit],
        scope: ScopeFilter,
        qvec: np.ndarray | None,
        now: datetime,
        k: int,
        using: str | None = None,
    ) -> list[RecallHit]:
        """Each superseded hit's newer memory right above it (expand.newer_first), fetched through the scope
        when it is not a hit."""
        have = {h.entry_id for h in hits}
        wanted = sorted({h.superseded_by for h in hits if h.superseded_by and h.superseded_by not in have})
        found: list[RecallHit] = []
        if wanted:
            stored = self._guarded(
                "supersession lookup",
                lambda: self.store.find_entries(scope, wanted, with_dense=qvec is not None, using=using),
            )
            found = [h for s in stored if (h := self._to_hit(s, qvec, now)).workspace_id == scope.workspace_id]
        return expand.newer_first(hits, found, k)

    def _bring_in(
        self,
        hits: list[RecallHit],
        near: expand.Near,
        scope: ScopeFilter,
        qvec: np.ndarray | None,
        now: datetime,
        k: int,
        using: str | None = None,
    ) -> list[RecallHit]:
        """The direct hits and the memories `near` them (fetched through the scope), the top k; their cosine
        against the rows of the vector the query ran on (`using`)."""
        if not near:
            return hits
        found: list[RecallHit] = []
        for stored in self.store.find_entries(scope, sorted(near), with_dense=qvec is not None, using=using):
            hit = self._to_hit(stored, qvec, now)
            if hit.workspace_id == scope.workspace_id and hit.entry_id in near:
                hit.score, hit.via = near[hit.entry_id]
                hit.placed = expand.PLACED[hit.via]
                found.append(hit)
        return expand.merged(hits, found, k)

    def _to_hit(self, s: StoredHit, qvec: np.ndarray | None, now: datetime) -> RecallHit:
        """A stored point as a hit. Stored data is not trusted to be well-formed (hand-written points, older
        versions): every field is coerced to its type or replaced by its empty value, never an error."""
        p = s.payload if isinstance(s.payload, dict) else {}
        stored_aliases = p.get("aliases")
        aliases = [str(a) for a in stored_aliases if isinstance(a, str)] if isinstance(stored_aliases, list) else []
        body = p.get("payload")
        score = float(s.score) if isinstance(s.score, int | float) and math.isfinite(s.score) else 0.0
        return RecallHit(
            entry_id=_text(p.get("entry_id")),
            score=score,
            age_seconds=age_seconds(p.get("ts"), now),
            summary=_text(p.get("summary")),
            entry_type=_text(p.get("entry_type")),
            severity=_text(p.get("severity")),
            agent_id=_text_or_none(p.get("agent_id")),
            crew_id=_text_or_none(p.get("crew_id")),
            ts=_text(p.get("ts")),
            payload=body if isinstance(body, dict) else {},
            via="direct",
            aliases=aliases,
            occurrences=_occurrences(p.get("occurrences"), len(aliases)),
            folded=folded_ids(p),
            supersedes=[
                str(e.get("dst"))
                for e in p.get("relations") or []
                if isinstance(e, dict) and e.get("relation") == SUPERSEDES
            ]
            if isinstance(p.get("relations"), list)
            else [],
            superseded_by=_text_or_none(p.get(SUPERSEDED_BY)),
            agents=[str(a) for a in p.get(AGENTS) or [] if isinstance(a, str)]
            if isinstance(p.get(AGENTS), list)
            else [],
            cosine=max_sim(qvec, s.dense),
            point_id=s.point_id,
            workspace_id=_text(p.get("workspace_id")),
            importance=p.get("importance_score") if isinstance(p.get("importance_score"), int | float) else None,
            context=shown_context(p.get("context")),
            relations=[e for e in p.get("relations") or [] if isinstance(e, dict)],
            surprise=surprise_of(p),
            mean=_mean(s.dense),
        )


def _mean(dense: list[list[float]] | None) -> np.ndarray | None:
    """A point's pieces as one unit vector (None without rows)."""
    if not dense:
        return None
    m = np.asarray(dense, dtype=np.float32)
    m = m.reshape(1, -1) if m.ndim == 1 else m
    v = m.mean(axis=0)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def _text(value: Any) -> str:
    """A stored scalar as text ("" for null, a list or an object)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float) and not (isinstance(value, float) and not math.isfinite(value)):
        return str(value)
    return ""


def _text_or_none(value: Any) -> str | None:
    return _text(value) or None


def _occurrences(value: Any, n_aliases: int) -> int:
    """How many times the memory was written: the stored count, at least the entry and its kept aliases."""
    floor = 1 + n_aliases
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return floor
    return max(floor, int(value))
