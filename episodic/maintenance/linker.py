"""Similar edges at index time (seed 001 "Memory relations", SPEC §8). Over the store port, no Kafka.

For each `memory.indexed` event of mode `vector` (the memory's dense vector exists only then), the linker
finds the `top_k` (3) memories of the same workspace nearest to it by raw cosine, and writes an edge
new -> old of weight = cosine to each whose cosine is above `threshold` (0.80). With chunked multivectors
the cosine of two memories is the best pair of chunks: the max over the new memory's chunks and the
candidate's chunks (`MemoryStore.similar_to`). Where either memory has several pieces, their mean vectors
must also have a cosine of at least `min_mean_cosine` (0.35, `EPISODIC_SIMILAR_MIN_MEAN`): else two memories
that share one stock sentence and nothing else are linked at cosine ~1. When such memories fill the whole
candidate list and are all turned down, the linker searches once more, four times as wide.

- **Once.** A memory linked once carries `linked_at`, and a later `vector` event for it (a re-delivery, a
  second densify) changes nothing. A new version of the memory (a changed summary under the same id) comes
  without `linked_at`, so it is linked again and its `similar` edges are replaced (its `supports` edges,
  written by the indexer, stay). Edges are merged per (dst, relation), so no write can duplicate one.
- **One edge per pair.** A candidate that already has an edge to the new memory (it was linked first: two
  memories densified in the same batch, or a deferred vector that arrived late) is passed over, also within
  one batch. Edges point from the memory linked later to the one linked earlier, which is new -> old but for
  memories whose vectors arrive out of order.
- **Duplicates** (`mode: "duplicate"`) are folded into an existing memory and get no edges of their own;
  `sparse-only` events wait for their `vector` event.
- **Near duplicates fold** (`episodic.domain.folding`, `episodic.indexing.folding`): among the candidates, the
  nearest whose cosine (of the mean vectors, for memories of several pieces) reaches the fold rule's, that
  may fold (same crew, type, priority) and whose words and facts agree, absorbs the new memory: the new one
  gets `folded_into` and no edges, the old one lists it in `folded`. A memory that absorbed another in
  this batch is not folded itself (no chains), and one absorbed in this batch absorbs nothing.
- **Newer facts supersede** (`episodic.domain.supersession`): a memory that does not fold, and the nearest
  candidate of the same crew and type that is one subject with a changed number or date, get a `supersedes`
  edge from the one with the later `ts` to the other, and the older gets `superseded_by` (recall puts the
  newer first). One per new memory.

- **Surprise** (`episodic.domain.surprise`, seed 003): each new memory gets 1 - its best cosine to what its
  agent already held (the agent's memories of the workspace with an earlier `ts`), one more search per
  memory in the same kind of batch; 0.7 or more is a key moment.
- **Batched, and after bulk embedding.** The neighbour searches of a whole batch of events go to the store
  as one batch (`MemoryStore.similar_to_many`: Qdrant plans them as one pass over its segments), and with
  the process's core budget a batch first waits while bulk embedding runs or a recall is in flight
  (`CoreBudget.wait_quiet`, bounded): a burst's vectors come first, its edges a little later. A fetched batch
  is linked in chunks of `CHUNK` memories (`link_all`), each waiting so, so that a backlog (the whole
  backfill's, once its vectors are in) never holds the process for seconds beside the recalls. The choices
  are still made one memory at a time, in order, against the edges chosen before them (one edge per pair).

`supports` edges stay with the indexer: they need no vector, so the indexer writes them with the point
itself, atomically, the moment the rule is searchable, also in sparse-only mode where this linker never
runs. Both writers merge per (dst, relation) on the source memory, and the linker only replaces `similar`
(and its own `supersedes`).

- **No edge to a forgotten memory.** A neighbour the linker found alive may be forgotten before its edge is
  written: forget tombstones it, cuts the edges that point at it (the linker's not yet among them), then
  deletes it. So after its writes the linker looks at every memory it wrote an edge to, and where one is
  gone or tombstoned, cuts the edges that point at it itself (`MemoryStore.remove_edges_to`). Either the
  forget's cut saw the edge, or the edge was written after the tombstone and this look sees it. The same
  for a `superseded_by` mark whose newer memory went meanwhile: it is cleared, the older fact current again.

Size: under 600 lines: each new memory's edges, fold and supersession are decided against one search
of its neighbours, in one ordered pass over the batch, written in one call, then checked against forgets that
ran meanwhile; they read top to bottom here.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from episodic.domain.folding import ACROSS, FOLD_ACROSS, FOLDED, FOLDED_INTO, FoldRule, compatible, near_duplicate
from episodic.domain.identity import point_id
from episodic.domain.scoring import parse_time
from episodic.domain.supersession import SUPERSEDED_BY, SUPERSEDES, SupersedeRule, is_update
from episodic.domain.surprise import SURPRISE, key_moment, surprise
from episodic.embedding.cores import YIELD_MAX_S, CoreBudget
from episodic.indexing.context import ADJACENT as RUN_EDGES
from episodic.indexing.folding import fold, unfold, unfolded_from
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import (
    DENSE,
    Change,
    MemoryStore,
    SimilarRequest,
    StateStore,
    StoredHit,
    relations_payload,
)
from episodic.lifecycle.forget import tombstoned
from episodic.store.rules import pieces_field
from schemas.events import IndexedEvent

log = logging.getLogger(__name__)

SIMILAR = "similar"
Fold = tuple[str, str, float, str]  # the owner's point id and entry id, the cosine, the rule's reason
CANDIDATE_FACTOR = 3  # ask the store for top_k x this, to fill top_k after passing over existing pairs
# Two memories of several pieces are similar only if their mean vectors are too: their best pair of pieces
# alone links any two that share a stock sentence ("I hope this helps!", "Here are a few options:"), which
# on the LongMemEval oracle haystacks was most of the edges under a mean cosine of 0.35, and few above.
MIN_MEAN_COSINE = 0.35
# memories linked per wait for quiet cores: a chunk's searches and decisions take tens of milliseconds on a
# loaded machine, so a recall that comes in meanwhile waits at most for one chunk, not for a whole batch
CHUNK = 32
BATCH_WAIT_S = 240.0  # under aiokafka's default max_poll_interval_ms (300 s)
MORE_FACTOR = 4  # when that rule turned down a whole list of candidates above the threshold, one search this wider


def _now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Candidate:
    entry_id: str
    cosine: float
    links: frozenset[str]  # entry ids the candidate already has edges to
    mean_cosine: float | None = None  # of the two memories' mean vectors; None: both one piece (= cosine)


def choose_similar(
    source: str, candidates: Iterable[Candidate], *, threshold: float, top_k: int, min_mean: float = 0.0
) -> list[Candidate]:
    """The `top_k` best candidates above `threshold`, best first, skipping the source itself, any candidate
    that already has an edge to the source (one edge per pair), and any whose mean-vector cosine is below
    `min_mean` (two memories that share one sentence and nothing else)."""
    picked: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: (-c.cosine, c.entry_id)):
        if len(picked) == top_k or c.cosine <= threshold:
            break
        if c.entry_id == source or source in c.links or any(p.entry_id == c.entry_id for p in picked):
            continue
        if c.mean_cosine is not None and c.mean_cosine < min_mean:
            continue
        picked.append(c)
    return picked


def mean_vector(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """A memory's pieces as one unit vector (their normalised mean)."""
    m = np.asarray(rows, dtype=np.float32).mean(axis=0)
    return m / max(float(np.linalg.norm(m)), 1e-12)


@dataclass
class LinkResult:
    events: int = 0  # events seen
    linked: int = 0  # memories linked now
    edges: int = 0  # similar edges written
    already: int = 0  # memories linked before (re-delivery, densify twice)
    ignored: int = 0  # duplicate and sparse-only events
    missing: int = 0  # memories gone (forgotten, archived) or without their vector
    failed: int = 0  # memories the store refused
    folded: int = 0  # memories folded into a near duplicate (no edges of their own)
    superseded: int = 0  # supersedes edges written (a newer fact over an older one)
    cut: int = 0  # edges cut again because their memory was forgotten while the batch was linked
    key_moments: int = 0  # memories linked now whose surprise is at least KEY_MOMENT

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Linker:
    def __init__(
        self,
        *,
        store: MemoryStore,
        threshold: float = 0.80,
        top_k: int = 3,
        min_mean_cosine: float = MIN_MEAN_COSINE,
        clock: Callable[[], datetime] = _now,
        cores: CoreBudget | None = None,
        fold_rule: FoldRule | None = None,
        supersede_rule: SupersedeRule | None = None,
        state: StateStore | None = None,
    ) -> None:
        if not 0.0 < threshold <= 1.0 or top_k < 1 or not 0.0 <= min_mean_cosine <= 1.0:
            raise ValueError("threshold must be in (0, 1], top_k at least 1 and min_mean_cosine in [0, 1]")
        self.store = store
        self.threshold = threshold
        self.top_k = top_k
        self.min_mean_cosine = min_mean_cosine
        self.clock = clock
        self.cores = cores  # the process's core budget: a batch waits while bulk embedding runs
        self.fold_rule = fold_rule or FoldRule()
        self.supersede_rule = supersede_rule or SupersedeRule()
        self.state = state  # the tombstones: without it, only a neighbour already deleted counts as gone

    def link_all(self, events: Sequence[IndexedEvent]) -> LinkResult:
        """`link` over chunks of at most `CHUNK` vector events, in order (the events of a batch that need no
        linking go with the first chunk), each after a wait for quiet cores (`link`'s), the waits of one
        batch at most `BATCH_WAIT_S` together (a batch held longer would stall its consumer's partition for
        longer than Kafka's poll interval); the results added up."""
        vectors = [i for i, ev in enumerate(events) if ev.mode == "vector"]
        cuts = [0, *(vectors[j] for j in range(CHUNK, len(vectors), CHUNK)), len(events)]
        total = LinkResult()
        left = BATCH_WAIT_S
        for a, b in itertools.pairwise(cuts):
            if self.cores is not None and left > 0 and vectors:  # every chunk holds a vector event then
                left -= self.cores.wait_quiet(min(YIELD_MAX_S, left))
            for name, n in self._link(events[a:b]).as_dict().items():
                setattr(total, name, getattr(total, name) + n)
        return total

    def link(self, events: Sequence[IndexedEvent]) -> LinkResult:
        """Link the memories of a batch of memory.indexed events; one store write for the batch, after a wait
        for quiet cores (`CoreBudget.wait_quiet`) where there is something to link."""
        if self.cores is not None and any(ev.mode == "vector" for ev in events):
            self.cores.wait_quiet()
        return self._link(events)

    def _link(self, events: Sequence[IndexedEvent]) -> LinkResult:
        result = LinkResult(events=len(events))
        todo: dict[str, IndexedEvent] = {}
        for ev in events:
            if ev.mode != "vector":
                result.ignored += 1
            elif ev.point_id in todo:
                result.already += 1  # the same memory twice in one batch
            else:
                todo[ev.point_id] = ev
        if not todo:
            return result
        points = self.store.fetch(list(todo), with_dense=True)
        now = iso(self.clock())
        ready: dict[str, StoredHit] = {}
        for pid, ev in todo.items():
            point = points.get(pid)
            if point is None or not point.dense or point.payload.get("workspace_id") != ev.workspace_id:
                result.missing += 1
            elif point.payload.get("linked_at"):
                result.already += 1
            else:
                ready[pid] = point
        unfolded: set[str] = set()  # new versions of absorbed memories: taken out of their owners, decided afresh
        for pid, point in ready.items():
            if point.payload.get(FOLDED_INTO):
                unfold(self.store, str(point.payload.get("workspace_id")), {pid: point.payload})
                unfolded.add(pid)
        new_edges: dict[str, set[str]] = {}  # entry id -> entry ids it points at (written in this batch)
        similar: dict[str, list[dict[str, Any]]] = {}  # point id -> its new similar edges
        folds: dict[str, Fold] = {}  # absorbed point id -> (owner point id, entry id, cosine, the rule's reason)
        updated: dict[str, tuple[str, str, float, bool]] = {}  # point id -> (other point, entry id, cosine, newer)
        for pid, chosen in self._neighbours(ready, new_edges, folds, updated).items():
            if chosen is None:
                result.failed += 1
                continue
            if pid in folds:
                continue
            similar[pid] = [
                {"dst": c.entry_id, "relation": SIMILAR, "weight": round(min(1.0, c.cosine), 6), "created_at": now}
                for c in chosen
            ]
        later = self._supersessions(updated, similar, now)
        # Written under the write discipline (episodic.store): the other edges are those of the memory as it
        # is at the write (the indexer may have given it its run's `next` edge meanwhile, which is kept), and
        # a neighbour forgotten while the neighbours were searched gets no edge.
        ws_of = {pid: todo[pid].workspace_id for pid in similar}
        dsts = {point_id(ws_of[pid], e["dst"]) for pid, edges in similar.items() for e in edges}
        alive = set(self.store.retrieve(sorted(dsts), fields=("entry_id",))) if dsts else set()

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            edges = [e for e in similar[pid] if point_id(ws_of[pid], e["dst"]) in alive]
            kept = [
                e
                for e in payload.get("relations") or []
                if isinstance(e, dict) and e.get("relation") not in (SIMILAR, SUPERSEDES)
            ]
            fields = {**relations_payload(kept + edges), "linked_at": now}
            if pid in unfolded:
                fields[FOLDED_INTO] = None
            return Change(fields)

        report = self.store.update_memories(similar, change, writer="linker", fields=("relations", "links"))
        result.missing += report.missing
        result.failed += len(report.gave_up)
        result.linked += len(report.applied)
        result.edges += sum(
            sum(1 for e in similar[pid] if e["relation"] == SIMILAR and point_id(ws_of[pid], e["dst"]) in alive)
            for pid in report.applied
        )
        self._write_supersessions(later, result)
        written: dict[str, set[str]] = {}  # workspace -> the entry ids this batch may have written an edge to
        for pid in report.applied:
            written.setdefault(ws_of[pid], set()).update(str(e["dst"]) for e in similar[pid])
        pair_ws: dict[str, str] = {}  # point id of either memory of a supersession -> its workspace
        for pid, (other, other_id, _, _) in updated.items():
            pair_ws[pid] = pair_ws[other] = todo[pid].workspace_id
            written.setdefault(todo[pid].workspace_id, set()).update((todo[pid].entry_id, other_id))
        gone = {ws: self._gone(ws, ids) for ws, ids in written.items()}
        result.cut = sum(self.store.remove_edges_to(ws, sorted(g)) for ws, g in gone.items() if g)
        stale = {
            dst: src for _, marks in later.values() for dst, src in marks.items() if src in gone.get(pair_ws[dst], ())
        }
        if stale:  # an older memory marked superseded by one forgotten meanwhile is current again

            def clear(pid: str, payload: dict[str, Any]) -> Change | None:
                return Change({SUPERSEDED_BY: None}) if payload.get(SUPERSEDED_BY) == stale[pid] else None

            self.store.update_memories(stale, clear, writer="linker", fields=(SUPERSEDED_BY,))
        self._fold(folds, {pid: todo[pid].workspace_id for pid in folds}, now, result)
        self._surprise(ready, result)
        return result

    def _surprise(self, points: dict[str, StoredHit], result: LinkResult) -> None:
        """Each new memory's surprise (episodic.domain.surprise): 1 - its best cosine to the memories its agent
        held before it (its agent's, in its workspace, with an earlier `ts`), in one store batch; the
        linker's own field, written once for the batch. A store that refuses the search leaves it unset."""
        pids = [pid for pid in points if points[pid].payload.get("agent_id") is not None]
        if not pids:
            return
        requests = []
        for pid in pids:
            base, p = self._request(points[pid], 1), points[pid].payload
            ts = p.get("ts")
            requests.append(replace(base, agent_id=str(p["agent_id"]), before_ts=ts if isinstance(ts, str) else None))
        try:
            found = self.store.similar_to_many(requests)
        except StoreError as e:
            log.warning("linker: no surprise for a batch of %d memories (%s)", len(pids), e)
            return
        values: dict[str, dict[str, Any]] = {}
        for pid, hits in zip(pids, found, strict=True):
            point = points[pid]
            best: float | None = None
            if hits:
                best = float(hits[0].score)
                means = self._mean_cosines(point.dense or [], hits[:1], point.vector)
                best = min(best, means.get(hits[0].point_id, best))
            values[pid] = {SURPRISE: surprise(best)}
        result.key_moments += sum(1 for v in values.values() if key_moment(v[SURPRISE]))
        self.store.set_payloads(values)

    def _gone(self, workspace_id: str, entry_ids: set[str]) -> set[str]:
        """Those of `entry_ids` that are no memory any more, or are being forgotten (tombstoned for the agent
        of the memory that holds the id: the rule of `episodic check`)."""
        pids = {point_id(workspace_id, i): i for i in sorted(entry_ids)}
        present = self.store.retrieve(sorted(pids), fields=("entry_id", "agent_id"))
        gone = {i for pid, i in pids.items() if pid not in present}
        if self.state is not None and present:
            gone |= tombstoned(self.state, workspace_id, {pids[pid]: p.get("agent_id") for pid, p in present.items()})
        return gone

    def _supersessions(
        self, updated: dict[str, tuple[str, str, float, bool]], similar: dict[str, list[dict[str, Any]]], now: str
    ) -> dict[str, tuple[list[dict[str, Any]], dict[str, str]]]:
        """Each supersession's edge: on the new memory (with its similar edges) when it is the newer, else on
        the existing one (returned: point id -> (edges, the older memories' superseded_by marks))."""
        later: dict[str, tuple[list[dict[str, Any]], dict[str, str]]] = {}
        if not updated:
            return later
        ids = self.store.retrieve(sorted({o for o, _, _, _ in updated.values()} | set(updated)), fields=("entry_id",))
        for pid, (other, _, cosine, newer) in updated.items():
            if pid not in ids or other not in ids or pid not in similar:
                continue
            src, dst = (pid, other) if newer else (other, pid)
            edge = {"dst": str(ids[dst].get("entry_id")), "relation": SUPERSEDES, "weight": round(cosine, 6)}
            edge["created_at"] = now
            if src in similar:
                similar[src].append(edge)
            edges, marks = later.setdefault(src, ([], {}))
            if src not in similar:
                edges.append(edge)
            marks[dst] = str(ids[src].get("entry_id"))
        return later

    def _write_supersessions(
        self, later: dict[str, tuple[list[dict[str, Any]], dict[str, str]]], result: LinkResult
    ) -> None:
        """The edges that go on existing memories (merged under the write discipline), then every older
        memory's `superseded_by` (the linker's own field)."""
        on_existing = {pid: edges for pid, (edges, _) in later.items() if edges}

        def add(pid: str, payload: dict[str, Any]) -> Change:
            mine = [e for e in payload.get("relations") or [] if isinstance(e, dict)]
            have = {(e.get("dst"), e.get("relation")) for e in mine}
            new = [e for e in on_existing[pid] if (e["dst"], e["relation"]) not in have]
            return Change(relations_payload(mine + new))

        if on_existing:
            self.store.update_memories(on_existing, add, writer="linker", fields=("relations", "links"))
        marks = {dst: {SUPERSEDED_BY: src_id} for _, m in later.values() for dst, src_id in m.items()}
        result.superseded += len(marks)
        if marks:
            self.store.set_payloads(marks)

    def _fold(self, folds: dict[str, Fold], ws_of: dict[str, str], now: str, result: LinkResult) -> None:
        """Fold each absorbed memory into its owner: the owner's fields under the write discipline (computed
        from the owner as it is at the write), then the absorbed memory's mark (the linker's own fields).
        An owner forgotten while this ran leaves the marks pointing at nothing (the forget read the owner
        before the fold, or its unfold ran before the marks), which would hide the memories from recall: each
        goes to the heir the forget chose for it, if any, else stands alone again."""
        if not folds:
            return
        wanted = set(folds) | {f[0] for f in folds.values()}
        fresh = self.store.retrieve(sorted(wanted), fields=_FRESH_FIELDS)
        marks: dict[str, dict[str, Any]] = {}
        into: dict[str, list[tuple[str, float, str]]] = {}  # owner point id -> [(absorbed point id, cosine, why)]
        for pid, (owner_pid, _owner_id, cosine, why) in folds.items():
            absorbed, owner = fresh.get(pid), fresh.get(owner_pid)
            if absorbed is None or owner is None:  # either forgotten meanwhile: no fold
                result.missing += absorbed is None
                if absorbed is not None:
                    marks[pid] = {"linked_at": now, FOLDED_INTO: None}
                continue
            into.setdefault(owner_pid, []).append((pid, cosine, why))

        def fold_in(owner_pid: str, owner_now: dict[str, Any]) -> Change:
            owner, fields = dict(owner_now), {}
            for pid, cosine, why in into[owner_pid]:
                step = fold(owner, fresh[pid], cosine=cosine, at=now, rule=why)
                owner.update(step)  # the next fold into the same owner starts from this one
                fields.update(step)
            return Change(fields)

        done = self.store.update_memories(into, fold_in, writer="linker", fields=_FRESH_FIELDS)
        for owner_pid in done.applied:
            for pid, _, _ in into[owner_pid]:
                across = fresh[pid].get("agent_id") != fresh[owner_pid].get("agent_id")
                marks[pid] = {FOLDED_INTO: folds[pid][1], FOLD_ACROSS: ACROSS if across else None, "linked_at": now}
                result.folded += 1
        self.store.set_payloads(marks)
        owners: dict[str, set[str]] = {}  # workspace -> the owners written
        for owner_pid in done.applied:
            pid = into[owner_pid][0][0]
            owners.setdefault(ws_of[pid], set()).add(folds[pid][1])
        gone = {ws: self._gone(ws, ids) for ws, ids in owners.items()}
        orphans = {
            pid: folds[pid][1]
            for owner_pid in done.applied
            for pid, _, _ in into[owner_pid]
            if folds[pid][1] in gone[ws_of[pid]]
        }

        if not orphans:
            return
        # the forget's unfold may have made one of them the heir of the others (it lists them in `folded`)
        heir_of = {
            str(e.get("entry_id")): str(p.get("entry_id"))
            for p in self.store.retrieve(sorted(orphans), fields=("entry_id", FOLDED)).values()
            for e in p.get(FOLDED) or []
            if isinstance(e, dict)
        }

        def stand_alone(pid: str, payload: dict[str, Any]) -> Change | None:
            if payload.get(FOLDED_INTO) != orphans[pid]:
                return None
            return Change({FOLDED_INTO: heir_of.get(str(payload.get("entry_id")))})

        self.store.update_memories(orphans, stand_alone, writer="linker", fields=(FOLDED_INTO,))

    def _decide(
        self, point: StoredHit, near: list[tuple[str, str, float]], folds: dict[str, Fold]
    ) -> tuple[Fold | None, tuple[str, str, float, bool] | None]:
        """What this memory is to its nearest candidates (`near`: point id, entry id, cosine, best first):
        the memory it folds into (episodic.domain.folding), or else the one it is an update of, or the update
        of (episodic.domain.supersession; `True`: this one is the newer). Memories absorbed in this batch are
        passed over; a memory that absorbed another in this batch is not folded itself."""
        fold_rule, sup = self.fold_rule, self.supersede_rule
        floor = min(fold_rule.cosine if fold_rule.enabled else 2.0, sup.cosine if sup.enabled else 2.0)
        near = [n for n in near if n[0] not in folds and n[2] >= floor]
        if not near:
            return None, None
        found = self.store.retrieve([pid for pid, _, _ in near], fields=_FOLD_FIELDS)
        text = str(point.payload.get("summary") or "")
        owner = point.point_id in {f[0] for f in folds.values()}
        refused = unfolded_from(point.payload)  # an operator took it out of these: it never folds into them again
        for pid, eid, cosine in near:
            old = found.get(pid)
            if old is None or owner or eid in refused or not compatible(point.payload, old):
                continue
            verdict = near_duplicate(cosine, text, str(old.get("summary") or ""), fold_rule)
            if verdict.fold:
                log.debug("linker: %s folds into %s (%s)", point.payload.get("entry_id"), eid, verdict.reason)
                return (pid, eid, cosine, verdict.reason), None
        for pid, eid, cosine in near:
            old = found.get(pid)
            same = old is not None and all(point.payload.get(k) == old.get(k) for k in _SAME_SUBJECT)
            if old is None or not same or old.get(FOLDED_INTO):
                continue
            if is_update(cosine, text, str(old.get("summary") or ""), sup).fold:
                mine, theirs = parse_time(point.payload.get("ts")), parse_time(old.get("ts"))
                newer = mine is None or theirs is None or mine >= theirs  # no time to go by: the later written
                return None, (pid, eid, cosine, newer)
        return None, None

    def _request(self, point: StoredHit, limit: int) -> SimilarRequest:
        p = point.payload
        return SimilarRequest(
            str(p.get("workspace_id")),
            point.dense or [],
            limit,
            exclude_entry_ids=(str(p.get("entry_id")), *(str(a) for a in p.get("aliases") or [])),
            fields=("entry_id", "relations", pieces_field(point.vector or DENSE)),
            using=point.vector,  # the generation its rows were read from, even if a switch came in between
        )

    def _search(self, points: dict[str, StoredHit], limit: int) -> dict[str, list[StoredHit] | None]:
        """Each point's `limit` nearest memories, in one store batch; if the batch fails, one search per
        point, so that one memory the store refuses fails alone (None)."""
        pids = list(points)
        try:
            found = self.store.similar_to_many([self._request(points[pid], limit) for pid in pids])
            return dict(zip(pids, found, strict=True))
        except StoreError as e:
            log.warning("linker: a batch of %d neighbour searches failed (%s); searching one by one", len(pids), e)
        out: dict[str, list[StoredHit] | None] = {}
        for pid in pids:
            try:
                out[pid] = self.store.similar_to_many([self._request(points[pid], limit)])[0]
            except StoreError as e:
                p = points[pid].payload
                log.warning("linker: cannot link %s/%s: %s", p.get("workspace_id"), p.get("entry_id"), e)
                out[pid] = None
        return out

    def _neighbours(
        self,
        points: dict[str, StoredHit],
        new_edges: dict[str, set[str]],
        folds: dict[str, Fold],
        updated: dict[str, tuple[str, str, float, bool]],
    ) -> dict[str, list[Candidate] | None]:
        """The chosen neighbours of each point (None: the store refused its search), chosen in order, each
        against the edges chosen before it; `new_edges` gets each choice. A point that folds into a near
        duplicate (decided on the first search, where the nearest are) goes to `folds` and gets no edges."""
        first = self.top_k * CANDIDATE_FACTOR
        chosen: dict[str, list[Candidate] | None] = {}
        means: dict[str, dict[str, float]] = {pid: {} for pid in points}  # point id -> hit id -> mean cosine
        todo = points
        for limit in (first, first * MORE_FACTOR):
            wider: dict[str, StoredHit] = {}
            for pid, hits in self._search(todo, limit).items():
                point = points[pid]
                if hits is None:
                    chosen[pid] = None
                    continue
                source = str(point.payload.get("entry_id"))
                rows = point.dense or []
                above = [h for h in hits if h.score > self.threshold]
                m = means[pid]
                m.update(self._mean_cosines(rows, [h for h in above if h.point_id not in m], point.vector))
                candidates = [
                    Candidate(
                        entry_id=str(h.payload.get("entry_id")),
                        cosine=float(h.score),
                        links=_linked(h.payload) | new_edges.get(str(h.payload.get("entry_id")), set()),
                        mean_cosine=m.get(h.point_id),
                    )
                    for h in hits
                ]
                if limit == first:
                    near = sorted(
                        (
                            (
                                h.point_id,
                                c.entry_id,
                                c.cosine if c.mean_cosine is None else min(c.cosine, c.mean_cosine),
                            )
                            for h, c in zip(hits, candidates, strict=True)
                            if c.entry_id != source
                        ),
                        key=lambda n: (-n[2], n[1]),
                    )
                    target, update = self._decide(point, near, folds)
                    if target is not None:
                        folds[pid] = target
                        chosen[pid] = []
                        continue
                    if update is not None:
                        updated[pid] = update
                picked = choose_similar(
                    source, candidates, threshold=self.threshold, top_k=self.top_k, min_mean=self.min_mean_cosine
                )
                chosen[pid] = picked
                new_edges[source] = {c.entry_id for c in picked}
                # Memories sharing a stock sentence with this one can fill the whole list and all be turned
                # down: ask once for MORE_FACTOR times as many while the list was full and still above the
                # threshold.
                rejected = any(v < self.min_mean_cosine for v in m.values())
                if limit == first and len(picked) < self.top_k and rejected and len(above) >= limit:
                    wider[pid] = point
            if not wider:
                break
            todo = wider
        return chosen

    def _mean_cosines(self, rows: list[list[float]], hits: list[StoredHit], vector: str | None) -> dict[str, float]:
        """The mean-vector cosine of the source and each hit where either has more than one piece (for two
        single pieces it is the cosine itself); the multi-piece hits' rows are read in one call."""
        if self.min_mean_cosine <= 0.0:
            return {}
        field = pieces_field(vector or DENSE)
        many = [h.point_id for h in hits if len(rows) > 1 or _pieces(h.payload.get(field)) > 1]
        if not many:
            return {}
        source = mean_vector(rows)
        found = self.store.fetch(many, with_dense=True, using=vector)
        # a hit gone meanwhile, or without rows now, is no neighbour: -1 keeps it out
        return {
            pid: float(mean_vector(h.dense) @ source) if (h := found.get(pid)) and h.dense else -1.0 for pid in many
        }


# What the batch's write reads again: the edges (kept but `similar`), and what a fold records of either side.
_FRESH_FIELDS = ("relations", "entry_id", "agent_id", "ts", "occurrences", "aliases", "folded")
# What the fold rule compares (episodic.domain.folding.compatible, near_duplicate).
_FOLD_FIELDS = ("workspace_id", "crew_id", "entry_type", "priority", "summary", "ts", FOLDED_INTO)
_SAME_SUBJECT = ("workspace_id", "crew_id", "entry_type")  # an update may change the priority


def _pieces(value: Any) -> int:
    """A memory's recorded number of pieces (1 when not recorded: a memory from before pieces were counted,
    whose rows are then read like any multi-piece memory's only if the source has several)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1 else 1


def _linked(payload: dict[str, Any]) -> frozenset[str]:
    """The memories this one has an edge to, for "one edge per pair": a run's `previous` / `next` edges
    (episodic.indexing.context) say where a memory sits in its run, not what it resembles, so they do not count."""
    edges = payload.get("relations") or []
    return frozenset(str(e.get("dst")) for e in edges if isinstance(e, dict) and e.get("relation") not in RUN_EDGES)
