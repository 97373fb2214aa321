"""The nightly DecayAndReinforce job over the whole store, and retention (SPEC §8; seed 001 "Importance
scoring" and compaction). Over the ports; publishing archived memories is a callable handed in.

A run scans every memory in pages of `page_size`, computes each importance at one reference time (the run's
`now`) from the fields `episodic.domain.scoring` reads, and writes the ones that changed in one batched
store call per page (each memory read and written in one hold where the store can: `update_memories`,
`held`). It writes `importance_score` and nothing else, so ingestion, a re-index and reference counting can
go on meanwhile: none of their fields is overwritten (a reference counted during the run lifts the memory
at the next run). Recall reads `importance_score` on every query.

**Resumable.** The run's cursor (the next page's offset, its reference time and its counts) is saved in the
state store after every page. A run that stopped half way (a crash, a stop) is resumed from that page with
the same reference time by the next run that starts within `resume_within` of it; pages already written are
not scanned again. A page done twice (a crash after its write and before its cursor) writes the same values.

**One at a time.** The cursor document is also a lease (`holder`, `lease_until`, renewed every page): a run
refuses to start (`JobBusy`) while another process holds it. Check-then-write, so two processes starting in
the same instant could both run; a run is idempotent, so that only costs work.

**Retention** (off unless a `RetentionPolicy` is given): a memory at the importance floor for `floor_days`,
never referenced, without a priority marker (`episodic.domain.scoring.retention_eligible`) is published to
`memory.archived` (payload cut to 400 characters), then the edges other memories hold to it are dropped,
then it is deleted. A crash in between archives it again at the next run (consumers key the topic by
(workspace_id, entry_id)).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from episodic.domain.scoring import DECAY_FIELDS, importance_of, parse_time, retention_eligible
from episodic.domain.surprise import BOOST
from episodic.indexing.context import cut_out
from episodic.indexing.folding import unfold, unsupersede
from episodic.kernel.errors import EpisodicError
from episodic.kernel.metrics import DECAY_ACTIONS, Metrics
from episodic.kernel.ports import Change, MemoryStore, StateStore, WriteReport
from episodic.lifecycle.forget import TOMBSTONE, tombstone_key, tombstone_retired
from schemas.events import ARCHIVED_PAYLOAD_CHARS, ArchivedRecord

log = logging.getLogger(__name__)

JOB_KIND = "job"
DECAY_KEY = "decay"
CHANGED = 1e-6  # importance differences below this are not written
RETENTION = "retention"  # the forget id of the tombstones retention writes
_COUNTS = ("pages", "scanned", "updated", "unchanged", "archived", "edges_removed")

ArchiveSink = Callable[[list[ArchivedRecord]], None]  # returns once the broker acknowledged every record


def _now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


class JobStopped(EpisodicError):
    """The run was asked to stop (`request_stop`); its cursor is saved and the next run resumes it."""


class JobBusy(EpisodicError):
    """Another process holds the job's lease (a run is in progress there)."""

    def __init__(self, message: str, progress: dict[str, Any]) -> None:
        super().__init__(message)
        self.progress = progress


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    floor_days: float = 30.0


@dataclass
class DecayReport:
    run_id: str
    reference_time: str  # the `now` every importance of the run was computed at
    started_at: str
    finished_at: str = ""
    resumed: bool = False  # continued a run that stopped half way
    duration_s: float = 0.0  # this call's time (a resumed run's earlier part not included)
    pages: int = 0
    scanned: int = 0
    updated: int = 0
    unchanged: int = 0
    archived: int = 0
    edges_removed: int = 0
    ledger_pruned: int = 0
    retention: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rescore(
    store: MemoryStore, pids: list[str], at: datetime, *, reviews: str, writer: str, boost: float = BOOST
) -> WriteReport:
    """Each memory's importance at `at`, computed from the memory as it is at the write (a reference counted
    since the caller read it counts), written where it moved by `CHANGED` or more: the decay's write, and a
    review's. Held (`update_memories`): the computation reads only the payload, so Edge reads and writes
    each memory in one hold, with no conflicts."""

    def change(_pid: str, payload: dict[str, Any]) -> Change | None:
        value = importance_of(payload, at, reviews=reviews, boost=boost)
        old = payload.get("importance_score")
        if isinstance(old, int | float) and abs(float(old) - value) < CHANGED:
            return None
        return Change({"importance_score": value})

    return store.update_memories(pids, change, writer=writer, fields=(*DECAY_FIELDS, "importance_score"), held=True)


def archived_record(payload: dict[str, Any], archived_at: datetime) -> ArchivedRecord:
    """The `memory.archived` record of a stored memory: the memory, its payload as JSON cut to 400 chars."""
    text = json.dumps(payload.get("payload") or {}, ensure_ascii=False, separators=(",", ":"), default=str)

    def opt(key: str) -> Any:
        v = payload.get(key)
        return None if v is None else str(v)

    def num(key: str) -> float | None:
        v = payload.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return ArchivedRecord(
        entry_id=str(payload.get("entry_id", "")),
        workspace_id=str(payload.get("workspace_id", "")),
        crew_id=opt("crew_id"),
        agent_id=opt("agent_id"),
        run_id=opt("run_id"),
        ts=opt("ts"),
        entry_type=opt("entry_type"),
        severity=opt("severity"),
        summary=str(payload.get("summary") or ""),
        payload=text[:ARCHIVED_PAYLOAD_CHARS],
        payload_truncated=len(text) > ARCHIVED_PAYLOAD_CHARS,
        priority=opt("priority"),
        base_importance=num("base_importance"),
        importance_score=num("importance_score"),
        reference_count=int(num("reference_count") or 0),
        indexed_at=opt("indexed_at"),
        aliases=[str(a) for a in payload.get("aliases") or []],
        occurrences=int(num("occurrences") or 1),
        relations=[e for e in payload.get("relations") or [] if isinstance(e, dict)],
        archived_at=archived_at,
    )


class DecayJob:
    def __init__(
        self,
        *,
        store: MemoryStore,
        state: StateStore,
        clock: Callable[[], datetime] = _now,
        page_size: int = 512,
        retention: RetentionPolicy | None = None,
        archive: ArchiveSink | None = None,
        prune: Callable[[datetime], int] | None = None,
        holder: str | None = None,
        lease_s: float = 300.0,
        resume_within: timedelta = timedelta(hours=20),
        log_every_s: float = 5.0,
        wall: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        reviews: str = "off",
        surprise_boost: float = BOOST,
    ) -> None:
        if retention is not None and archive is None:
            raise ValueError("retention needs an archive sink (memory.archived)")
        self.store = store
        self.state = state
        self.clock = clock
        self.page_size = page_size
        self.retention = retention
        self.archive = archive
        self.prune = prune
        self.holder = holder or f"decay-{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.resume_within = resume_within
        self.log_every_s = log_every_s
        self.wall = wall
        self.metrics = metrics
        self.reviews = reviews  # EPISODIC_REVIEW_RANKING: whether reviews reinforce (episodic.domain.review)
        self.surprise_boost = surprise_boost  # EPISODIC_SURPRISE_BOOST (episodic.domain.surprise)
        self._scanned = DECAY_FIELDS if retention is not None else ("entry_id",)
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Stop a run in progress after its current page (from any thread); later runs are refused too."""
        self._stop.set()

    # -- state -----------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """The cursor document: the last run (done) or the one in progress (running)."""
        return self.state.get(JOB_KIND, DECAY_KEY)

    def _held_elsewhere(self, doc: dict[str, Any] | None) -> bool:
        return (
            doc is not None
            and doc.get("status") == "running"
            and doc.get("holder") != self.holder
            and float(doc.get("lease_until") or 0) > self.wall()
        )

    def due(self, last_due: datetime) -> bool:
        """Should a run start now? Never run; the last finished run older than the schedule's latest fire
        time `last_due`; or a run that stopped half way and is held by nobody."""
        doc = self.status()
        if doc is None:
            return True
        if doc.get("status") == "running":
            return not self._held_elsewhere(doc)
        ref = parse_time(doc.get("reference_time"))
        return ref is None or ref < last_due

    def _save(self, doc: dict[str, Any]) -> None:
        doc["holder"], doc["lease_until"] = self.holder, self.wall() + self.lease_s
        self.state.put(JOB_KIND, DECAY_KEY, doc)

    def _begin(self) -> tuple[dict[str, Any], DecayReport]:
        doc = self.status()
        if doc is not None and self._held_elsewhere(doc):
            raise JobBusy(f"a decay run is in progress in {doc.get('holder')}", dict(doc))
        now = self.clock()
        ref = parse_time((doc or {}).get("reference_time"))
        if doc is not None and doc.get("status") == "running" and ref is not None and now - ref < self.resume_within:
            report = DecayReport(
                run_id=str(doc.get("run_id") or uuid.uuid4().hex[:12]),
                reference_time=iso(ref),
                started_at=str(doc.get("started_at") or iso(now)),
                resumed=True,
            )
            for k in _COUNTS:
                setattr(report, k, int(doc.get(k) or 0))
            offset = doc.get("offset")
            log.info(
                "decay: resuming run %s at page %d (%d memories done)", report.run_id, report.pages, report.scanned
            )
        else:
            report = DecayReport(run_id=uuid.uuid4().hex[:12], reference_time=iso(now), started_at=iso(now))
            offset = None
        report.retention = self.retention is not None
        doc = {**report.as_dict(), "status": "running", "offset": offset}
        self._save(doc)
        confirmed = self.status()
        if confirmed is None or confirmed.get("holder") != self.holder:
            raise JobBusy("another process took the decay run", dict(confirmed or {}))
        return doc, report

    # -- the run ---------------------------------------------------------------------------------------

    def run(self) -> DecayReport:
        """One whole run (or the rest of an interrupted one); returns what it did. Raises JobBusy."""
        m = self.metrics
        try:
            report = self._run_once()
        except JobBusy:
            if m is not None:
                m.decay_runs.labels(outcome="busy").inc()
            raise
        except JobStopped:
            raise
        except BaseException:
            if m is not None:
                m.decay_runs.labels(outcome="failed").inc()
            raise
        if m is not None:
            m.decay_runs.labels(outcome="ok").inc()
            m.decay_duration.observe(report.duration_s)
            for action in DECAY_ACTIONS:
                m.decay_memories.labels(action=action).inc(getattr(report, action))
            m.decay_last_success.set(self.wall())
        return report

    def _run_once(self) -> DecayReport:
        t0 = time.perf_counter()
        doc, report = self._begin()
        try:
            return self._run(doc, report, t0)
        except BaseException:
            # a failure or a stop leaves the cursor where it is and lets the next run take it at once
            # (a process killed outright holds the lease until it expires, `lease_s`)
            doc["lease_until"] = 0.0
            try:
                self.state.put(JOB_KIND, DECAY_KEY, doc)
            except Exception as e:
                log.warning("decay: could not release the run's lease: %s", e)
            raise

    def _run(self, doc: dict[str, Any], report: DecayReport, t0: float) -> DecayReport:
        ref = parse_time(report.reference_time) or self.clock()
        total = self.store.count()
        last_log = time.monotonic()
        offset: str | None = doc.get("offset")
        while True:
            if self._stop.is_set():
                raise JobStopped(f"decay run {report.run_id} stopped after {report.pages} pages; it resumes later")
            # the page's fields only where retention reads them: the write reads each memory again anyway
            page, offset = self.store.scroll_page(offset, self.page_size, fields=self._scanned)
            self._page(page, ref, report)
            report.pages += 1
            doc.update(report.as_dict(), offset=offset)
            self._save(doc)
            if time.monotonic() - last_log >= self.log_every_s:
                last_log = time.monotonic()
                log.info(
                    "decay: %d/%d memories (%.0f %%), %d updated, %d archived, %.1f s",
                    report.scanned,
                    total,
                    100.0 * report.scanned / max(1, total),
                    report.updated,
                    report.archived,
                    time.perf_counter() - t0,
                )
            if offset is None:
                break
        if self.prune is not None:
            report.ledger_pruned = self.prune(ref)
        report.finished_at = iso(self.clock())
        report.duration_s = round(time.perf_counter() - t0, 3)
        doc.update(report.as_dict(), status="done", offset=None)
        self._save(doc)
        log.info(
            "decay: run %s done: %d memories, %d updated, %d archived, %d edges removed in %.1f s",
            report.run_id,
            report.scanned,
            report.updated,
            report.archived,
            report.edges_removed,
            report.duration_s,
        )
        return report

    def _page(self, page: list[tuple[str, dict[str, Any]]], ref: datetime, report: DecayReport) -> None:
        report.scanned += len(page)
        retired = self._retired(page) if self.retention is not None else set()
        expired = [
            pid
            for pid, payload in page
            if self.retention is not None
            and (pid in retired or retention_eligible(payload, ref, floor_days=self.retention.floor_days))
        ]
        if expired:
            self._expire(expired, report)
        gone = set(expired)
        kept = [pid for pid, _ in page if pid not in gone]
        done = rescore(self.store, kept, ref, reviews=self.reviews, writer="decay", boost=self.surprise_boost)
        report.updated += len(done.applied)
        report.unchanged += done.unchanged

    def _retired(self, page: list[tuple[str, dict[str, Any]]]) -> set[str]:
        """The memories of the page that an earlier run archived and tombstoned but died before deleting: they
        are finished now whatever their eligibility (a reference since would otherwise leave a tombstoned
        memory in the store, its neighbours' edges to it already cut)."""
        keys = {tombstone_key(str(p.get("workspace_id")), str(p.get("entry_id"))): pid for pid, p in page}
        found = self.state.get_many(TOMBSTONE, sorted(keys)) if keys else {}
        return {
            keys[k] for k, doc in found.items() if doc.get("forget_id") == RETENTION and doc.get("role") == "memory"
        }

    def _expire(self, pids: list[str], report: DecayReport) -> None:
        full = self.store.retrieve(pids)
        if not full or self.archive is None:
            return
        at = self.clock()
        self.archive([archived_record(p, at) for p in full.values()])
        # before the delete: a crash after it must not leave an archived memory that a replay brings back
        tombstone_retired(self.state, full.values(), at, reason=RETENTION)
        by_ws: dict[str, list[dict[str, Any]]] = {}
        for p in full.values():
            by_ws.setdefault(str(p.get("workspace_id")), []).append(p)
        for ws, removed in by_ws.items():  # edges to them cut; a run stays walkable across what retention took
            report.edges_removed += cut_out(self.store, ws, removed)
        for ws in by_ws:  # near-duplicate folds: what stays drops the parts retention took, or takes over
            mine = {pid: p for pid, p in full.items() if p.get("workspace_id") == ws}
            unfold(self.store, ws, mine)
            unsupersede(self.store, ws, mine)
        self.store.delete(list(full))
        report.archived += len(full)
