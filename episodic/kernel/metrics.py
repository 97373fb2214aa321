"""Prometheus metrics. One `Metrics` object per process (or per test, with its own registry).

Counters end in `_total`, durations in `_seconds`; label values are initialised up front.
Size: one declaration per metric of every stage, in one registry object (a list, not logic).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from episodic.domain.chunking import LEGACY
from episodic.domain.health import BANDS, METRICS, gauge_workspaces
from episodic.domain.policy import DECISIONS
from schemas.events import IndexMode
from schemas.journal import DLQ_REASONS

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86400.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODES = ("hybrid", "dense", "sparse")
FORGET_SELECTORS = ("entry_ids", "agent_id", "run_id", "all")  # schemas.events.ForgetSelector.kind
# the maintenance agents and the outcomes they count (episodic.maintenance.linker.LinkResult,
# episodic.maintenance.importance.ReferenceResult)
AGENT_OUTCOMES: dict[str, tuple[str, ...]] = {
    "linker": ("linked", "folded", "superseded", "already", "ignored", "missing", "failed"),
    "importance": ("applied", "duplicate", "recovered", "stale"),
    "reviews": ("applied", "duplicate", "recovered", "stale"),  # episodic.maintenance.reviews.ReviewResult
}
REFERENCE_OUTCOMES = ("counted", "missing")
REVIEW_RATINGS = ("again", "hard", "good", "easy")  # schemas.events.RATINGS
# Reviews not applied, by why: refused by `POST /v1/memory/review` (invalid: 422, forbidden: 403,
# unavailable: 503, unknown_memory: an id of no memory the caller may see, ignored) or, in the agent, of a
# memory gone before the review was applied (memory_gone)
REVIEW_REFUSALS = (
    "invalid",
    "forbidden",
    "unavailable",
    "unknown_memory",
    "memory_gone",
)  # episodic.maintenance.importance.ReferenceResult hits / missing
DECAY_OUTCOMES = ("ok", "failed", "busy")
DECAY_ACTIONS = ("scanned", "updated", "archived", "edges_removed")  # episodic.maintenance.decay.DecayReport fields
INDEX_MODES: tuple[str, ...] = get_args(IndexMode)  # the modes memory.indexed carries, nothing else
# Dead letters beyond the gate's validation reasons: the gate's own bug guard, and the embedding consumer's
# (consumers.poison: a record on journal.embeddable that does not decode; a control record it cannot decode
# or apply; a record the store rejects deterministically; a forget the store refuses to apply).
GATE_ERROR_REASON = "gate_error"
CONSUMER_DLQ_REASONS = ("bad_embeddable", "bad_control", "store_rejected", "forget_failed", "id_taken")
AGENT_DLQ_REASONS = ("bad_review",)  # the importance agent's: a memory.reviewed record that does not decode
DEAD_LETTER_REASONS: tuple[str, ...] = (*DLQ_REASONS, GATE_ERROR_REASON, *CONSUMER_DLQ_REASONS, *AGENT_DLQ_REASONS)
# Where the consumers count errors. Every value has a writer: decode/embed/store/publish/commit/broker in the
# embedding consumer (publish also in the gate and the recall service), densify in its densify loop, lag in
# the lag monitors.
ERROR_STAGES = ("decode", "embed", "store", "publish", "commit", "broker", "densify", "lag")
JOURNAL_HTTP_OUTCOMES = ("accepted", "invalid", "forbidden", "unavailable")
# (agent, topic) pairs whose records a maintenance agent decodes: malformed ones are counted and skipped
AGENT_INPUTS = (
    ("linker", "memory.indexed"),
    ("importance", "memory.referenced"),
    ("reviews", "memory.reviewed"),
    ("nudge", "journal.entries"),
    ("health", "journal.embeddable"),
    ("health", "memory.referenced"),
)
# where each agent counts its retried failures (streams.agents.retrying)
AGENT_STAGES: dict[str, tuple[str, ...]] = {
    "linker": ("apply",),
    "importance": ("apply",),
    "reviews": ("apply", "dead_letter"),
    "nudge": ("store", "publish", "schedule"),
    "health": ("store", "schedule"),
}
SNAPSHOT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # gate
        self.entries_consumed = Counter(
            "episodic_gate_entries_total",
            "Journal entries consumed by the gate, by entry type and decision",
            ["entry_type", "decision"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "episodic_dead_lettered_total", "Records sent to journal.dlq, by reason", ["reason"], registry=r
        )
        for reason in DEAD_LETTER_REASONS:
            self.dead_lettered.labels(reason=reason)
        for decision in DECISIONS:
            self.entries_consumed.labels(entry_type="summary.generated", decision=decision)
        # embedding consumer
        self.batch_size = Histogram(
            "episodic_embed_batch_size", "Records per embedding batch", buckets=BATCH_BUCKETS, registry=r
        )
        self.embed_duration = Histogram(
            "episodic_embed_duration_seconds",
            "Time of one model call for a batch",
            buckets=(*LATENCY_BUCKETS, 5.0, 10.0),
            registry=r,
        )
        self.upsert_duration = Histogram(
            "episodic_upsert_duration_seconds", "Time of one store upsert", buckets=LATENCY_BUCKETS, registry=r
        )
        self.index_lag = Histogram(
            "episodic_index_lag_seconds",
            "indexed_at - ts of the entry (how old an entry is when it becomes recallable)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.produce_to_index = Histogram(
            "episodic_produce_to_index_seconds",
            "indexed_at - the Kafka timestamp of the journal record",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.indexed = Counter("episodic_indexed_total", "Memories handled, by mode", ["mode"], registry=r)
        self.points_written = Counter(
            "episodic_points_written_total",
            "Points the embedding consumer wrote to the store (a re-delivered, unchanged entry writes none)",
            registry=r,
        )
        for mode in INDEX_MODES:
            self.indexed.labels(mode=mode)
        self.dense_deferred = Counter(
            "episodic_dense_deferred_total",
            "Memories written sparse first because embedding inline would have kept them invisible too long",
            registry=r,
        )
        self.embed_backend = Gauge(
            "episodic_embed_backend",
            "1 for the backend each path embeds on now (documents: ingestion batches; queries: recall)",
            ["path", "backend"],
            registry=r,
        )
        self.embed_fallbacks = Counter(
            "episodic_embed_fallbacks_total",
            "Falls back from ONNX Runtime to torch (reason: parity, error, unavailable)",
            ["path", "reason"],
            registry=r,
        )
        for path in ("documents", "queries"):  # a dashboard's rate() has data before the first fall back
            for reason in ("parity", "error", "unavailable"):
                self.embed_fallbacks.labels(path=path, reason=reason)
        self.embed_threads = Gauge(
            "episodic_embed_threads", "Threads of the last ONNX forward pass of an ingestion batch", registry=r
        )
        self.embed_yielded = Counter(
            "episodic_embed_yielded_total",
            "ONNX forward passes of ingestion batches run on fewer threads because a recall or the gate needed a core",
            registry=r,
        )
        self.densified = Counter(
            "episodic_densified_total", "Dense vectors added after the fact (deferred or backfilled)", registry=r
        )
        self.densify_failures = Counter(
            "episodic_densify_failures_total",
            "Failed attempts to add a memory's dense vector (its text failed in the model, or the store refused)",
            registry=r,
        )
        self.densify_quarantined = Gauge(
            "episodic_densify_quarantined",
            "Memories left BM25-only after EPISODIC_DENSIFY_MAX_ATTEMPTS failed attempts to embed them",
            registry=r,
        )
        self.consumer_errors = Counter(
            "episodic_consumer_errors_total", "Errors in the consumers, by stage", ["stage"], registry=r
        )
        for stage in ERROR_STAGES:
            self.consumer_errors.labels(stage=stage)
        self.consumer_lag = Gauge(
            "episodic_consumer_lag_records",
            "Records behind the high watermark (from fetch responses), by consumer group",
            ["group"],
            registry=r,
        )
        self.write_conflicts = Counter(
            "episodic_store_write_conflicts_total",
            "Conditional memory writes that found the memory changed since their read (re-read and retried), by writer",
            ["writer"],
            registry=r,
        )
        for writer in WRITERS:
            self.write_conflicts.labels(writer=writer)
        self.stale_versions = Counter(
            "episodic_stale_versions_total",
            "Entries not written because the store holds a newer version of them (by acceptance stamp): "
            "re-deliveries and replays of older versions",
            registry=r,
        )
        self.sparse_only = Gauge("episodic_sparse_only", "1 while running without an embedder", registry=r)
        # forget (SPEC §11)
        self.forgets = Counter(
            "episodic_forgets_total", "Forgets applied by the embedding consumer, by selector", ["selector"], registry=r
        )
        for selector in FORGET_SELECTORS:
            self.forgets.labels(selector=selector)
        self.forgotten = Counter("episodic_forgotten_total", "Memories removed by forgets", registry=r)
        self.unfolds = Counter(
            "episodic_unfolds_total", "Near duplicates an operator took back out of their memory (explorer)", registry=r
        )
        self.forget_suppressed = Counter(
            "episodic_forget_suppressed_total",
            "Embeddable records not indexed because a forget covers them (tombstone or forget rule)",
            registry=r,
        )
        # recall
        self.recall_latency = Histogram(
            "episodic_recall_duration_seconds",
            "Recall request latency, by mode",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.recall_hits = Histogram(
            "episodic_recall_hits", "Hits returned per recall request", buckets=(0, 1, 2, 3, 5, 10, 20, 50), registry=r
        )
        self.recall_degraded = Counter(
            "episodic_recall_degraded_total", "Recall responses answered sparse-only (degraded)", registry=r
        )
        self.referenced_dropped = Counter(
            "episodic_referenced_dropped_total",
            "memory.referenced events dropped: the buffer (EPISODIC_REFERENCED_BUFFER) was full while Kafka "
            "was unreachable",
            registry=r,
        )
        self.referenced_buffered = Gauge(
            "episodic_referenced_buffered", "memory.referenced events waiting to be sent to Kafka", registry=r
        )
        self.auth_failures = Counter(
            "episodic_auth_failures_total", "Rejected requests, by reason", ["reason"], registry=r
        )
        self.journal_http_entries = Counter(
            "episodic_journal_http_entries_total",
            "Journal entries received by POST /v1/journal, by outcome",
            ["outcome"],
            registry=r,
        )
        for outcome in JOURNAL_HTTP_OUTCOMES:
            self.journal_http_entries.labels(outcome=outcome)
        for mode in MODES:
            self.recall_latency.labels(mode=mode)
        for reason in ("missing", "invalid", "forbidden"):
            self.auth_failures.labels(reason=reason)
        self._maintenance(r)
        self._init_agents(r)
        self._reembed(r)

    def _reembed(self, r: CollectorRegistry) -> None:
        """The re-embed pass (episodic.lifecycle.reembed) and the active embedding generation
        (episodic.embedding.generations)."""
        self.reembed_ratio = Gauge(
            "episodic_reembed_progress_ratio",
            "Share of memories with the pending generation's vector (1 when none is pending)",
            registry=r,
        )
        self.reembed_ratio.set(1.0)
        self.reembed_remaining = Gauge(
            "episodic_reembed_remaining_points", "Memories still without the pending generation's vector", registry=r
        )
        self.reembed_points = Counter(
            "episodic_reembed_points_total",
            "Memories re-embedded with the pending model, by outcome",
            ["outcome"],
            registry=r,
        )
        for outcome in ("embedded", "failed"):
            self.reembed_points.labels(outcome=outcome)
        self.embedding_generation = Gauge(
            "episodic_embedding_generation_info",
            "1 for the active embedding generation (its model, vector and pieces), for a pending one "
            "(state=pending) and for the last re-embed that stopped as failed (state=failed)",
            ["state", "model", "vector", "pieces"],
            registry=r,
        )
        self.reembed_switches = Counter(
            "episodic_reembed_switches_total", "Switches to a new embedding generation made here", registry=r
        )
        self.reembed_failed = Gauge(
            "episodic_reembed_failed_points",
            "Memories that failed the model of the last re-embed that stopped as failed (0: none failed since the "
            "last switch)",
            registry=r,
        )

    def observe_generations(self, doc: dict[str, Any]) -> None:
        """The generations document (episodic.embedding.generations) as the info gauge."""
        self.embedding_generation.clear()
        for state in ("active", "pending", "failed"):
            gen = doc.get(state)
            if isinstance(gen, dict):
                pieces = str(gen.get("pieces") or LEGACY)  # a generation recorded before its pieces were
                self.embedding_generation.labels(
                    state=state, model=str(gen.get("model")), vector=str(gen.get("vector")), pieces=pieces
                ).set(1)
        if not doc.get("pending"):
            self.reembed_ratio.set(1.0)
            self.reembed_remaining.set(0)
        failed = doc.get("failed")
        self.reembed_failed.set(int(failed.get("failed") or 0) if isinstance(failed, dict) else 0)

    def observe_forgets(self, outcomes: Iterable[Any], left_out: int) -> None:
        """Forgets applied (`episodic.lifecycle.forget.ForgetOutcome`; re-deliveries not counted) and records left
        out."""
        for o in outcomes:
            if not o.repeated:
                self.forgets.labels(selector=o.forget.selector.kind).inc()
                self.forgotten.inc(o.memories)
        self.forget_suppressed.inc(left_out)

    def _maintenance(self, r: CollectorRegistry) -> None:
        """The linker, the importance agent and the nightly decay job (SPEC §8)."""
        self.agent_events = Counter(
            "episodic_agent_events_total", "Events handled by a maintenance agent, by outcome", ["agent", "outcome"],
            registry=r,
        )  # fmt: skip
        self.agent_malformed = Counter(
            "episodic_agent_malformed_total", "Records an agent could not decode (logged and skipped), by topic",
            ["agent", "topic"], registry=r,
        )  # fmt: skip
        for agent, topic in AGENT_INPUTS:
            self.agent_malformed.labels(agent=agent, topic=topic)
        self.agent_errors = Counter(
            "episodic_agent_errors_total",
            "Failed attempts in a maintenance agent, by stage (retried; the linker's and importance agent's "
            "batch is skipped after the last try unless the store is down)",
            ["agent", "stage"],
            registry=r,
        )
        for agent, stages in AGENT_STAGES.items():
            for stage in stages:
                self.agent_errors.labels(agent=agent, stage=stage)
        self.agent_lag = Histogram(
            "episodic_agent_lag_seconds",
            "From an event's production to its handling by the agent",
            ["agent"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        for agent in AGENT_STAGES:
            self.agent_lag.labels(agent=agent)
        for agent, outcomes in AGENT_OUTCOMES.items():
            for outcome in outcomes:
                self.agent_events.labels(agent=agent, outcome=outcome)
        self.similar_edges = Counter("episodic_similar_edges_total", "similar edges written by the linker", registry=r)
        self.references = Counter(
            "episodic_references_total", "Memory references from memory.referenced, by outcome", ["outcome"],
            registry=r,
        )  # fmt: skip
        for outcome in REFERENCE_OUTCOMES:
            self.references.labels(outcome=outcome)
        self.reviews = Counter(
            "episodic_reviews_total", "Agents' reviews of memories applied (memory.reviewed), by rating", ["rating"],
            registry=r,
        )  # fmt: skip
        for rating in REVIEW_RATINGS:
            self.reviews.labels(rating=rating)
        self.reviews_refused = Counter(
            "episodic_reviews_refused_total",
            "Reviews not applied, by reason (the review endpoint's refusals, and reviews of memories gone)",
            ["reason"],
            registry=r,
        )
        for reason in REVIEW_REFUSALS:
            self.reviews_refused.labels(reason=reason)
        self.decay_runs = Counter("episodic_decay_runs_total", "Decay runs, by outcome", ["outcome"], registry=r)
        for outcome in DECAY_OUTCOMES:
            self.decay_runs.labels(outcome=outcome)
        self.decay_duration = Histogram(
            "episodic_decay_duration_seconds", "Time of one decay run",
            buckets=(0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0), registry=r,
        )  # fmt: skip
        self.decay_memories = Counter(
            "episodic_decay_memories_total", "Memories handled by decay runs, by action", ["action"], registry=r
        )
        for action in DECAY_ACTIONS:
            self.decay_memories.labels(action=action)
        self.decay_last_success = Gauge(
            "episodic_decay_last_success_timestamp_seconds", "When the last decay run finished (Unix time)", registry=r
        )

    def _init_agents(self, r: CollectorRegistry) -> None:
        """The nudge and health agents (their shared agent metrics are in `_maintenance`)."""
        self.nudge_entries = Counter(
            "episodic_nudge_entries_total",
            "Journal entries seen by the nudge agent: counted for a run, replays (already counted), without run_id",
            ["outcome"],
            registry=r,
        )
        for outcome in ("counted", "replayed", "no_run"):
            self.nudge_entries.labels(outcome=outcome)
        self.nudges = Counter("episodic_nudges_total", "Nudges published on memory.nudges", registry=r)
        self.nudge_runs = Gauge("episodic_nudge_runs", "Runs whose counters the nudge agent keeps", registry=r)
        self.nudge_forgotten = Counter(
            "episodic_nudge_runs_forgotten_total", "Run counters dropped after the run was idle", registry=r
        )
        self.health_inputs = Counter(
            "episodic_health_inputs_total",
            "Records folded by the health agent: accepted entries (ledger), recall events, replayed recall events",
            ["input"],
            registry=r,
        )
        for name in ("accepted", "recalls", "recalls_replayed"):
            self.health_inputs.labels(input=name)
        self.health_snapshots = Counter(
            "episodic_health_snapshots_total", "Health snapshots stored, by trigger", ["trigger"], registry=r
        )
        for trigger in ("schedule", "admin"):
            self.health_snapshots.labels(trigger=trigger)
        self.health_duration = Histogram(
            "episodic_health_snapshot_duration_seconds",
            "Time to snapshot one workspace (gather + every scope)",
            buckets=SNAPSHOT_BUCKETS,
            registry=r,
        )
        self.health_score = Gauge(
            "episodic_memory_health_score",
            "Latest health score (0-100) of the workspaces with the lowest scores (at most "
            "EPISODIC_HEALTH_GAUGE_WORKSPACES of them; episodic_memory_health_workspaces counts them all)",
            ["workspace_id"],
            registry=r,
        )
        self.health_metric = Gauge(
            "episodic_memory_health_metric",
            "Latest health metrics (0-100) of the same workspaces; a metric that could not be measured is absent",
            ["workspace_id", "metric"],
            registry=r,
        )
        self.health_workspaces = Gauge(
            "episodic_memory_health_workspaces", "Workspaces by the band of their latest snapshot", ["band"], registry=r
        )
        for b in BANDS:
            self.health_workspaces.labels(band=b).set(0)
        self._health_latest: dict[str, tuple[float, str, dict[str, Any]]] = {}
        self._health_labelled: set[str] = set()
        # the health agent (the stack's loop) and an admin health run (the recall service's loop) both fold
        self._health_lock = threading.Lock()

    def set_health(self, snapshots: Iterable[Any], limit: int) -> None:
        """Fold workspace snapshots (`schemas.events.HealthSnapshot`) into the gauges: the band counts over
        every workspace; score and metrics labelled for the `limit` lowest scores only, so that the label set
        stays bounded however many workspaces there are. Crew snapshots are not exported. Thread-safe."""
        with self._health_lock:
            self._set_health(list(snapshots), limit)

    def _set_health(self, snapshots: list[Any], limit: int) -> None:
        for snap in snapshots:
            if snap.crew_id is None:
                values = {m: getattr(snap.metrics, m) for m in METRICS}
                self._health_latest[snap.workspace_id] = (float(snap.score), str(snap.band), values)
        labelled = set(gauge_workspaces({ws: v[0] for ws, v in self._health_latest.items()}, limit))
        for ws in self._health_labelled - labelled:
            _drop(self.health_score, ws)
            for m in METRICS:
                _drop(self.health_metric, ws, m)
        for ws in labelled:
            score, _band, values = self._health_latest[ws]
            self.health_score.labels(workspace_id=ws).set(score)
            for m in METRICS:
                if values.get(m) is None:
                    _drop(self.health_metric, ws, m)
                else:
                    self.health_metric.labels(workspace_id=ws, metric=m).set(float(values[m]))
        self._health_labelled = labelled
        for b in BANDS:
            self.health_workspaces.labels(band=b).set(sum(1 for v in self._health_latest.values() if v[1] == b))


# The writers under the store's write discipline (episodic.store's ownership table), the metric's labels.
WRITERS = (
    "indexer",
    "aliases",
    "densify",
    "re-embed",
    "import",
    "decay",
    "linker",
    "relations",
    "edges",
    "run-edges",
    "relink",
    "context-scrub",
    "fold",
)


def _drop(gauge: Gauge, *labels: str) -> None:
    """Remove a labelled child if it exists."""
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
