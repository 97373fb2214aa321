"""Forgetting memories (SPEC §11 "Forget is an event"): applying a forget, and keeping what it removed out.

A forget (`schemas.events.ForgetRecord`) travels on `journal.embeddable`, keyed by its workspace like the
entries, and the embedding consumer hands it here in order with that workspace's records: `Forgetter.apply`
before the batch is indexed, `Forgetter.admit` on the batch's entries. What "before the forget" means:

- **By id** (`entry_ids`, and every memory any forget removes: its entry id and its aliases): a tombstone per
  (workspace_id, id) in the state store. That id is never indexed again, whatever its time or position:
  re-delivery, a replay of the journal, a dead-letter replay. A forget narrowed to an agent (`agent_id`
  with `entry_ids`: a bound token's) removes only that agent's memories among the ids, and the ids it asked
  for that no memory has yet are tombstoned for that agent only (another agent's entry of that id passes).
- **By agent, run or the whole workspace**: besides the tombstones of the memories removed, a rule (one
  state document per workspace lists them) keeps out the entries of the selection that were still on their
  way when the forget was requested. "Before the forget" is decided by the acceptance stamp alone: an entry
  of the selection is kept out when the gate (or the HTTP journal) accepted it (`accepted_at`, written into
  the record, kept through re-delivery and replay of `journal.embeddable`) at or before the forget's
  `requested_at`. Both stamps come from the pipeline's clocks, not the agent's and not the broker's: the
  entry's own `ts` never decides (an agent with a slow clock, or one flushing a buffer, writes entries
  with an old `ts` after the forget: they are new and indexed), and neither does the position on the topic
  (offsets start again from 0 when the embedded broker restarts or a topic is re-created; a rule anchored
  to an offset would then keep every new entry of the selection out). The rule takes effect as soon as the
  broker holds the forget (`announce`, by the recall service), so a backlog of the selection queued ahead
  of the forget is left out, not embedded and then removed; the consumer still applies the forget at its
  place in the stream. **Retired**: a rule goes `RULE_HORIZON` (7 days, Kafka's default retention) after
  its `requested_at`, when nothing accepted before it can still be on its way.
- **Every id a memory absorbed**: a memory keeps only its newest aliases, but the state store keeps every
  id it absorbed for the horizon (`episodic.indexing.absorbed`), and removing the memory tombstones all of
  them: the 30 heartbeats sent again after the forget stay out, all 30, whenever they come back. Every exact
  duplicate also shares the memory's dedup key (workspace, agent, entry type, normalised text): removing a
  memory tombstones that key too (kind `forgotten_text`), so an entry with that key accepted at or before
  the forget stays out even when its id was absorbed longer ago than the horizon; the same text under a new
  id accepted after the forget is a new memory.

Applying removes the memories that match (a forgotten alias takes its whole memory with it: an alias is the same
text; a near duplicate folded into another memory is its own point, so forgetting it, or its agent, takes only
that part out of the memory, and forgetting a memory that absorbed others leaves them standing,
`episodic.indexing.folding.unfold`), tombstones every id they carry, removes the edges of other memories that
point at them (their own edges go with them), takes their text out of the run context other memories were
indexed with and links their run neighbours to each other (`episodic.indexing.context.scrub`), then deletes
them; the memories' reference counts and importance live on their points, so they go too, and counts and health
computed from the store no longer see them. The outcome is recorded in a status document (kind `forget`, key the
forget id) that the recall service reads back. Re-applying an applied forget (re-delivery) changes nothing; a
crash half-way is re-applied in full.

Size: a little over 400 lines: applying a forget is one ordered, crash-safe procedure (tombstones, edges,
run context, delete) that reads top to bottom here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

import msgspec

from episodic.domain.identity import dedup_key, point_id
from episodic.indexing import absorbed
from episodic.indexing.context import scrub
from episodic.indexing.folding import unfold, unsupersede
from episodic.kernel.ports import MemoryStore, Selection, StateStore
from episodic.store.sparse import Bm25Encoder
from schemas.events import MAX_FORGET_IDS, EmbeddableRecord, ForgetRecord, ForgetSelector, ForgottenEvent

log = logging.getLogger(__name__)

# State kinds (episodic.kernel.ports.StateStore)
STATUS = "forget"  # forget id -> its status document
TOMBSTONE = "tombstone"  # tombstone_key(workspace, entry id) -> {workspace_id, entry_id, forget_id, at}
RULES = "forget_rules"  # workspace id -> {"workspace_id", "rules": [rule, ...]}
TEXT_TOMBSTONE = "forgotten_text"  # tombstone_key(workspace, dedup key) -> {workspace_id, forget_id, before}
EARLY = "forget_early"  # forget id -> {"workspace_id", "rule": rule}: queued, not applied yet (see `announce`)
MAX_EARLY = 10_000  # early rules read per batch (each lives from its forget's queueing to its application)

RULE_HORIZON = absorbed.HORIZON  # a rule is retired this long after its forget (nothing older can still arrive)

PENDING, APPLIED, FAILED = "pending", "applied", "failed"
PAGE = 256  # memories removed per step
SHOWN_IDS = 100  # removed ids listed in the status document (all of them go out on memory.forgotten)


def _now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def tombstone_key(workspace_id: str, entry_id: str) -> str:
    """Unambiguous for any ids (a JSON array of the two)."""
    return msgspec.json.encode([workspace_id, entry_id]).decode()


def tombstone_retired(state: StateStore, payloads: Iterable[dict[str, Any]], at: datetime, *, reason: str) -> int:
    """Tombstone the ids (entry id and aliases) of memories removed outside a forget (retention archives
    them), so that a re-delivery or a replay does not index them again and the health ledger stops counting
    them; an id already tombstoned keeps its tombstone. Returns how many were written."""
    docs: dict[str, dict[str, Any]] = {}
    for p in payloads:
        ws = str(p.get("workspace_id"))
        roles = {e: "alias" for e in absorbed.owned_by(state, ws, [str(p.get("entry_id"))])}
        roles |= {str(a): "alias" for a in p.get("aliases") or []} | {str(p.get("entry_id")): "memory"}
        for eid, role in roles.items():
            base = {"workspace_id": ws, "entry_id": eid, "forget_id": reason, "role": role, "at": iso(at)}
            docs[tombstone_key(ws, eid)] = base
    written = 0
    for chunk in _chunks(sorted(docs), PAGE):
        have = state.get_many(TOMBSTONE, chunk)
        new = {k: docs[k] for k in chunk if k not in have}
        if new:
            state.put_many(TOMBSTONE, new)
            written += len(new)
    return written


def tombstoned(state: StateStore, workspace_id: str, agents: Mapping[str, Any]) -> set[str]:
    """Which of the ids in `agents` (entry id -> the agent of the memory or entry that holds it) a forget or
    retention tombstoned for that agent (a tombstone without an agent holds for every agent)."""
    out: set[str] = set()
    for chunk in _chunks(sorted(agents), PAGE):
        keys = {tombstone_key(workspace_id, e): e for e in chunk}
        for key, tomb in state.get_many(TOMBSTONE, sorted(keys)).items():
            if tomb.get("agent_id") in (None, agents[keys[key]]):
                out.add(keys[key])
    return out


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record lies on `journal.embeddable`."""

    partition: int
    offset: int


@dataclass(slots=True)
class ForgetOutcome:
    forget: ForgetRecord
    at: datetime
    memories: int = 0
    edges: int = 0
    entry_ids: list[str] = field(default_factory=list)  # every id tombstoned: the memories' and their aliases'
    repeated: bool = False  # applied before (a re-delivery): nothing was done this time

    def events(self) -> list[ForgottenEvent]:
        """`memory.forgotten`, the removed ids in parts (one part when nothing was removed)."""
        parts = list(_chunks(self.entry_ids, MAX_FORGET_IDS)) or [[]]
        return [
            ForgottenEvent(
                forget_id=self.forget.forget_id,
                workspace_id=self.forget.workspace_id,
                selector=self.forget.selector,
                at=self.at,
                memories=self.memories,
                edges=self.edges,
                entry_ids=ids,
                part=n,
                last=n == len(parts) - 1,
            )
            for n, ids in enumerate(parts)
        ]


def status_document(
    forget: ForgetRecord, status: str, *, position: Position | None = None, **extra: Any
) -> dict[str, Any]:
    """The status document of a forget (the recall service writes it pending, the consumer applied)."""
    doc: dict[str, Any] = {
        "forget_id": forget.forget_id,
        "workspace_id": forget.workspace_id,
        "selector": msgspec.to_builtins(forget.selector),
        "status": status,
        "requested_at": iso(forget.requested_at),
        "requested_by": forget.requested_by,
    }
    if position is not None:
        doc["partition"], doc["offset"] = position.partition, position.offset
    doc.update(extra)
    return doc


def _rule(forget: ForgetRecord, position: Position | None) -> dict[str, Any]:
    sel = forget.selector
    return {
        "forget_id": forget.forget_id,
        "agent_id": sel.agent_id,
        "run_id": sel.run_id,
        "all": sel.all,
        "before": iso(forget.requested_at),
        "partition": position.partition if position is not None else None,
        "offset": position.offset if position is not None else None,
    }


def _supersedes(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """A whole-workspace rule keeps out everything an older rule does (its cut-off is no earlier)."""
    return bool(new["all"]) and parse_iso(old["before"]) <= parse_iso(new["before"])


def retired(rule: dict[str, Any], now: datetime) -> bool:
    """Whether nothing the rule covers can still arrive (`RULE_HORIZON` after its forget)."""
    try:
        return now - parse_iso(str(rule["before"])) > RULE_HORIZON
    except (KeyError, ValueError):
        return False


def selects(rule: dict[str, Any], agent_id: str | None, run_id: str | None) -> bool:
    """Whether a rule's selection (agent, run; none: the whole workspace) takes an entry of this agent, run."""
    return rule.get("agent_id") in (None, agent_id) and rule.get("run_id") in (None, run_id)


def covers(rule: dict[str, Any], record: EmbeddableRecord, position: Position | None = None) -> bool:
    """True when `rule` keeps `record` out: the record is of the rule's selection and was accepted at or
    before the forget (the module doc says why neither `ts` nor `position` decides; `position` is unused)."""
    return selects(rule, record.agent_id, record.run_id) and record.accepted_at <= parse_iso(rule["before"])


@dataclass(slots=True)
class Handled:
    """A batch after its forgets: the records to index, how many were left out, what each forget did."""

    kept: list[EmbeddableRecord]
    left_out: int
    outcomes: list[ForgetOutcome]

    def events(self) -> list[ForgottenEvent]:
        return [e for o in self.outcomes for e in o.events()]


class Forgetter:
    """Applies forgets to the store and keeps forgotten entries out; state in the StateStore."""

    def __init__(
        self,
        *,
        store: MemoryStore,
        state: StateStore,
        clock: Callable[[], datetime] = _now,
        bm25: Bm25Encoder | None = None,
    ) -> None:
        self.store = store
        self.state = state
        self.clock = clock
        self.bm25 = bm25 or Bm25Encoder()

    def handle(
        self,
        forgets: Sequence[tuple[ForgetRecord, Position | None]],
        records: Sequence[EmbeddableRecord],
        positions: Sequence[Position | None],
    ) -> Handled:
        """A consumer batch: apply its forgets, then keep the records that nothing covers. A record before a
        forget in the batch is covered by it, so applying the forgets first and filtering the whole batch
        equals applying everything in offset order. Safe to run again after a failure half-way."""
        outcomes = [self.apply(forget, position) for forget, position in forgets]
        kept, out = self.admit(records, positions)
        return Handled(kept, len(out), outcomes)

    # -- keeping forgotten entries out ------------------------------------------------------------------
    def admit(
        self, records: Sequence[EmbeddableRecord], positions: Sequence[Position | None] | None = None
    ) -> tuple[list[EmbeddableRecord], list[EmbeddableRecord]]:
        """(kept, left out): the records no tombstone and no rule of their workspace covers, in order."""
        if not records:
            return [], []
        where = list(positions) if positions is not None else [None] * len(records)
        dead = self.state.get_many(TOMBSTONE, sorted({tombstone_key(r.workspace_id, r.id) for r in records}))
        rules: dict[str, list[dict[str, Any]]] = {
            ws: list(doc.get("rules") or [])
            for ws, doc in self.state.get_many(RULES, sorted({r.workspace_id for r in records})).items()
        }
        for _, doc in self.state.scan(EARLY, limit=MAX_EARLY):
            if isinstance(doc.get("rule"), dict):
                rules.setdefault(str(doc.get("workspace_id")), []).append(doc["rule"])
        texts = [
            tombstone_key(r.workspace_id, dedup_key(r.workspace_id, r.agent_id, r.entry_type, r.summary))
            for r in records
        ]
        dead_texts = self.state.get_many(TEXT_TOMBSTONE, sorted(set(texts)))
        kept: list[EmbeddableRecord] = []
        out: list[EmbeddableRecord] = []
        for rec, pos, text_key in zip(records, where, texts, strict=True):
            tomb = dead.get(tombstone_key(rec.workspace_id, rec.id))
            text = dead_texts.get(text_key)
            if (
                (tomb is not None and tomb.get("agent_id") in (None, rec.agent_id))
                or (text is not None and rec.accepted_at <= parse_iso(str(text.get("before"))))
                or any(covers(rule, rec, pos) for rule in rules.get(rec.workspace_id, ()))
            ):
                out.append(rec)
            else:
                kept.append(rec)
        return kept, out

    # -- applying a forget ------------------------------------------------------------------------------
    def apply(self, forget: ForgetRecord, position: Position | None = None) -> ForgetOutcome:
        """Remove what `forget` selects. Idempotent: an applied forget is not applied again (its outcome is
        read back, so that its events can be published again), and one interrupted half-way is re-applied;
        the ids and the memory count come from its tombstones, so they are exact either way."""
        done = self.state.get(STATUS, forget.forget_id)
        if done is not None and done.get("status") == APPLIED:
            outcome = ForgetOutcome(forget, parse_iso(str(done.get("applied_at"))), repeated=True)
            outcome.edges = int((done.get("removed") or {}).get("edges", 0))
            self._count(outcome)
            return outcome
        sel, ws = forget.selector, forget.workspace_id
        if sel.entry_ids is None:
            self._add_rule(forget, position)
        outcome = ForgetOutcome(forget, self.clock())
        if sel.entry_ids is not None:
            found = self._by_ids(ws, sel.entry_ids)
            if sel.agent_id is not None:  # narrowed: only that agent's memories among them; another agent's id
                # is handled as an id of no memory, so that the answer cannot tell the two apart (issue 29)
                found = {pid: p for pid, p in found.items() if p.get("agent_id") == sel.agent_id}
            owned = {str(p.get("entry_id")) for p in found.values()}
            owned |= {str(a) for p in found.values() for a in p.get("aliases") or []}
            # ids asked for that no memory has (yet) are tombstoned too: they may be on their way
            requested = {e: "requested" for e in sel.entry_ids if e not in owned}
            self._tombstone(forget, requested, outcome.at, agent_id=sel.agent_id)
            targets: Iterable[tuple[str, dict[str, Any]]] = found.items()
        else:
            targets = self.store.select(Selection(ws, agent_id=sel.agent_id, run_id=sel.run_id))
        for page in _chunks(targets, PAGE):
            self._remove(forget, dict(page), outcome)
        self._count(outcome)
        applied = status_document(
            forget,
            APPLIED,
            position=position,
            applied_at=iso(outcome.at),
            removed={"memories": outcome.memories, "entry_ids": len(outcome.entry_ids), "edges": outcome.edges},
            removed_ids=outcome.entry_ids[:SHOWN_IDS],
        )
        self.state.put(STATUS, forget.forget_id, applied)
        self.state.delete(EARLY, [forget.forget_id])  # its rule, with its position, is the workspace's now
        log.info(
            "forget %s applied to %s (%s): %d memories, %d ids, %d edges",
            forget.forget_id,
            ws,
            sel.kind,
            outcome.memories,
            len(outcome.entry_ids),
            outcome.edges,
        )
        return outcome

    def fail(self, forget: ForgetRecord, position: Position | None, failure: str) -> None:
        """The store refused to apply `forget` (not transiently): its status says failed, with the error, so
        the caller can ask again. What it removed before the failure stays removed (tombstoned), and its rule
        keeps the selection's earlier entries out; asking again removes the rest."""
        failed = status_document(forget, FAILED, position=position, failure=f"could not apply: {failure}"[:500])
        self.state.put(STATUS, forget.forget_id, failed)
        self.state.delete(EARLY, [forget.forget_id])  # the workspace's rule (added first) keeps what it must

    def fail_unreadable(self, raw: bytes, failure: str) -> str | None:
        """A forget the consumer could not decode was dead-lettered (`bad_control`): when its bytes still
        name a forget this state knows (its id, its workspace), its status says failed with the reason, and
        its early rule goes, so that it neither stays pending for ever nor keeps entries out. Returns the
        forget id it settled, if any."""
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        fid = doc.get("forget_id") if isinstance(doc, dict) else None
        if not isinstance(fid, str) or not fid or len(fid) > 256:
            return None
        status = self.state.get(STATUS, fid)
        if status is None or status.get("workspace_id") != doc.get("workspace_id") or status.get("status") == APPLIED:
            return None
        why = f"dead-lettered (bad_control): the consumer could not read it ({failure}); nothing of it was applied"
        self.state.put(STATUS, fid, {**status, "status": FAILED, "failure": why[:500]})
        self.state.delete(EARLY, [fid])
        return fid

    def _count(self, outcome: ForgetOutcome) -> None:
        """The ids this forget tombstoned, and how many of them were memories (not aliases or ids asked for)."""
        forget = outcome.forget
        docs = [
            doc
            for _, doc in self.state.scan(
                TOMBSTONE, where={"workspace_id": forget.workspace_id, "forget_id": forget.forget_id}
            )
        ]
        outcome.entry_ids = sorted(str(d.get("entry_id")) for d in docs)
        outcome.memories = sum(1 for d in docs if d.get("role") == "memory")

    def _by_ids(self, workspace_id: str, entry_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The memories that own these ids, as their entry id or as an alias."""
        return dict(owners_of(self.store, workspace_id, entry_ids, self.state).values())

    def _add_rule(self, forget: ForgetRecord, position: Position | None) -> None:
        ws = forget.workspace_id
        doc = self.state.get(RULES, ws) or {"workspace_id": ws, "rules": []}
        rules = [r for r in doc.get("rules") or [] if isinstance(r, dict)]
        if any(r.get("forget_id") == forget.forget_id for r in rules):
            return
        new = _rule(forget, position)
        now = self.clock()
        rules = [r for r in rules if not _supersedes(new, r) and not retired(r, now)] + [new]
        self.state.put(RULES, ws, {"workspace_id": ws, "rules": rules})

    def _tombstone(
        self, forget: ForgetRecord, roles: dict[str, str], at: datetime, *, agent_id: str | None = None
    ) -> None:
        """Tombstone each id with its role (`memory`, `alias`, `requested`), for `agent_id`'s entries only
        when given; an id another forget already tombstoned keeps that tombstone (it was forgotten then),
        unless that one held for one agent only and this one holds for every entry."""
        ws = forget.workspace_id
        for chunk in _chunks(sorted(roles), PAGE):
            keys = {tombstone_key(ws, e): e for e in chunk}
            taken = {
                k
                for k, doc in self.state.get_many(TOMBSTONE, list(keys)).items()
                if doc.get("forget_id") != forget.forget_id and (doc.get("agent_id") is None or agent_id is not None)
            }
            base = {"workspace_id": ws, "forget_id": forget.forget_id, "at": iso(at)}
            if agent_id is not None:
                base["agent_id"] = agent_id
            docs = {k: {**base, "entry_id": e, "role": roles[e]} for k, e in keys.items() if k not in taken}
            if docs:
                self.state.put_many(TOMBSTONE, docs)

    def _tombstone_texts(self, forget: ForgetRecord, payloads: Iterable[dict[str, Any]]) -> None:
        """The dedup keys of the removed memories: every duplicate they absorbed (also the ids their alias
        lists no longer name) accepted before the forget stays out (see the module doc)."""
        ws = forget.workspace_id
        keys = {tombstone_key(ws, str(p["dedup_key"])) for p in payloads if p.get("dedup_key")}
        before = iso(forget.requested_at)
        for chunk in _chunks(sorted(keys), PAGE):
            have = self.state.get_many(TEXT_TOMBSTONE, chunk)
            docs = {
                k: {"workspace_id": ws, "forget_id": forget.forget_id, "before": before}
                for k in chunk
                if k not in have or parse_iso(str(have[k].get("before"))) < forget.requested_at
            }
            if docs:
                self.state.put_many(TEXT_TOMBSTONE, docs)

    def _remove(self, forget: ForgetRecord, targets: dict[str, dict[str, Any]], outcome: ForgetOutcome) -> None:
        """Tombstone the ids of `targets`, cut the edges that point at them, delete them (in that order, so
        that a crash half-way leaves nothing that could come back)."""
        ws = forget.workspace_id
        # every id the memories absorbed, not only the newest that their alias lists keep (issue 45)
        owners = [str(p.get("entry_id")) for p in targets.values()]
        roles = {e: "alias" for e in absorbed.owned_by(self.state, ws, owners)}
        for payload in targets.values():
            for alias in payload.get("aliases") or []:
                roles[str(alias)] = "alias"
            roles[str(payload.get("entry_id"))] = "memory"
            outcome.edges += len(payload.get("relations") or [])
        self._tombstone(forget, roles, outcome.at)
        self._tombstone_texts(forget, targets.values())
        if not forget.selector.all:  # edges never cross workspaces: a whole-workspace forget leaves none behind
            gone = set(roles)
            for chunk in _chunks(sorted(gone), PAGE):
                outcome.edges += self.store.remove_edges_to(ws, chunk, sparing=targets)
            scrub(self.store, self.bm25, ws, gone, targets)
            # near-duplicate folds: the memories that stay drop these parts, or take over from an owner removed
            unfold(self.store, ws, targets)
            unsupersede(self.store, ws, targets)  # and the older facts they replaced are current again
        self.store.delete(sorted(targets))


def owners_of(
    store: MemoryStore, workspace_id: str, entry_ids: Sequence[str], state: StateStore | None = None
) -> dict[str, tuple[str, dict[str, Any]]]:
    """For each of `entry_ids` that names a memory of the workspace, as its entry id, as an alias, or (with
    `state`) as an id it absorbed that its alias list no longer keeps: that memory's (point id, payload).
    Ids with no memory are left out."""
    pids = {e: point_id(workspace_id, e) for e in dict.fromkeys(entry_ids)}
    points = store.retrieve(list(pids.values()))
    out = {e: (pid, points[pid]) for e, pid in pids.items() if pid in points}
    via_alias = store.find_by_alias(workspace_id, [e for e in pids if e not in out])
    if state is not None:
        rest = [e for e in pids if e not in out and e not in via_alias]
        via_alias |= {e: point_id(workspace_id, o) for e, o in absorbed.holders(state, workspace_id, rest).items()}
    aliased = store.retrieve(sorted(set(via_alias.values())))
    out.update({e: (pid, aliased[pid]) for e, pid in via_alias.items() if pid in aliased})
    return out


def announce(state: StateStore, forget: ForgetRecord) -> None:
    """Called by the recall service once the broker holds `forget`: its rule takes effect at once, before
    the consumer reaches the forget on the topic, so that the selection's entries queued ahead of it (a
    backlog, a lagging gate) are left out rather than embedded and then removed. Such an entry is one the
    forget would remove anyway; when the forget is applied, its rule (now with its position) replaces this
    one. Only agent, run and workspace forgets have a rule (ids are tombstoned when applied)."""
    if forget.selector.entry_ids is not None:
        return
    state.put(EARLY, forget.forget_id, {"workspace_id": forget.workspace_id, "rule": _rule(forget, None)})
    done = state.get(STATUS, forget.forget_id)
    if done is not None and done.get("status") == APPLIED:  # applied meanwhile: the workspace's rule holds it
        state.delete(EARLY, [forget.forget_id])


def selector_of(
    *, entry_ids: list[str] | None = None, agent_id: str | None = None, run_id: str | None = None, all: bool = False
) -> ForgetSelector:
    """A selector from the API's fields (ValueError unless they make one selection: see ForgetSelector)."""
    return ForgetSelector(
        entry_ids=list(dict.fromkeys(entry_ids)) if entry_ids else None, agent_id=agent_id, run_id=run_id, all=all
    )
