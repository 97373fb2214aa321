"""Prometheus metrics. One `Metrics` object per process (or per test, with its own registry).

Counters end in `_total`, durations in `_seconds`; label values are initialised up front.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from episodic.policy import DECISIONS
from schemas.events import IndexMode
from schemas.journal import DLQ_REASONS

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86400.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODES = ("hybrid", "dense", "sparse")
FORGET_SELECTORS = ("entry_ids", "agent_id", "run_id", "all")  # schemas.events.ForgetSelector.kind
# the maintenance agents and the outcomes they count (episodic.linker.LinkResult, episodic.importance.ReferenceResult)
AGENT_OUTCOMES: dict[str, tuple[str, ...]] = {
    "linker": ("linked", "already", "ignored", "missing", "failed"),
    "importance": ("applied", "duplicate", "recovered", "stale"),
}
REFERENCE_OUTCOMES = ("counted", "missing")  # episodic.importance.ReferenceResult hits / missing
DECAY_OUTCOMES = ("ok", "failed", "busy")
DECAY_ACTIONS = ("scanned", "updated", "archived", "edges_removed")  # episodic.decay.DecayReport fields
INDEX_MODES: tuple[str, ...] = get_args(IndexMode)  # the modes memory.indexed carries, nothing else
# Dead letters beyond the gate's validation reasons: the gate's own bug guard, and the embedding consumer's
# (consumers.poison: a record on journal.embeddable that does not decode; a control record it cannot decode
# or apply; a record the store rejects deterministically; a forget the store refuses to apply).
GATE_ERROR_REASON = "gate_error"
CONSUMER_DLQ_REASONS = ("bad_embeddable", "bad_control", "store_rejected", "forget_failed")
DEAD_LETTER_REASONS: tuple[str, ...] = (*DLQ_REASONS, GATE_ERROR_REASON, *CONSUMER_DLQ_REASONS)
# Where the consumers count errors. Every value has a writer: decode/embed/store/publish/commit/broker in the
# embedding consumer (publish also in the gate and the recall service), densify in its densify loop, lag in
# the lag monitors.
ERROR_STAGES = ("decode", "embed", "store", "publish", "commit", "broker", "densify", "lag")
JOURNAL_HTTP_OUTCOMES = ("accepted", "invalid", "forbidden", "unavailable")


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
        self.sparse_only = Gauge("episodic_sparse_only", "1 while running without an embedder", registry=r)
        # forget (SPEC §11)
        self.forgets = Counter(
            "episodic_forgets_total", "Forgets applied by the embedding consumer, by selector", ["selector"], registry=r
        )
        for selector in FORGET_SELECTORS:
            self.forgets.labels(selector=selector)
        self.forgotten = Counter("episodic_forgotten_total", "Memories removed by forgets", registry=r)
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

    def observe_forgets(self, outcomes: Iterable[Any], left_out: int) -> None:
        """Forgets applied (`episodic.forget.ForgetOutcome`; re-deliveries not counted) and records left out."""
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
            "episodic_agent_malformed_total", "Records an agent could not decode (logged and skipped)", ["agent"],
            registry=r,
        )  # fmt: skip
        self.agent_errors = Counter(
            "episodic_agent_errors_total",
            "Failed attempts to apply a batch (retried; skipped after the last try unless the store is down)",
            ["agent"],
            registry=r,
        )
        self.agent_lag = Histogram(
            "episodic_agent_lag_seconds",
            "From an event's production to its handling by the agent",
            ["agent"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        for agent, outcomes in AGENT_OUTCOMES.items():
            self.agent_malformed.labels(agent=agent)
            self.agent_errors.labels(agent=agent)
            self.agent_lag.labels(agent=agent)
            for outcome in outcomes:
                self.agent_events.labels(agent=agent, outcome=outcome)
        self.similar_edges = Counter("episodic_similar_edges_total", "similar edges written by the linker", registry=r)
        self.references = Counter(
            "episodic_references_total", "Memory references from memory.referenced, by outcome", ["outcome"],
            registry=r,
        )  # fmt: skip
        for outcome in REFERENCE_OUTCOMES:
            self.references.labels(outcome=outcome)
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
