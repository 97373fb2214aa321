"""Context-aware indexing and episode adjacency (issue 11): an entry is indexed with what came before it in
its run, and consecutive memories of a run are linked.

A reply such as "Yes, last Tuesday, with my sister" means something only after the entry before it. With
a context mode other than `off`, each new memory gets a second BM25 vector (`ports.CONTEXT`) over its
*context-folded text*: the context lines, oldest first, then its own summary, one per line. The summary,
the dense vector and the entry's own BM25 vector are unchanged; recall returns the summary as it was, and
the hit's `context` shows the lines it was indexed with.

Modes (`EPISODIC_CONTEXT_MODE`, words per line `EPISODIC_CONTEXT_WORDS`, default 16; `EPISODIC_CONTEXT_DATE`
puts the entry's date line first, off by default: it cost LongMemEval 0 to 3 points):

- `off`: no context vector (recall then runs the four-leg tree);
- `prev:N` (default `prev:2`): the N memories before this one in its run;
- `run-header`: the run's first memory (what the run is about), for every later memory of the run.

Each context line is that memory's summary cut to its first `words` whitespace-separated words (a long
answer would bury a short reply under its own terms). Chosen on LongMemEval dev with
`python -m eval.sweep context-modes` (eval/README.md), byte for byte the text `eval.context` measures.

**Whose run.** A run is one agent's: an entry's context and its run edges are made of the memories of the
same workspace, `run_id` *and agent* (issue 45). A `run_id` is any string an agent writes, so another agent
can write under it (by mistake, or on purpose: mallory's entry under alice's `run_id` would otherwise carry
alice's earlier summaries and ids into mallory's own memory, and give alice's memory a `next` edge to
mallory's); agents that share a run id keep separate chains.

**Streaming order.** An entry's context is made of the memories of its run (above) that come before it by
(`ts`, entry id) and are already in the store or earlier in the same batch, never later ones. The store is
the source, so the embedded and the distributed embedders agree.
Under re-delivery a memory that is already stored is not rewritten, so its context stays what it was
first indexed with. Entries without a `run_id` have no context (their context vector is their own text).

**Adjacency.** Every new memory of a run gets a `previous` edge to the memory before it and a `next` edge
to the one after it (usually none yet), and those neighbours get the matching edge back (stored like the
other relations: the source memory's payload `relations` + `links`). A memory has at most one of each:
an entry that arrives late, between two stored memories, is linked in between them. A new version that
moves (another `ts` or `run_id`) is taken out of its old place: its old neighbours are joined to each other
(else the chain would hold a cycle). The neighbours are written before the new points, so a crash in
between leaves at worst an edge to a memory that the re-delivery then writes. The linker rewrites the
same `relations` list (its `similar` edges), so each neighbour is read again just before its write and
only its run edge changes (the linker does the same).

**Forget.** `scrub` (called by `episodic.lifecycle.forget`) removes a forgotten memory's lines from the context of
the memories indexed with it (their context vector is rebuilt without them) and links its run neighbours
to each other.

Size: a little over 400 lines: the run's context and its adjacency edges are planned together, from the
same reads of the run, and the repairs of the chain (a moved version, a forget's relink) read best beside
the rules they keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from episodic.domain.context_mode import HEADER, ContextMode
from episodic.domain.identity import point_id
from episodic.domain.runs import adjacent
from episodic.kernel.ports import Change, MemoryStore, Relation, SparseVec, merge_relations
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord

SLACK = 4  # extra memories read per run, for ties at one instant
ADJACENT = ("previous", "next")


def date_line(at: datetime) -> str:
    """The date an entry was written, in words and ISO form (UTC): 'Saturday 20 May 2023 (2023-05-20)', so
    "in May", "on a Saturday" and "2023-05-20" all share terms with it (eval.context's date line)."""
    d = at.astimezone(UTC)
    return f"{d:%A} {d.day} {d:%B %Y} ({d:%Y-%m-%d})"


def cut(text: str, words: int) -> str:
    """The first `words` whitespace-separated words of `text` (unchanged when it has no more)."""
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words])


def folded_text(lines: Sequence[str], summary: str, date: str | None = None) -> str:
    """What the context vector indexes: the date line (when asked for), the context lines, oldest first,
    then the entry's own summary."""
    return "\n".join([*([date] if date else []), *lines, summary])


def shown_context(value: Any) -> list[dict[str, str]] | None:
    """A payload's `context` as the API shows it: [{entry_id, text}], oldest first; None when the memory was
    indexed without context (mode off, or a collection without the context vector)."""
    if not isinstance(value, list):
        return None
    return [
        {"entry_id": str(c.get("entry_id", "")), "text": str(c.get("text", ""))} for c in value if isinstance(c, dict)
    ]


def _instant(ts: Any) -> datetime:
    if isinstance(ts, datetime):
        return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    try:
        dt = datetime.fromisoformat(str(ts).replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Run:
    """One agent's part of a run: what context and run edges are made of."""

    workspace_id: str
    run_id: str
    agent_id: str


@dataclass(slots=True)
class Member:
    """One memory of a run, stored or about to be written."""

    point_id: str
    entry_id: str
    at: datetime
    summary: str
    payload: dict[str, Any]
    new: bool
    order: int = -1  # position in the batch (new memories)

    @property
    def key(self) -> tuple[datetime, str]:
        return (self.at, self.entry_id)


@dataclass
class Plan:
    """What `RunContext.plan` decided for a batch: the context vector of each new point, and the payload
    run edges to set on stored neighbours (written before the points)."""

    vectors: dict[str, SparseVec] = field(default_factory=dict)
    neighbours: dict[str, dict[str, str]] = field(default_factory=dict)  # point id -> {relation: entry id}
    # point id -> {relation: (was, now)}: the old neighbours of a memory that moved (a new version with
    # another `ts` or run) are joined across the gap it left, each edge only while it still points at it
    detach: dict[str, dict[str, tuple[str, str | None]]] = field(default_factory=dict)


def set_adjacent(payload: dict[str, Any], relation: str, dst: str | None, created_at: str) -> bool:
    """Make `dst` the memory's one `relation` (`previous` / `next`) edge (None: none); True when changed."""
    src = str(payload.get("entry_id", ""))
    dst = None if dst == src else dst
    edges = [e for e in payload.get("relations") or [] if isinstance(e, dict)]
    keep = [e for e in edges if e.get("relation") != relation]
    old = [e.get("dst") for e in edges if e.get("relation") == relation]
    if old == ([dst] if dst else []):
        return False
    new = [Relation(src=src, dst=dst, relation=relation, weight=1.0, created_at=created_at)] if dst else []  # type: ignore[arg-type]
    payload["relations"] = merge_relations(keep, new)
    payload["links"] = sorted({e["dst"] for e in payload["relations"]})
    return True


class RunContext:
    """Context lines and adjacency edges for the new memories of a batch, from the store and the batch."""

    def __init__(self, store: MemoryStore, bm25: Bm25Encoder, mode: ContextMode) -> None:
        self.store = store
        self.bm25 = bm25
        self.mode = mode

    @property
    def indexes_context(self) -> bool:
        return not self.mode.off and self.store.has_context

    def plan(
        self,
        new: Sequence[tuple[str, EmbeddableRecord, dict[str, Any]]],
        created_at: str,
        moved: Iterable[str] = (),
    ) -> Plan:
        """`new`: (point id, record, payload) of the points about to be written, payloads as they will be
        written; their `context`, `context_ids` and adjacency edges are set here. `moved`: the point ids of
        new versions that left their place (another `ts` or `run_id` than the stored memory's)."""
        plan = Plan()
        runs: dict[tuple[str, str, str], list[Member]] = {}  # (workspace, run, agent): one agent's part of a run
        # a new version keeps the stored memory's edges (indexer `_keep`): where it sat in its run until now
        was = {pid: (adjacent(payload, "previous"), adjacent(payload, "next")) for pid, _, payload in new}
        for order, (pid, rec, payload) in enumerate(new):
            member = Member(pid, rec.id, rec.ts_datetime, rec.summary, payload, True, order)
            if rec.run_id:
                runs.setdefault((rec.workspace_id, rec.run_id, rec.agent_id), []).append(member)
            else:
                for rel in ADJACENT:  # no run (a new version may have left one): no run edges
                    set_adjacent(payload, rel, None, created_at)
                if self.indexes_context:
                    self._index(plan, member, [])
        for (ws, run, agent), members in runs.items():
            self._plan_run(plan, Run(ws, run, agent), members, created_at)
        self._detach(plan, new, was, set(moved))
        return plan

    @staticmethod
    def _detach(
        plan: Plan,
        new: Sequence[tuple[str, EmbeddableRecord, dict[str, Any]]],
        was: dict[str, tuple[str | None, str | None]],
        moved: set[str],
    ) -> None:
        """The memories of `moved` (new versions with another `ts` or `run_id`) left their old place in their
        run, and their old neighbours still point at them. Each old neighbour that stays is joined to the
        next one that stays on the other side (a chain of moved memories skipped), while its edge still
        points at the moved memory; the plan's own new edges win over these. Without this the old next keeps
        `previous` = the memory while the memory's own `previous` may be that neighbour: a cycle of run edges
        (which stalled a forget's relink before the walk was guarded). A neighbour in the batch is planned
        afresh."""
        batch = {pid for pid, _, _ in new}
        gone = {(rec.workspace_id, rec.id): was[pid] for pid, rec, _ in new if pid in moved}
        now = {(rec.workspace_id, rec.id): (adjacent(p, "previous"), adjacent(p, "next")) for _, rec, p in new}

        def across(ws: str, start: str | None, side: int) -> str | None:
            seen: set[str] = set()
            while start is not None and (ws, start) in gone and start not in seen:
                seen.add(start)
                start = gone[(ws, start)][side]
            return start

        for (ws, eid), (old_prev, old_next) in gone.items():
            for neighbour, rel, side in ((old_prev, "next", 1), (old_next, "previous", 0)):
                if (
                    neighbour is None
                    or neighbour == now[(ws, eid)][1 - side]  # on the same side still: it did not leave the gap
                    or (ws, neighbour) in gone
                    or point_id(ws, neighbour) in batch
                ):
                    continue
                then = across(ws, old_next if side else old_prev, side)
                plan.detach.setdefault(point_id(ws, neighbour), {})[rel] = (eid, then if then != neighbour else None)

    def _stored(
        self, run: Run, limit: int, *, until: datetime | None = None, since: datetime | None = None
    ) -> list[Member]:
        """The agent's stored memories of the run (never another agent's: see the module doc)."""
        rows = self.store.run_memories(
            run.workspace_id,
            run.run_id,
            until=_iso(until) if until else None,
            since=_iso(since) if since else None,
            limit=limit,
            oldest_first=since is not None or until is None,
            agent_id=run.agent_id,
        )
        return [
            Member(pid, str(p.get("entry_id", "")), _instant(p.get("ts")), str(p.get("summary", "")), p, False)
            for pid, p in rows
        ]

    def _plan_run(self, plan: Plan, run: Run, members: list[Member], created_at: str) -> None:
        mine = {m.point_id for m in members}
        by_key = sorted(members, key=lambda m: m.key)
        depth = max(1, self.mode.n)
        first = by_key[0].key
        before = [s for s in self._stored(run, depth + SLACK, until=by_key[-1].at) if s.point_id not in mine]
        read = self._stored(run, 1 + SLACK, since=by_key[0].at)
        after = [s for s in read if s.point_id not in mine]
        # Stored memories at the first entry's own instant that sort before it (a tie of timestamps with one-second
        # precision, broken by entry id) are earlier, not later: the batch is still in order, unless the read
        # was cut at its limit among them (a later one may follow).
        in_order = all(s.key < first for s in [*before, *after]) and (not after or len(read) < 1 + SLACK)
        header: Member | None = None
        if self.mode.kind == HEADER and self.indexes_context:
            oldest = [s for s in self._stored(run, 1 + SLACK) if s.point_id not in mine]
            header = min([*oldest, *members], key=lambda m: m.key)
        tail = sorted(before, key=lambda m: m.key)
        for j, m in enumerate(by_key):
            if in_order:  # the usual stream: everything stored is older than the batch's entries of the run
                earlier, nxt = [*tail, *by_key[:j]], (by_key[j + 1] if j + 1 < len(by_key) else None)
            else:  # an entry arrived after later-stamped ones: read around it, for it alone
                earlier, nxt = self._around(run, m, members, mine, depth)
            prev = earlier[-1] if earlier else None
            set_adjacent(m.payload, "previous", prev.entry_id if prev else None, created_at)
            set_adjacent(m.payload, "next", nxt.entry_id if nxt else None, created_at)
            for other, rel in ((prev, "next"), (nxt, "previous")):
                if other is not None and not other.new and set_adjacent(other.payload, rel, m.entry_id, created_at):
                    plan.neighbours.setdefault(other.point_id, {})[rel] = m.entry_id
            if not self.indexes_context:
                continue
            # context: what was there when the entry came: stored, or before it in the batch (stream order)
            seen = [e for e in earlier if not e.new or e.order < m.order]
            if self.mode.kind == HEADER:
                ok = header is not None and header.key < m.key and (not header.new or header.order < m.order)
                context = [header] if ok and header is not None else []
            else:
                context = seen[-self.mode.n :]
            self._index(plan, m, context)

    def _around(
        self, run: Run, m: Member, members: list[Member], mine: set[str], depth: int
    ) -> tuple[list[Member], Member | None]:
        """The memories of the run before `m` (oldest first, at least the `depth` nearest ones) and the one
        just after it, from the store (read for `m` alone) and the batch."""
        near = [
            *self._stored(run, depth + SLACK, until=m.at),
            *self._stored(run, 1 + SLACK, since=m.at),
        ]
        pool = {s.point_id: s for s in near if s.point_id not in mine}
        pool.update({o.point_id: o for o in members if o is not m})
        ordered = sorted(pool.values(), key=lambda o: o.key)
        later = [o for o in ordered if o.key > m.key]
        return [o for o in ordered if o.key < m.key], (later[0] if later else None)

    def _index(self, plan: Plan, m: Member, context: list[Member]) -> None:
        lines = [cut(c.summary, self.mode.words) for c in context]
        m.payload["context"] = [{"entry_id": c.entry_id, "text": t} for c, t in zip(context, lines, strict=True)]
        m.payload["context_ids"] = [c.entry_id for c in context]
        date = date_line(m.at) if self.mode.date else None
        if date:
            m.payload["context_date"] = date
        plan.vectors[m.point_id] = self.bm25.document(folded_text(lines, m.summary, date))

    def apply(self, plan: Plan, created_at: str) -> None:
        """Write the neighbours' edges (before the points: see the module doc), each under the write
        discipline: an edge another writer (the linker's `similar`) adds meanwhile is kept."""

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            edges = dict(plan.neighbours.get(pid, {}))
            for rel, (gone, then) in plan.detach.get(pid, {}).items():
                if rel not in edges and adjacent(payload, rel) == gone:
                    edges[rel] = then  # type: ignore[assignment]  # None: the edge goes
            return adjacent_change(payload, edges, created_at)

        targets = sorted({*plan.neighbours, *plan.detach})
        if targets:
            self.store.update_memories(targets, change, writer="run-edges", fields=("entry_id", "relations", "links"))


def adjacent_change(payload: dict[str, Any], edges: Mapping[str, str | None], created_at: str) -> Change | None:
    """The write that gives a memory (its `payload` as read) the run edges `edges` (relation -> entry id);
    None when it has them."""
    mine = {"entry_id": payload.get("entry_id"), "relations": payload.get("relations")}
    if not any([set_adjacent(mine, rel, dst, created_at) for rel, dst in edges.items()]):
        return None
    return Change({"relations": mine["relations"], "links": mine["links"]})


def scrub(
    store: MemoryStore, bm25: Bm25Encoder, workspace_id: str, gone: set[str], removed: dict[str, dict[str, Any]]
) -> int:
    """After a forget removed `removed` (point id -> payload), whose ids (and aliases) are `gone`: rebuild the
    context of the memories indexed with one of them, without their lines, and link each removed memory's
    run neighbours to each other. Returns the number of memories rewritten."""
    touched = 0
    if store.has_context:

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            have = [c for c in payload.get("context") or [] if isinstance(c, dict)]
            context = [c for c in have if c.get("entry_id") not in gone]
            if len(context) == len(have):
                return None  # rebuilt already (a retry after its own write)
            lines = [str(c.get("text", "")) for c in context]
            text = folded_text(lines, str(payload.get("summary", "")), payload.get("context_date") or None)
            fields = {"context": context, "context_ids": [str(c.get("entry_id")) for c in context]}
            return Change(fields, context=bm25.document(text))

        pids = [pid for pid, _ in store.find_by_context(workspace_id, sorted(gone)) if pid not in removed]
        report = store.update_memories(
            pids, change, writer="context-scrub", fields=("entry_id", "summary", "context", "context_date")
        )
        touched += len(report.applied)
    touched += relink(store, workspace_id, gone, removed.values())
    return touched


def cut_out(store: MemoryStore, workspace_id: str, removed: list[dict[str, Any]]) -> int:
    """After memories (payloads `removed`) left the workspace outside a forget (retention archived them, an
    import's target forgets kept them out): every edge to them cut and their run neighbours joined across
    the gap. Returns the number of edges cut.

    The removed memories keep their own edges (they are deleted after this, or were never stored): were
    they cut too, a crash before the join would leave a retry with no run to join across."""
    gone = {str(p.get("entry_id")) for p in removed}
    cut = store.remove_edges_to(workspace_id, sorted(gone), sparing={point_id(workspace_id, e) for e in gone})
    relink(store, workspace_id, gone, removed)
    return cut


def relink(store: MemoryStore, workspace_id: str, gone: set[str], removed: Iterable[dict[str, Any]]) -> int:
    """The neighbours of removed run members (payloads `removed`, ids `gone`), joined across the gap (a chain
    of removed memories skipped): after a forget, and after retention archived them."""
    prev_of: dict[str, str] = {}
    next_of: dict[str, str] = {}
    for p in removed:
        eid = str(p.get("entry_id", ""))
        for e in p.get("relations") or []:
            if isinstance(e, dict) and e.get("relation") == "previous":
                prev_of[eid] = str(e.get("dst"))
            elif isinstance(e, dict) and e.get("relation") == "next":
                next_of[eid] = str(e.get("dst"))
    pairs: dict[str, str] = {}
    for eid in prev_of:
        before, after = prev_of[eid], next_of.get(eid)
        seen = {eid}  # edges may form a cycle (written before moves were detached): walk each node once
        while before in gone and before in prev_of and before not in seen:
            seen.add(before)
            before = prev_of[before]
        seen = {eid}
        while after is not None and after in gone and after not in seen:
            seen.add(after)
            after = next_of.get(after)
        if before not in gone and after is not None:
            pairs[before] = after
    if not pairs:
        return 0
    ids = {point_id(workspace_id, e): e for e in {*pairs, *pairs.values()}}
    agent = {
        ids[pid]: p.get("agent_id") for pid, p in store.retrieve(sorted(ids), fields=("entry_id", "agent_id")).items()
    }
    edges: dict[str, dict[str, str]] = {}  # point id -> {relation: entry id}
    for before, after in pairs.items():
        # both still there, and one agent's (a chain written before runs were per agent may cross agents)
        if before in agent and after in agent and agent[before] == agent[after]:
            edges.setdefault(point_id(workspace_id, before), {})["next"] = after
            edges.setdefault(point_id(workspace_id, after), {})["previous"] = before
    now = _iso(datetime.now(UTC))

    def change(pid: str, payload: dict[str, Any]) -> Change | None:
        return adjacent_change(payload, edges[pid], now)

    report = store.update_memories(edges, change, writer="relink", fields=("entry_id", "relations", "links"))
    return len(report.applied)
