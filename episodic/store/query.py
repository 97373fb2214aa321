"""The store's filters and queries as plain values, with no engine behind them (pure, no IO).

`episodic.store.facade.QdrantStore` builds every filter, prefetch leg, fusion and score formula as these values,
and an engine backend lowers them into its own library's types with `Lowering` (it supplies the
constructors, a `Vocabulary`). Both engines (qdrant-edge's shard, qdrant-client) speak Qdrant's query
model, so one small tree describes any query:

    Query(prefetch=Fused(legs=(DenseLeg, SparseLeg, ...)), filter=Filter(...), score=TimesImportance())

The rules themselves live here, once: who may see what (`scope_filter`), the hybrid legs of a `Fusion`
(`hybrid_prefetch`), BM25's IDF over the request's workspace (`SparseLeg.idf`), and the importance
multiplier with its neutral default (`TimesImportance`).

Size: a little over 400 lines: the whole query vocabulary, its rules and its one lowering stay together, so
the two engines cannot lower the same value differently.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from episodic.domain.folding import ACROSS, FOLD_ACROSS, FOLDED_INTO
from episodic.kernel.ports import CONTEXT, DENSE, SPARSE, Fusion, RecallFilter, ScopeFilter, Selection, SparseVec
from episodic.store.rules import has_graph, pieces_field

# A point without `importance_score` (never written by the indexer, but possible in hand-made data)
# ranks as an info-level routine memory (SPEC §10 base table), not as the most important one.
DEFAULT_IMPORTANCE = 0.5

# -- filters ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """Payload `key` equals `value` (a keyword; for an array field, any element equals it)."""

    key: str
    value: str


@dataclass(frozen=True, slots=True)
class MatchAny:
    """Payload `key` equals one of `values` (for an array field: any element equals one of them)."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Payload `key` (a number) is >= `gte`."""

    key: str
    gte: float


@dataclass(frozen=True, slots=True)
class DatetimeRange:
    """Payload `key` (RFC 3339 text under a datetime index) within the bounds that are given."""

    key: str
    gte: str | None = None
    gt: str | None = None
    lte: str | None = None
    lt: str | None = None


@dataclass(frozen=True, slots=True)
class HasDense:
    """The point has its dense vector.

    Not `has_dense == true` on the payload: qdrant-edge-py turns MatchValue(True) into the integer 1,
    which never matches a JSON boolean, so a bool match cannot be expressed there. The vector itself is
    the truth anyway, so both engines ask for the vector. `using`: which named dense vector (generation)."""

    using: str = DENSE


@dataclass(frozen=True, slots=True)
class Filter:
    """All of `must`, at least one of `should` (when given), none of `must_not`."""

    must: tuple[Condition, ...] = ()
    should: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class IsEmpty:
    """The payload field `key` is missing, null or an empty array (a memory written before the field was)."""

    key: str


@dataclass(frozen=True, slots=True)
class HasId:
    """The point is one of `ids`."""

    ids: tuple[str, ...]


Condition = Match | MatchAny | AtLeast | DatetimeRange | HasDense | IsEmpty | HasId | Filter


def workspace(workspace_id: str) -> Match:
    return Match("workspace_id", workspace_id)


def in_workspace(workspace_id: str, *conditions: Condition) -> Filter:
    """The workspace's points that meet every one of `conditions`."""
    return Filter(must=(workspace(workspace_id), *conditions))


def scope_filter(scope: ScopeFilter) -> Filter:
    """Who may see what (`who_filter`), narrowed by the request's filters (`scope.filters`)."""
    return narrowed(who_filter(scope), scope.filters)


def who_filter(scope: ScopeFilter) -> Filter:
    """Workspace always; `own`: the agent's memories; `crew_shared`: the agent's own memories (whatever
    their crew, none included) and the crew's high-value ones (SPEC §7: own + high-value crew); without an
    agent, the crew's high-value memories only. A memory folded into another of its own agent is never seen
    by itself (`visible`); one folded into another agent's memory (`fold_across`) stays its agent's own, and
    only the crew's views see the owner in its place: an agent's own scope never shows another agent's text."""
    if scope.scope == "workspace":  # the explorer's search for a workspace or admin token (recall/ui/pages.py)
        return in_workspace(scope.workspace_id, visible())
    if scope.scope == "own":
        return in_workspace(scope.workspace_id, own_by(str(scope.agent_id)))
    crew_high = Filter(
        must=(Match("crew_id", str(scope.crew_id)), AtLeast("importance_score", scope.high_value), visible())
    )
    if scope.agent_id:
        return in_workspace(scope.workspace_id, Filter(should=(own_by(scope.agent_id), crew_high)))
    return in_workspace(scope.workspace_id, *crew_high.must)


def own_by(agent_id: str) -> Filter:
    """The agent's memories: written by it (`agent_id`), not folded into another of its own memories."""
    return Filter(must=(Match("agent_id", agent_id), Filter(should=(visible(), Match(FOLD_ACROSS, ACROSS)))))


def visible() -> IsEmpty:
    """Not folded into another memory (episodic.indexing.folding): recall and listings show the owner."""
    return IsEmpty(FOLDED_INTO)


# The densify backfill's view of a memory (and nothing else: it reads up to a batch of these at a time).
DENSIFY_FIELDS: tuple[str, ...] = ("entry_id", "workspace_id", "summary", "indexed_at", "densify_failures")
DENSIFY_FAILURES = "densify_failures"  # payload: how many times embedding this memory failed


def missing_dense_filter(quarantine_after: int | None, using: str = DENSE, failures: str = DENSIFY_FAILURES) -> Filter:
    """Memories without their dense vector `using`, except those quarantined (`quarantine_after` failures or
    more, counted in the payload field `failures`)."""
    if quarantine_after is None:
        return Filter(must_not=(HasDense(using),))
    return Filter(must_not=(HasDense(using), AtLeast(failures, float(quarantine_after))))


def quarantined_filter(
    workspace_id: str | None, quarantine_after: int, using: str = DENSE, failures: str = DENSIFY_FAILURES
) -> Filter:
    """Memories still without their dense vector `using` after `quarantine_after` failed attempts."""
    must: tuple[Condition, ...] = (AtLeast(failures, float(quarantine_after)),)
    if workspace_id is not None:
        must = (workspace(workspace_id), *must)
    return Filter(must=must, must_not=(HasDense(using),))


def narrowed(flt: Filter, filters: RecallFilter) -> Filter:
    """`flt` and every condition of `filters` (the time window on `ts`, types, severities, runs, crew)."""
    if filters.empty:
        return flt
    must: list[Condition] = []
    if filters.since is not None or filters.until is not None:
        must.append(DatetimeRange("ts", gte=filters.since, lt=filters.until))
    if filters.entry_types:
        must.append(MatchAny("entry_type", filters.entry_types))
    if filters.severities:
        must.append(MatchAny("severity", filters.severities))
    if filters.run_id is not None:
        must.append(Match("run_id", filters.run_id))
    if filters.crew_id is not None:
        must.append(Match("crew_id", filters.crew_id))
    must_not = (Match("run_id", filters.exclude_run_id),) if filters.exclude_run_id is not None else ()
    return Filter(must=(*flt.must, *must), should=flt.should, must_not=(*flt.must_not, *must_not))


def selection_filter(selection: Selection, *conditions: Condition) -> Filter:
    """The memories of `selection` (its workspace, and its agent, run, crew and entry types when given)."""
    must: list[Condition] = []
    if selection.agent_id is not None:
        must.append(Match("agent_id", selection.agent_id))
    if selection.crew_id is not None:
        must.append(Match("crew_id", selection.crew_id))
    if selection.run_id is not None:
        must.append(Match("run_id", selection.run_id))
    if selection.entry_types:
        must.append(MatchAny("entry_type", selection.entry_types))
    return in_workspace(selection.workspace_id, *must, *conditions)


def at_time(ts: str) -> DatetimeRange:
    """`ts` is exactly this instant."""
    return DatetimeRange("ts", gte=ts, lte=ts)


def before_time(ts: str) -> DatetimeRange:
    """`ts` is strictly earlier than this instant."""
    return DatetimeRange("ts", lt=ts)


def nearest_filter(
    workspace_id: str,
    exclude_entry_ids: tuple[str, ...] = (),
    using: str = DENSE,
    *,
    agent_id: str | None = None,
    before_ts: str | None = None,
) -> Filter:
    """Nearest neighbours of a memory: the workspace's memories with a dense vector, except `exclude_entry_ids`
    (the memory itself and its aliases), and memories folded into another (their owner stands for them);
    optionally only one agent's, with a `ts` before `before_ts` (what the agent already held)."""
    must_not: tuple[Condition, ...] = (MatchAny("entry_id", exclude_entry_ids),) if exclude_entry_ids else ()
    must: tuple[Condition, ...] = (workspace(workspace_id), HasDense(using), visible())
    if agent_id is not None:
        must = (*must, Match("agent_id", agent_id))
    if before_ts is not None:
        must = (*must, before_time(before_ts))
    return Filter(must=must, must_not=must_not)


def count_filter(workspace_id: str | None, has_dense: bool | None, using: str = DENSE) -> Filter | None:
    """Optionally one workspace, optionally with / without the dense vector; None: every point."""
    must: tuple[Condition, ...] = () if workspace_id is None else (workspace(workspace_id),)
    must_not: tuple[Condition, ...] = ()
    if has_dense is True:
        must = (*must, HasDense(using))
    elif has_dense is False:
        must_not = (HasDense(using),)
    return Filter(must=must, must_not=must_not) if must or must_not else None


# -- queries ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DenseLeg:
    """Max-sim cosine of the stored chunk rows (of the named vector `using`) against one query row (the best
    chunk's cosine).

    `piece_penalty` > 0 ranks by `cosine - piece_penalty * ln(pieces)` instead, `pieces` being the memory's
    number of rows (`store_rules.pieces_field`; 1 when the payload does not say): the best of many pieces
    is a maximum over more draws, so a long memory's best piece beats a short memory's one piece by chance
    more often than by meaning (eval/README.md, "Piece prior"). The engine ranks the `PIECE_POOL` × `limit`
    best cosines by it and keeps `limit`."""

    vector: list[float]
    filter: Filter
    limit: int
    using: str = DENSE
    piece_penalty: float = 0.0


# How many raw max-sim candidates a piece-penalised dense leg re-ranks, per candidate it keeps: at 2 the
# mirror's recall over all memories is matched (eval/README.md, "Piece prior").
PIECE_POOL = 2


@dataclass(frozen=True, slots=True)
class SparseLeg:
    """BM25 over `filter`, with IDF statistics over `idf` only; with `inner`, over the inner prefetch's
    candidates only (re-scoring them by the query's words). `using`: the entry's own BM25 vector (`bm25`)
    or the context-folded one (`bm25_context`)."""

    sparse: SparseVec
    filter: Filter
    limit: int
    idf: Filter
    inner: Prefetch | None = None
    using: str = SPARSE


@dataclass(frozen=True, slots=True)
class Fused:
    """The legs fused by the engine: weighted RRF (`k`, `weights`, one per leg) or DBSF."""

    legs: tuple[Prefetch, ...]
    method: Literal["rrf", "dbsf"]
    k: int
    weights: tuple[float, ...]
    filter: Filter
    limit: int


Prefetch = DenseLeg | SparseLeg | Fused


@dataclass(frozen=True, slots=True)
class TimesImportance:
    """The final score: the prefetch's score × the point's `importance_score` (`default` when missing)."""

    key: str = "importance_score"
    default: float = DEFAULT_IMPORTANCE


@dataclass(frozen=True, slots=True)
class RawScore:
    """The final score is the prefetch's own score, with no importance multiplier: for a dense leg, the
    raw max-sim cosine (the linker's nearest neighbours, health's similarity structure)."""


@dataclass(frozen=True, slots=True)
class Query:
    prefetch: Prefetch
    filter: Filter
    limit: int
    with_dense: bool = False
    score: TimesImportance | RawScore = TimesImportance()
    fields: tuple[str, ...] | None = None  # payload fields to return; None: the whole payload
    using: str | None = None  # whose dense rows `with_dense` returns; None: the engine's active vector


def dense_leg(vector: list[float], flt: Filter, limit: int, using: str = DENSE, piece_penalty: float = 0.0) -> DenseLeg:
    return DenseLeg(list(map(float, vector)), flt, limit, using, piece_penalty)


_NARROWING = (Match, MatchAny, AtLeast, DatetimeRange)


def off_graph(flt: Filter) -> bool:
    """Whether `flt` keeps only the points with some value of a field that has no graphs of its own in the
    dense index (outside `rules.GRAPH_FIELDS`: a recall filtered by severity, entry type or a time window,
    the crew's high-value memories by importance): its search then follows the neighbours' neighbours
    (ACORN), or the graph's links between the points it keeps are too few and it misses some of its top k.
    A scope alone (workspace, agent, crew, run) has its own graphs: no ACORN, which would only cost (1.5x a
    hybrid query at 100k memories over 10 workspaces). Exclusions (`must_not`) and `IsEmpty` / `HasDense`
    / `HasId` conditions drop few points: not counted."""
    # a `should` that also admits every point without a field (`IsEmpty`: scope own's "not folded, or folded
    # across agents") keeps nearly all of them: it narrows nothing
    widened = any(isinstance(c, IsEmpty) for c in flt.should)
    for cond in (*flt.must, *(() if widened else flt.should)):
        if isinstance(cond, Filter):
            if off_graph(cond):
                return True
        elif isinstance(cond, _NARROWING) and not has_graph(cond.key):
            return True
    return False


def sparse_leg(sparse: SparseVec, scope: ScopeFilter, flt: Filter, limit: int) -> SparseLeg:
    # IDF statistics over the request's workspace only (not the whole collection, not the scope).
    return SparseLeg(sparse, flt, limit, in_workspace(scope.workspace_id))


def hybrid_prefetch(
    vector: list[float],
    sparse: SparseVec,
    scope: ScopeFilter,
    flt: Filter,
    limit: int,
    fusion: Fusion,
    using: str = DENSE,
    *,
    context: bool = False,
) -> Fused:
    """The hybrid query's legs (see `Fusion`), each fetching `limit` candidates, fused with their weights.
    The dense leg (of the named vector `using`, the active embedding generation) is one value, also the
    inner of the BM25- or context-re-scored leg (an engine lowers it once). `context`: the collection has
    the context vector; without it the context legs are left out and the "both" leg re-scores by the
    entry's own BM25 (the four-leg tree)."""
    dense = dense_leg(vector, flt, limit, using, fusion.piece_penalty)
    lexical = sparse_leg(sparse, scope, flt, limit)
    use_context = context and fusion.context_weight > 0
    legs: list[Prefetch] = []
    weights: list[float] = []

    def add(leg: Prefetch, weight: float) -> None:
        if weight > 0 or fusion.method == "dbsf":
            legs.append(leg)
            weights.append(weight)

    add(dense, fusion.dense_weight)
    searching: list[Prefetch] = [dense]  # the legs that search on their own (not re-scoring, not the top N)
    if sparse.indices:  # an empty sparse query contributes nothing; leave those legs out rather than ask the engine
        add(lexical, fusion.sparse_weight)
        searching.append(lexical)
        if fusion.both_weight > 0:
            both = CONTEXT if use_context and fusion.both_by_context else SPARSE
            add(SparseLeg(sparse, flt, limit, lexical.idf, inner=dense, using=both), fusion.both_weight)
        if fusion.head > 0 and fusion.head_weight > 0:
            add(SparseLeg(sparse, flt, min(fusion.head, limit), lexical.idf), fusion.head_weight)
        if use_context:
            context_leg = SparseLeg(sparse, flt, limit, lexical.idf, using=CONTEXT)
            add(context_leg, fusion.context_weight)
            searching.append(context_leg)
    if not legs:  # every weight 0: the dense leg alone still ranks
        legs, weights = [dense], [1.0]
    own = [(leg, w) for leg, w in zip(legs, weights, strict=True) if any(leg is x for x in searching)]
    if fusion.when and fusion.time_weight > 0:  # the time legs: each leg that searches on its own, over then
        then = in_spans(flt, fusion.when)
        for leg, weight in own:
            legs.append(replace(leg, filter=then))
            weights.append(weight * fusion.time_weight)
    return Fused(tuple(legs), fusion.method, fusion.k, tuple(weights), flt, limit * len(legs))


def in_spans(flt: Filter, when: tuple[tuple[str, str], ...]) -> Filter:
    """`flt` narrowed to the memories whose `ts` falls in one of the [start, end) spans `when`."""
    spans = tuple(DatetimeRange("ts", gte=start, lt=end) for start, end in when)
    return Filter(must=(*flt.must, Filter(should=spans)), should=flt.should, must_not=flt.must_not)


def rare_term_idf(points: int) -> float:
    """Qdrant's IDF of a term that one point of `points` holds: `ln(1 + (N - 0.5) / 1.5)`, the unit of
    `lexical_factor` (BM25 scores grow with ln N, so a bare score threshold would mean less lexical
    evidence in a bigger workspace)."""
    return math.log(1.0 + (max(points, 1) - 0.5) / 1.5)


def lexical_factor(best_bm25: float, points: int, full: float, floor: float) -> float:
    """How much of their weight the BM25-based legs keep for one query (`Fusion.lexical_full`): the best
    BM25 score over the request's scope in units of `rare_term_idf(points)` (a rare word matched once in a
    memory of average length scores about one unit, in a short memory up to k + 1 = 2.2), over `full`,
    within [`floor`, 1]. `full` <= 0: always 1.

    Chosen on LongMemEval dev (eval/README.md, "Lexical confidence"): full 4, floor 0.25."""
    if full <= 0:
        return 1.0
    strength = max(best_bm25, 0.0) / rare_term_idf(points)
    return min(1.0, max(floor, strength / full))


def lexically_scaled(fusion: Fusion, factor: float) -> Fusion:
    """`fusion` with every BM25-based leg's weight (the entry's BM25, the re-scored dense candidates, the
    top-N leg, the context BM25) times `factor`; the dense leg keeps its weight."""
    if factor >= 1.0:
        return fusion
    return replace(
        fusion,
        sparse_weight=fusion.sparse_weight * factor,
        both_weight=fusion.both_weight * factor,
        head_weight=fusion.head_weight * factor,
        context_weight=fusion.context_weight * factor,
    )


# -- lowering into an engine's types ----------------------------------------------------------------------


class Vocabulary(ABC):
    """An engine's constructors for each kind of node. Arguments arrive already lowered (engine types);
    an empty list of conditions arrives as None."""

    @abstractmethod
    def match(self, key: str, value: str) -> Any: ...

    @abstractmethod
    def match_any(self, key: str, values: list[str]) -> Any: ...

    @abstractmethod
    def at_least(self, key: str, gte: float) -> Any: ...

    @abstractmethod
    def datetime_range(self, key: str, gte: str | None, gt: str | None, lte: str | None, lt: str | None) -> Any: ...

    @abstractmethod
    def has_dense(self, using: str = DENSE) -> Any: ...

    @abstractmethod
    def is_empty(self, key: str) -> Any: ...

    @abstractmethod
    def has_id(self, ids: list[str]) -> Any: ...

    @abstractmethod
    def filter(self, must: list[Any] | None, should: list[Any] | None, must_not: list[Any] | None) -> Any: ...

    @abstractmethod
    def sparse_vector(self, indices: list[int], values: list[float]) -> Any: ...

    @abstractmethod
    def dense_leg(self, vector: list[float], flt: Any, limit: int, using: str = DENSE, *, acorn: bool = False) -> Any:
        """Nearest rows of `using` under `flt`; `acorn`: search with ACORN (`off_graph`)."""

    @abstractmethod
    def sparse_leg(self, vector: Any, flt: Any, limit: int, idf: Any, inner: Any | None, using: str) -> Any: ...

    @abstractmethod
    def fused(self, legs: list[Any], method: str, k: int, weights: list[float], flt: Any, limit: int) -> Any: ...

    @abstractmethod
    def piece_prior(self, inner: Any, key: str, penalty: float, flt: Any, limit: int) -> Any:
        """The inner prefetch's candidates re-scored by `$score - penalty * ln(payload[key])` (key: 1 when
        missing), the best `limit` kept."""

    @abstractmethod
    def times_importance(self, key: str, default: float) -> Any: ...

    @abstractmethod
    def raw_score(self) -> Any: ...


Node = Condition | Prefetch | SparseVec | TimesImportance | RawScore


class Lowering:
    """Lowers nodes into one engine's types. A node met again within one lowering (the scope filter of
    every leg, the dense leg inside the re-scored leg, the query's sparse vector) is lowered once and
    the engine object is reused. Use one Lowering per request."""

    __slots__ = ("_memo", "vocab")

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._memo: dict[int, tuple[Node, Any]] = {}  # id -> (node kept alive, engine object)

    def __call__(self, node: Node) -> Any:
        hit = self._memo.get(id(node))
        if hit is not None:
            return hit[1]
        out = self.fresh(node)
        self._memo[id(node)] = (node, out)
        return out

    def fresh(self, node: Node) -> Any:
        """Lower `node` without looking it up (a filter's own conditions are met only through it)."""
        lower = _LOWER.get(type(node))
        if lower is None:
            raise TypeError(f"cannot lower {type(node).__name__}")
        return lower(self, node)

    def all(self, nodes: tuple[Condition, ...]) -> list[Any] | None:
        return [self.fresh(n) for n in nodes] or None


def _filter(lo: Lowering, f: Filter) -> Any:
    return lo.vocab.filter(lo.all(f.must), lo.all(f.should), lo.all(f.must_not))


def _sparse_leg(lo: Lowering, leg: SparseLeg) -> Any:
    inner = lo(leg.inner) if leg.inner is not None else None
    return lo.vocab.sparse_leg(lo(leg.sparse), lo(leg.filter), leg.limit, lo(leg.idf), inner, leg.using)


def _dense_leg(lo: Lowering, leg: DenseLeg) -> Any:
    limit = leg.limit * PIECE_POOL if leg.piece_penalty > 0 else leg.limit
    nearest = lo.vocab.dense_leg(leg.vector, lo(leg.filter), limit, leg.using, acorn=off_graph(leg.filter))
    if leg.piece_penalty <= 0:
        return nearest
    return lo.vocab.piece_prior(nearest, pieces_field(leg.using), leg.piece_penalty, lo(leg.filter), leg.limit)


def _fused(lo: Lowering, f: Fused) -> Any:
    legs = [lo(leg) for leg in f.legs]
    return lo.vocab.fused(legs, f.method, f.k, list(f.weights), lo(f.filter), f.limit)


# One lowering per node type (a dict lookup rather than a chain of isinstance checks: this runs per query).
_LOWER: dict[type, Callable[[Lowering, Any], Any]] = {
    Filter: _filter,
    Match: lambda lo, n: lo.vocab.match(n.key, n.value),
    MatchAny: lambda lo, n: lo.vocab.match_any(n.key, list(n.values)),
    AtLeast: lambda lo, n: lo.vocab.at_least(n.key, n.gte),
    DatetimeRange: lambda lo, n: lo.vocab.datetime_range(n.key, n.gte, n.gt, n.lte, n.lt),
    # `using` only when it is not the first generation's vector: a vocabulary written before generations
    # (one named dense vector) still lowers every query that does not name another one.
    HasDense: lambda lo, n: lo.vocab.has_dense() if n.using == DENSE else lo.vocab.has_dense(n.using),
    IsEmpty: lambda lo, n: lo.vocab.is_empty(n.key),
    HasId: lambda lo, n: lo.vocab.has_id(list(n.ids)),
    DenseLeg: _dense_leg,
    SparseLeg: _sparse_leg,
    Fused: _fused,
    SparseVec: lambda lo, n: lo.vocab.sparse_vector(list(n.indices), list(n.values)),
    TimesImportance: lambda lo, n: lo.vocab.times_importance(n.key, n.default),
    RawScore: lambda lo, n: lo.vocab.raw_score(),
}
