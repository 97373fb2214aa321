"""Health snapshots over the ports: gather a workspace's inputs once (its memories with their vectors from
the store, its ledger and recall tallies from the state store), compute the snapshot of the workspace and
of each of its crews with the pure functions of `episodic.domain.health`, store them, read them back.

Stored (StateStore, survives restarts): kind `health.snapshot`, one document per (workspace, crew or
none, UTC date), kept `history_days`; kind `health.latest`, the latest per (workspace, crew or none); kind
`health.job`, the date of the last completed daily run. At most one scheduled snapshot per scope per day:
a workspace whose snapshot of today exists is skipped unless forced (the admin endpoint), which replaces
today's. The workspace's own snapshot is written after its crews', so a run cut short is redone whole.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np

from episodic.domain import health as H
from episodic.kernel.errors import EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.health_inputs import accepted_ids, known_workspaces, prune_recalls, recall_cosines
from episodic_client.timestamps import parse_timestamp
from schemas.events import HealthInputs, HealthMetrics, HealthSnapshot, HealthTrigger, InvalidRecord
from schemas.topics import MEMORY_HEALTH

log = logging.getLogger(__name__)

SNAPSHOT_KIND = "health.snapshot"
LATEST_KIND = "health.latest"
JOB_KIND = "health.job"
DAILY_KEY = "daily"

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class HealthConfig:
    daily_at: str = "03:00"
    half_life_days: float = 60.0
    coherence_sample: int = 512
    coherence_floor: float = 0.30
    coherence_ceiling: float = 0.80
    efficiency_window_days: int = 7
    efficiency_floor: float = 0.20
    efficiency_ceiling: float = 0.70
    history_days: int = 400

    @classmethod
    def from_settings(cls, s: Settings) -> HealthConfig:
        return cls(
            daily_at=s.health_daily_at,
            half_life_days=s.health_freshness_half_life_days,
            coherence_sample=s.health_coherence_sample,
            coherence_floor=s.health_coherence_floor,
            coherence_ceiling=s.health_coherence_ceiling,
            efficiency_window_days=s.health_efficiency_window_days,
            efficiency_floor=s.health_efficiency_floor,
            efficiency_ceiling=s.health_efficiency_ceiling,
            history_days=s.health_history_days,
        )


def scope_key(workspace_id: str, crew_id: str | None) -> str:
    return json.dumps([workspace_id, crew_id or ""], ensure_ascii=False)


def snapshot_key(workspace_id: str, crew_id: str | None, day: str) -> str:
    return json.dumps([workspace_id, crew_id or "", day], ensure_ascii=False)


def window_days(today: datetime, n: int) -> list[str]:
    """The last `n` UTC dates up to `today`, oldest first (YYYY-MM-DD)."""
    d = today.astimezone(UTC).date()
    return [(d - timedelta(days=i)).isoformat() for i in range(n - 1, -1, -1)]


@dataclass(frozen=True, slots=True)
class Memory:
    """What a snapshot needs of one memory."""

    ids: tuple[str, ...]  # entry_id, then its aliases
    crew: str  # "" for none
    ts: datetime | None
    dense: bool
    links_out: bool  # it has an outgoing relation


@dataclass
class WorkspaceData:
    workspace_id: str
    memories: list[Memory]
    keys: list[str]  # point ids, for the stable coherence sample
    rows: np.ndarray  # (R, d) unit chunk vectors of the memories that have them
    owners: np.ndarray  # (R,) index into `memories`
    incoming: set[str]  # entry ids that some memory of the workspace links to
    accepted: dict[str, str]  # ledger: entry id -> crew ("" for none)
    recalls: dict[str, tuple[int, float]]  # "" or crew -> (hits, cosine sum) in the efficiency window

    def crews(self) -> list[str]:
        return sorted({m.crew for m in self.memories if m.crew} | {c for c in self.accepted.values() if c})


def _ts(value: Any) -> datetime | None:
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def gather(store: MemoryStore, state: StateStore, workspace_id: str, *, recall_days: list[str]) -> WorkspaceData:
    """Read everything a workspace's snapshots need: one scroll of its memories (with vectors), its ledger,
    its recall tallies."""
    memories: list[Memory] = []
    keys: list[str] = []
    blocks: list[list[float]] = []  # every chunk row of the workspace, then one matrix
    owners: list[int] = []
    incoming: set[str] = set()
    for hit in store.scan_workspace(workspace_id, with_dense=True):
        p = hit.payload
        links = [str(x) for x in (p.get("links") or []) if isinstance(x, str)]
        incoming.update(links)
        ids = (str(p.get("entry_id", "")), *(str(a) for a in (p.get("aliases") or []) if isinstance(a, str)))
        dense = bool(hit.dense)
        if dense:
            assert hit.dense is not None
            blocks.extend(hit.dense)
            owners.extend([len(memories)] * len(hit.dense))
        memories.append(
            Memory(ids=ids, crew=str(p.get("crew_id") or ""), ts=_ts(p.get("ts")), dense=dense, links_out=bool(links))
        )
        keys.append(hit.point_id)
    rows = np.asarray(blocks, dtype=np.float32) if blocks else np.zeros((0, 0), dtype=np.float32)
    if len(rows):
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        rows /= np.where(norms > 0, norms, 1.0)
    return WorkspaceData(
        workspace_id=workspace_id,
        memories=memories,
        keys=keys,
        rows=rows,
        owners=np.asarray(owners, dtype=np.int64),
        incoming=incoming,
        accepted=accepted_ids(state, workspace_id),
        recalls=recall_cosines(state, workspace_id, recall_days),
    )


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def scope_snapshot(
    data: WorkspaceData,
    crew: str | None,
    *,
    config: HealthConfig,
    now: datetime,
    trigger: HealthTrigger,
    duration_s: float = 0.0,
) -> HealthSnapshot:
    """The snapshot of the workspace (`crew` None) or of one of its crews, from gathered data. Pure."""
    idx = [i for i, m in enumerate(data.memories) if crew is None or m.crew == crew]
    mems = [data.memories[i] for i in idx]
    accepted = {e for e, c in data.accepted.items() if crew is None or c == crew}
    covered: set[str] = set()
    for m in mems:
        accepted.update(m.ids)
        if m.dense:
            covered.update(m.ids)
    reachable = sum(1 for m in mems if m.links_out or any(i in data.incoming for i in m.ids))
    median = H.median_age_days((m.ts for m in mems if m.ts is not None), now)

    dense_idx = [i for i in idx if data.memories[i].dense]
    picked = [dense_idx[j] for j in H.stable_sample([data.keys[i] for i in dense_idx], config.coherence_sample)]
    mean_top1: float | None = None
    if len(dense_idx) >= 2:
        mask = np.isin(data.owners, np.asarray(dense_idx, dtype=np.int64))
        mean_top1 = H.mean_finite(H.top1_neighbour_cosines(data.rows[mask], data.owners[mask], picked).tolist())
    hits, total = data.recalls.get(crew or "", (0, 0.0))
    mean_cos = total / hits if hits else None

    metrics = {
        "freshness": H.freshness(median, config.half_life_days),
        "coverage": H.coverage(len(covered), len(accepted)),
        "coherence": H.coherence(mean_top1, config.coherence_floor, config.coherence_ceiling),
        "efficiency": H.efficiency(mean_cos, config.efficiency_floor, config.efficiency_ceiling),
        "reachability": H.reachability(reachable, len(mems)),
    }
    total_score = H.score(metrics)
    return HealthSnapshot(
        workspace_id=data.workspace_id,
        crew_id=crew,
        date=now.astimezone(UTC).date().isoformat(),
        computed_at=now,
        trigger=trigger,
        score=round(total_score, 2),
        band=H.band(total_score),
        metrics=HealthMetrics(**{k: _r(v) for k, v in metrics.items()}),
        inputs=HealthInputs(
            memories=len(mems),
            dense=len(dense_idx),
            accepted=len(accepted),
            covered=len(covered),
            reachable=reachable,
            median_age_days=_r(median, 3),
            coherence_sample=len(picked) if len(dense_idx) >= 2 else 0,
            mean_top1_cosine=_r(mean_top1, 4),
            recall_hits=hits,
            mean_recall_cosine=_r(mean_cos, 4),
            efficiency_window_days=config.efficiency_window_days,
        ),
        duration_seconds=round(duration_s, 4),
    )


def _doc(snap: HealthSnapshot) -> dict[str, Any]:
    return {**snap.to_json_dict(), "scope": "workspace" if snap.crew_id is None else "crew"}


def _snapshot(doc: dict[str, Any] | None) -> HealthSnapshot | None:
    if doc is None:
        return None
    try:
        return HealthSnapshot.from_dict(doc)
    except InvalidRecord as e:
        log.warning("health: a stored snapshot does not decode (%s); ignored", e)
        return None


class HealthJob:
    """Computes, stores and reads snapshots. Blocking (store IO and numpy): call it from a worker thread."""

    def __init__(self, store: MemoryStore, state: StateStore, config: HealthConfig, *, clock: Clock = utcnow) -> None:
        self.store = store
        self.state = state
        self.config = config
        self.clock = clock

    # -- compute -------------------------------------------------------------------------------------

    def workspaces(self) -> list[str]:
        """Workspaces with memories, and those whose entries the ledger saw (even if none became one)."""
        return sorted(set(self.store.workspaces()) | known_workspaces(self.state))

    def snapshot_workspace(self, workspace_id: str, *, trigger: HealthTrigger, force: bool) -> list[HealthSnapshot]:
        """The workspace's snapshot and its crews' (workspace first). Not forced: none when today's exists."""
        now = self.clock()
        today = now.astimezone(UTC).date().isoformat()
        if not force and self.state.get(SNAPSHOT_KIND, snapshot_key(workspace_id, None, today)) is not None:
            return []
        t0 = time.perf_counter()
        data = gather(
            self.store, self.state, workspace_id, recall_days=window_days(now, self.config.efficiency_window_days)
        )
        gathered = time.perf_counter() - t0
        snaps: list[HealthSnapshot] = []
        for crew in [None, *data.crews()]:
            t1 = time.perf_counter()
            snap = scope_snapshot(data, crew, config=self.config, now=now, trigger=trigger)
            took = gathered + time.perf_counter() - t1
            snaps.append(msgspec.structs.replace(snap, duration_seconds=round(took, 4)))
        self._store(snaps, today)
        self._prune(workspace_id, now)
        return snaps

    def _store(self, snaps: list[HealthSnapshot], today: str) -> None:
        crews, ws = snaps[1:], snaps[0]
        for group in (crews, [ws]):  # the workspace's last: its presence means the run completed
            if not group:
                continue
            self.state.put_many(SNAPSHOT_KIND, {snapshot_key(s.workspace_id, s.crew_id, today): _doc(s) for s in group})
            self.state.put_many(LATEST_KIND, {scope_key(s.workspace_id, s.crew_id): _doc(s) for s in group})

    def _prune(self, workspace_id: str, now: datetime) -> None:
        keep_from = (now.astimezone(UTC).date() - timedelta(days=self.config.history_days - 1)).isoformat()
        old = [
            k
            for k, d in self.state.scan(SNAPSHOT_KIND, where={"workspace_id": workspace_id})
            if str(d.get("date", "")) < keep_from
        ]
        if old:
            self.state.delete(SNAPSHOT_KIND, old)
        prune_recalls(self.state, workspace_id, window_days(now, self.config.efficiency_window_days)[0])

    def run(
        self, workspaces: Iterable[str] | None = None, *, trigger: HealthTrigger, force: bool
    ) -> tuple[list[HealthSnapshot], list[str]]:
        """Snapshots of `workspaces` (None: all); returns them and the workspaces that failed (logged)."""
        snaps: list[HealthSnapshot] = []
        failed: list[str] = []
        for ws in self.workspaces() if workspaces is None else workspaces:
            try:
                snaps.extend(self.snapshot_workspace(ws, trigger=trigger, force=force))
            except EpisodicError as e:
                log.warning("health: the snapshot of workspace %r failed: %s", ws, e)
                failed.append(ws)
        return snaps, failed

    # -- the daily schedule ----------------------------------------------------------------------------

    def last_daily_run(self) -> str | None:
        doc = self.state.get(JOB_KIND, DAILY_KEY)
        return str(doc["last_run"]) if doc and doc.get("last_run") else None

    def daily_due(self) -> bool:
        last = self.last_daily_run()
        return H.daily_due(self.clock(), self.config.daily_at, datetime.fromisoformat(last).date() if last else None)

    def run_daily(self) -> tuple[list[HealthSnapshot], list[str]]:
        """Today's scheduled run: every workspace without a snapshot of today. The day counts as done only
        when no workspace failed (the failed ones are retried at the next tick)."""
        today = self.clock().astimezone(UTC).date().isoformat()
        snaps, failed = self.run(trigger="schedule", force=False)
        if not failed:
            self.state.put(JOB_KIND, DAILY_KEY, {"last_run": today})
        return snaps, failed

    # -- read ----------------------------------------------------------------------------------------

    def latest(self, workspace_id: str, crew_id: str | None = None) -> HealthSnapshot | None:
        return _snapshot(self.state.get(LATEST_KIND, scope_key(workspace_id, crew_id)))

    def history(self, workspace_id: str, crew_id: str | None, days: int) -> list[HealthSnapshot]:
        """The stored daily snapshots of the last `days` days (today included), oldest first."""
        dates = window_days(self.clock(), days)
        found = self.state.get_many(SNAPSHOT_KIND, [snapshot_key(workspace_id, crew_id, d) for d in dates])
        snaps = [_snapshot(found.get(snapshot_key(workspace_id, crew_id, d))) for d in dates]
        return [s for s in snaps if s is not None]

    def latest_of_workspaces(self) -> list[HealthSnapshot]:
        """Every workspace's latest snapshot (for the gauges after a restart)."""
        return [s for _, d in self.state.scan(LATEST_KIND, where={"scope": "workspace"}) if (s := _snapshot(d))]


def announce(
    snaps: list[HealthSnapshot],
    *,
    publish: Callable[[str, str | None, dict[str, Any]], None],
    metrics: Metrics,
    gauge_workspaces: int,
    topic: str = MEMORY_HEALTH,
) -> None:
    """After snapshots are stored: publish each on memory.health (keyed by workspace), count them, time the
    workspaces, update the gauges. Publishing is best effort: the stored snapshot is the record."""
    for snap in snaps:
        try:
            publish(topic, snap.workspace_id, snap.to_json_dict())
        except Exception as e:
            log.warning("health: could not publish the snapshot of %s: %s", snap.workspace_id, e)
        metrics.health_snapshots.labels(trigger=snap.trigger).inc()
        if snap.crew_id is None:
            metrics.health_duration.observe(snap.duration_seconds)
    metrics.set_health(snaps, gauge_workspaces)
