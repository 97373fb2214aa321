"""Settings: one frozen pydantic-settings class, prefix EPISODIC_ (SPEC §9).

Size: a little over 400 lines: one declaration per setting, each with its bounds and the reason for its default,
in the one class every role reads (a list, not logic; the few derived values sit beside the fields they read).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from episodic_client.settings import ClientSettings

if TYPE_CHECKING:
    from episodic.domain.context_mode import ContextMode

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Consumers' fetch wait: Tansu (the fallback broker) answers a waiting fetch late (it looks again during the
# wait), so every record waits a share of the fetch in flight's wait (Faust's 1,500 ms gave a ~750 ms median gate
# latency; 250 ms, 43 ms for single records on a bare broker; measured); Kafka answers early, so there the wait
# only decides how often an idle consumer asks. 250 ms here was measured in a 30-minute soak and not kept
# (docs/benchmarks.md).
TANSU_FETCH_WAIT_MS = 50
# Not longer: aiokafka keeps one fetch in flight per broker and leaves partitions with records still
# buffered out of it, so a partition that runs dry waits for the fetch in flight for the other, idle ones.
KAFKA_FETCH_WAIT_MS = 200
# The hybrid's dense weight, BM25 top-N leg and lexical confidence (`rrf_lexical_full`) by chunk mode, when not
# set (eval/README.md, "Piece prior", "Lexical confidence": the last was measured over sentence pieces only).
FUSION_BY_CHUNK_MODE: dict[str, tuple[float, int, float]] = {"sentences": (2.5, 0, 4.0), "window": (1.0, 5, 0.0)}


def _xdg_cache() -> Path:
    """The user's cache directory: XDG_CACHE_HOME, else ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"))


class Settings(BaseSettings, ClientSettings):
    """The engine's settings: the client's (`episodic_client.settings.ClientSettings`: the service's address,
    EPISODIC_URL, EPISODIC_TOKEN, the identity, the client's timeout and retries, declared once there) and
    every setting of the engine's roles, below."""

    # hide_input_in_errors: a validation error would otherwise print every input, passwords included
    model_config = SettingsConfigDict(env_prefix="EPISODIC_", frozen=True, extra="ignore", hide_input_in_errors=True)

    # Kafka
    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; unset: start the embedded broker"
    )
    broker: Literal["auto", "kafka", "tansu"] = Field(
        default="auto",
        description="the embedded broker: Apache Kafka (KRaft, its log under the data directory) where Java 17 "
        "and its jars (`make install`) are there, else Tansu with memory storage, announced as a volatile "
        "journal; 'kafka' refuses to start without Kafka, 'tansu' asks for the fallback. With "
        "EPISODIC_KAFKA_BOOTSTRAP, what that broker is: 'tansu' (no idempotent producers, end offsets "
        "from fetches), else Kafka",
    )
    broker_port: int = Field(default=9092, ge=1, le=65535, description="embedded broker port")
    broker_host: str = "127.0.0.1"
    broker_heap_mb: int = Field(
        default=256, ge=64, le=32_768, description="the embedded Kafka's JVM heap (-Xmx), MiB (docs/configuration.md)"
    )
    broker_libs: Path | None = Field(
        default=None, description="the embedded Kafka's jars; unset: <venv>/kafka/libs, where `make install` puts them"
    )
    broker_retention_check_s: float = Field(
        default=300.0, gt=0, le=86_400, description="how often the embedded Kafka deletes segments past retention"
    )
    journal_retention_hours: float = Field(
        default=168.0,
        gt=0,
        description="retention of the journal and event topics (journal.entries, journal.embeddable, memory.*): 7 "
        "days, far beyond any consumer's lag; the store, not the topic, is the memory",
    )
    dlq_retention_hours: float = Field(
        default=720.0,
        gt=0,
        description="retention of the dead letters (journal.dlq) and their replay ledger (journal.dlq.replays, "
        "also compacted): 30 days, for an operator to find and replay them",
    )
    archive_retention_hours: float | None = Field(
        default=None,
        gt=0,
        description="retention of memory.archived (memories the decay retired: the only copy); unset: kept forever",
    )
    broker_insecure: bool = Field(
        default=False,
        description="let the embedded broker listen beyond loopback (it has no authentication: issue 29)",
    )
    topic_partitions: int = Field(default=4, ge=1, le=256)
    topic_replication: int = Field(default=1, ge=1)
    consumer_group_prefix: str = "episodic"
    gate_exactly_once: bool = Field(
        default=True,
        description="the gate under Faust's exactly-once guarantee: each partition's batches, their output and "
        "their offsets in one Kafka transaction, and the consumers of the gate's output (journal.embeddable, "
        "journal.dlq) read committed records only (docs/pipeline.md, 'Exactly-once for the gate': throughput "
        "within noise of at-least-once, measured); never on Tansu, which has no transactions",
    )
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    lag_interval_s: float = Field(
        default=5.0, gt=0, le=3600, description="consumer lag is measured this often, stuck or not (SPEC §10)"
    )
    fetch_max_wait_ms: int | None = Field(
        default=None,
        ge=1,
        le=5000,
        description="how long the pipeline's consumers let the broker hold an empty fetch; unset: 200 ms with "
        "Kafka (which answers as soon as data arrives: a quarter of the idle fetches, at most 200 ms for a "
        "partition that runs dry while a fetch for the others is held), 50 ms on the Tansu fallback (it "
        "answers a waiting fetch late)",
    )
    agent_gather_ms: int = Field(
        default=1000,
        ge=0,
        le=5000,
        description="how long the agents that may lag (the importance agent's reference counts and reviews, "
        "the health agent's tallies, the nudge agent) let the broker gather records before it answers their "
        "fetch (this wait with a 1 MiB minimum): one batch per wait instead of one per recall or per journal "
        "fetch, so their per-batch work is paid once a wait (state-store writes per batch; on the embedded "
        "broker, each fetch costs it time that grows with the records a partition holds); they lag by up to "
        "this long. 0: the pipeline's fetch wait",
    )
    # Kafka transport security (episodic.kernel.transport_security applies it to every Kafka client)
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="how every Kafka client connects: TLS (SSL), SASL, or both (SASL_SSL)"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="required with SASL_PLAINTEXT / SASL_SSL"
    )
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = Field(default=None, description="CA bundle (PEM); unset: the system's CAs")
    kafka_ssl_certfile: Path | None = Field(default=None, description="client certificate (PEM) for mutual TLS")
    kafka_ssl_keyfile: Path | None = Field(default=None, description="the client certificate's key (PEM)")
    kafka_ssl_key_password: SecretStr | None = None
    kafka_ssl_check_hostname: bool = Field(default=True, description="verify the broker's name in its certificate")
    referenced_buffer: int = Field(
        default=10_000,
        ge=0,
        le=1_000_000,
        description="memory.referenced events kept while Kafka is unreachable; beyond it they are dropped "
        "and counted (episodic_referenced_dropped_total)",
    )

    # Store
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset: embedded Qdrant Edge")
    qdrant_api_key: SecretStr | None = Field(default=None, description="sent as the api-key header; use https")
    qdrant_ca_file: Path | None = Field(
        default=None, description="CA bundle (PEM) to verify an https:// EPISODIC_QDRANT_URL against"
    )
    collection: str = "episodic_memories"
    data_dir: Path = Path("./.episodic")

    # Embedding
    embed_model: str = Field(
        default=DEFAULT_MODEL,
        description="sentence-transformers model name or path; 'none' forces sparse-only",
    )
    embed_device: str = "cpu"
    batch_size: int = Field(default=128, ge=1, le=4096, description="records per consumer batch (one model call)")
    encode_batch: int = Field(
        default=16, ge=1, le=1024, description="sequences per forward pass inside the call (less padding)"
    )
    batch_max_wait_ms: int = Field(default=50, ge=0, le=60_000)
    visible_budget_ms: int = Field(
        default=800,
        ge=0,
        le=600_000,
        description="embed a batch inline only while its oldest entry can still be searchable within this "
        "many ms of production (measured embedding speed); otherwise write it sparse first and add the dense "
        "vectors right after. 0: always inline",
    )
    embed_threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="threads for the model, fixed; unset: ONNX ingestion batches take every core while the "
        "gate and recall are idle and one fewer while they need one (episodic.embedding.cores); torch batches take all "
        "cores for a dedicated embedder, one fewer when the process runs other stages too",
    )
    embed_streams: int | None = Field(
        default=None,
        ge=1,
        le=4,
        description="ONNX ingestion batches: forward passes run at once, the cores shared among them; unset: "
        "one per core, at most 4 (episodic.embedding.onnx_encoder); 1: one pass at a time on every core",
    )
    embed_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="ingestion batches: ONNX Runtime (the same export as queries; checked against torch at "
        "start, torch when it differs) or the torch model",
    )
    query_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="recall query embeddings: ONNX Runtime (same vector, ~2.5x faster; exported once into "
        "model_cache_dir) or the torch model",
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="ONNX export cache, and in its `models` the packaged models joined from their packages "
        "(all-mpnet-base-v2); unset: $XDG_CACHE_HOME/episodic/onnx and .../episodic/models (~/.cache/episodic)",
    )
    chunk_mode: Literal["sentences", "window"] = Field(
        default="sentences",
        description="what gets a dense vector of its own: sentences (consecutive sentences packed into pieces "
        "of at most chunk_words words; measured in eval/README.md) or window (windows of chunk_tokens word "
        "pieces); either way a piece longer than chunk_tokens is cut into overlapping windows",
    )
    chunk_words: int = Field(default=32, ge=1, le=256, description="words per sentence piece (chunk_mode=sentences)")
    chunk_tokens: int = Field(default=256, ge=16, le=512, description="word pieces per dense chunk (at most)")
    chunk_overlap_tokens: int = Field(default=32, ge=0, le=256)
    # Context-aware indexing (episodic.indexing.context; chosen on LongMemEval dev, eval/README.md): a second BM25
    # vector over the entry with the previous memories of its run (each cut to `context_words` words).
    context_mode: str = Field(
        default="prev:2",
        description="what an entry is indexed with besides its own text: off, prev:N (the N memories before "
        "it in its run) or run-header (the run's first memory)",
    )
    context_words: int = Field(default=16, ge=1, le=256, description="words of each context entry")
    context_date: bool = Field(
        default=False, description="the entry's date line ('Saturday 20 May 2023 (2023-05-20)') first in the context"
    )
    densify_max_attempts: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="failed attempts to embed a memory's text before the backfill quarantines it (it stays "
        "BM25-only; /v1/memory/stats and `episodic doctor` count it)",
    )
    reembed_max_failed: int = Field(
        default=5,
        ge=0,
        le=1_000_000_000,
        description="memories that may fail a re-embed's new model (quarantined) for the pass to switch to it; "
        "more, and the pass stops as failed with the old model still active",
    )
    alias_limit: int = Field(
        default=20,
        ge=0,
        le=10_000,
        description="alias ids kept per duplicate memory (the newest); occurrences counts them all",
    )

    # HTTP (http_host, http_port: the client's settings, above)
    tokens_file: Path | None = Field(default=None, description="bearer tokens file (JSON)")
    metrics_admin_only: bool = Field(
        default=False,
        description="the recall service's /metrics answers only an admin token (its gauges name workspaces)",
    )

    # Recall
    high_value_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    prefetch_limit: int = Field(default=100, ge=10, le=2000)
    edge_index_after: int = Field(
        default=10_000,
        ge=0,
        description="embedded store (Qdrant Edge): rebuild its dense index (HNSW) in a worker process, swapped in "
        "without stopping queries, whenever this many memories were written since the last build and some "
        "workspace is past the size at which its graph is searched (6,666 memories at 384 dimensions); 0: never "
        "(every dense query scans its workspace)",
    )
    edge_index_threads: int = Field(
        default=1, ge=1, le=64, description="indexing threads of that worker process (niced): cores it may take"
    )
    # Hybrid fusion, chosen on LongMemEval dev (eval/README.md): weighted RRF (k=3) over four legs: dense (2.5,
    # ranked by cosine - 0.08 ln(pieces)), BM25 (1), the dense candidates re-scored by the context BM25 (0.5)
    # and the context BM25 (1); with context off, or a collection without it, the first three (re-scored by
    # BM25). BM25's top N again as a fifth leg (`rrf_head`, weight `rrf_head_weight`) is off since the prior.
    # The dense weight and the top-N leg follow the chunk mode when unset: those two were chosen over sentence
    # pieces, and over the windows their own tree is better (`dense_weight`, `head`).
    fusion: Literal["rrf", "dbsf", "rrf_equal"] = "rrf"
    rrf_k: int = Field(default=3, ge=1)
    rrf_dense_weight: float | None = Field(
        default=None, ge=0.0, description="unset: 2.5 with sentence pieces, 1 with windows"
    )
    rrf_sparse_weight: float = Field(default=1.0, ge=0.0)
    rrf_both_weight: float = Field(default=0.5, ge=0.0, description="dense candidates re-scored by BM25; 0: off")
    rrf_head: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="BM25's top N as an extra leg; 0: off; unset: 0 with sentence pieces, 5 with windows",
    )
    rrf_head_weight: float = Field(default=0.75, ge=0.0)
    rrf_context_weight: float = Field(
        default=1.0, ge=0.0, description="BM25 over the context-folded text as one more leg; 0: off"
    )
    rrf_piece_penalty: float = Field(
        default=0.08, ge=0.0, le=1.0, description="the dense leg ranks by cosine - this x ln(pieces); 0: off"
    )
    rrf_both_context: bool = Field(
        default=True, description="the dense candidates are re-scored by the context-folded BM25 (not the entry's)"
    )
    # Lexical confidence (eval/README.md, "Lexical confidence"): the BM25-based legs' weights scale with how
    # strongly BM25 matched the query (its best score in rare-term IDFs of the workspace, over this value),
    # down to `rrf_lexical_floor`: a query that shares only common words with the memories lets the dense leg
    # rank. One top-1 BM25 search more per hybrid recall (and a count of the workspace, reused for 30 s).
    rrf_lexical_full: float | None = Field(
        default=None,
        ge=0.0,
        description="BM25 best score (in rare-term IDFs) for full sparse weights; 0: off; unset: 4 with sentence"
        " pieces, off with windows",
    )
    rrf_lexical_floor: float = Field(
        default=0.25, ge=0.0, le=1.0, description="the least share of their weight the BM25-based legs keep"
    )
    # Time in the query (docs/quality.md, "Conversations"): a query naming a time ("in July 2023", "on 7 July,
    # 2023", "last May") brings the hybrid's own legs once more over the memories of that time, at this share of
    # their weight; 0: off. Chosen through the pipeline on both dev sets (LoCoMo gains, LongMemEval holds).
    # The hybrid's dense query without the words more than this share of the workspace's memories hold (a sample
    # of its newest: episodic.retrieval.common): the speakers' names in a conversation. BM25 keeps the whole query.
    # 0.5: where BM25's classic (Robertson-Spärck Jones) IDF turns negative. 0: off. Chosen in the mirror and
    # through the pipeline on both dev sets (docs/quality.md, "Conversations").
    dense_query_common: float = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="leave out of the hybrid's dense query the words held by more than this share of the "
        "workspace's memories; 0: off",
    )
    rrf_time_weight: float = Field(
        default=1.0, ge=0.0, description="the time legs' share of the legs' weights when a query names a time; 0: off"
    )
    # Run-level evidence (docs/quality.md, "Conversations"): the fused top `rrf_run_pool` re-ranked by their own
    # score and their run's (its `rrf_run_depth` best scores summed), the run's share weighted this; 0: off. Off by
    # default: it gains on LoCoMo (one session holds the answer) and loses on LongMemEval's multi-session questions.
    rrf_run_weight: float = Field(default=0.0, ge=0.0, description="the run's score beside each memory's; 0: off")
    rrf_run_pool: int = Field(
        default=100, ge=1, le=1000, description="fused candidates re-ranked by their run and by the neighbour lift"
    )
    rrf_run_depth: int = Field(default=3, ge=1, le=100, description="a run's best candidates summed as its score")
    # The neighbour lift (docs/quality.md, "Short turns"): a memory of at most `rrf_neighbour_words` words lifted
    # by its previous / next memory in its run, as short and among the fused top `rrf_run_pool`, at this weight.
    # Chat lines gain (LoCoMo), paragraphs are untouched (LongMemEval's turns, most agents' reports).
    rrf_neighbour_weight: float = Field(
        default=0.5, ge=0.0, le=10.0, description="a short memory's lift by its short run neighbours; 0: off"
    )
    rrf_neighbour_words: int = Field(
        default=80, ge=1, le=100_000, description="the most words a memory has to lift or be lifted by a neighbour"
    )
    # Recalls computed at once (the model, the store, the JSON); more wait their turn in arrival order
    # (recall/routes.py). 0: as many as arrive, each a thread of the pool. Measured worse at 2 slots in one
    # round (docs/configuration.md), so off.
    recall_concurrency: int = Field(
        default=0, ge=0, le=1024, description="recalls computed at once, the rest waiting in order; 0: no limit"
    )
    # Episode adjacency at recall: a direct hit's previous/next memory in its run, scored below it, in k.
    recall_adjacent: bool = Field(default=False, description="default of the recall request's `adjacent`")
    adjacent_weight: float = Field(
        default=0.5, gt=0.0, lt=1.0, description="an adjacent memory scores this fraction of its hit's score"
    )

    @field_validator("context_mode")
    @classmethod
    def _context_mode(cls, v: str) -> str:
        from episodic.domain.context_mode import parse_mode

        parse_mode(v)
        return v.strip().lower()

    @property
    def context(self) -> ContextMode:
        from episodic.domain.context_mode import parse_mode

        return parse_mode(self.context_mode, self.context_words, date=self.context_date)

    # Maintenance agents (SPEC §8): the linker, the importance agent with its nightly decay, retention
    linker_enabled: bool = Field(default=True, description="run the linker (similar edges) in `episodic up`")
    similar_threshold: float = Field(default=0.80, gt=0.0, le=1.0, description="similar edge: cosine above this")
    similar_top_k: int = Field(default=3, ge=1, le=50, description="similar edges per new memory, at most")
    similar_min_mean: float = Field(
        default=0.35,
        ge=0.0,
        le=1.0,
        description="similar edge between memories of several pieces: their mean vectors' cosine at least this "
        "(two memories sharing one stock sentence and nothing else get no edge); 0: off",
    )
    fold_enabled: bool = Field(
        default=True,
        description="the linker folds a new memory into a near duplicate (same crew, type and priority; "
        "episodic.domain.folding): recall shows one memory listing both entries and agents",
    )
    fold_cosine: float = Field(
        default=0.75, gt=0.0, le=1.0, description="near-duplicate fold: cosine (of mean vectors) at least this"
    )
    fold_additions: int = Field(
        default=2,
        ge=0,
        le=64,
        description="near-duplicate fold: content words one text may add to the other (besides the same "
        "content words, facts, names, negations and outcomes; eval/fold_rule.py)",
    )
    fold_swaps: int = Field(
        default=0,
        ge=0,
        le=16,
        description="near-duplicate fold: verbs, adjectives or adverbs one text may swap for others besides "
        "the words WordNet relates (a noun or a name only ever for its synonym). 0: off, as measured best "
        "(2 folded near misses on the holdout: eval/README.md 'The fold rule, measured')",
    )
    supersede_enabled: bool = Field(
        default=True,
        description="newer facts first: the linker gives a memory that changes a number or date of an earlier one "
        "on the same subject a supersedes edge (episodic.domain.supersession), and recall puts it right above "
        "the memory it replaces (bringing it in when only the older matched)",
    )
    supersede_cosine: float = Field(
        default=0.80, gt=0.0, le=1.0, description="supersession: the two memories' cosine at least this"
    )
    supersede_jaccard: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="supersession: their content words other than numbers and dates overlap (Jaccard) at least this",
    )
    decay_schedule: str = Field(
        default="30 3 * * *", description="DecayAndReinforce (and retention), a cron expression in UTC"
    )
    decay_page_size: int = Field(default=512, ge=1, le=10_000, description="memories per decay page")
    reference_ledger_days: int = Field(
        default=7,
        ge=1,
        le=3650,
        description="memory.referenced events are remembered (re-delivery counts once) this many days, then "
        "pruned; older events are not applied. Keep it at least the topic's retention",
    )
    review_ranking: Literal["off", "reinforce", "fsrs"] = Field(
        default="off",
        description="what agents' reviews (POST /v1/memory/review, memory.reviewed) do to ranking: off (they are "
        "recorded and shown, importance stays SPEC §8's), reinforce (a reviewed memory is reinforced by the "
        "reviews that say it served instead of by its retrievals) or fsrs (that, times its FSRS retrievability "
        "now); episodic.domain.review, eval/README.md for the measurement",
    )
    surprise_boost: float = Field(
        default=0.5,
        ge=0.0,
        le=10.0,
        description="seed 003's key moments: a memory's initial FSRS stability is multiplied by 1 + this x its "
        "surprise (0: no boost). It moves ranking only with review_ranking fsrs, for memories never reviewed; "
        "docs/quality.md 'Key moments' for the measurement",
    )
    retention_enabled: bool = Field(default=False, description="archive and remove memories long at the floor")
    retention_floor_days: int = Field(
        default=30, ge=0, le=36_500, description="days at the importance floor before a memory is archived"
    )

    @model_validator(mode="after")
    def _transport(self) -> Settings:
        """SASL settings need a SASL protocol and the reverse; TLS files need a TLS protocol (a setting that
        would be ignored is an error, not a plaintext connection)."""
        protocol = self.kafka_security_protocol
        sasl = {
            "kafka_sasl_mechanism": self.kafka_sasl_mechanism,
            "kafka_sasl_username": self.kafka_sasl_username,
            "kafka_sasl_password": self.kafka_sasl_password,
        }
        if protocol.startswith("SASL"):
            missing = [f"EPISODIC_{k.upper()}" for k, v in sasl.items() if not v]
            if missing:
                raise ValueError(f"EPISODIC_KAFKA_SECURITY_PROTOCOL={protocol} needs {', '.join(missing)}")
        else:
            given = [f"EPISODIC_{k.upper()}" for k, v in sasl.items() if v]
            if given:
                raise ValueError(
                    f"{', '.join(given)} set, but EPISODIC_KAFKA_SECURITY_PROTOCOL={protocol} does not use SASL "
                    "(SASL_PLAINTEXT or SASL_SSL)"
                )
        tls = ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile", "kafka_ssl_key_password")
        given = [f"EPISODIC_{k.upper()}" for k in tls if getattr(self, k) is not None]
        if given and not protocol.endswith("SSL"):
            raise ValueError(
                f"{', '.join(given)} set, but EPISODIC_KAFKA_SECURITY_PROTOCOL={protocol} does not use TLS "
                "(SSL or SASL_SSL)"
            )
        if self.kafka_ssl_keyfile is not None and self.kafka_ssl_certfile is None:
            raise ValueError("EPISODIC_KAFKA_SSL_KEYFILE set without EPISODIC_KAFKA_SSL_CERTFILE")
        if self.qdrant_ca_file is not None and not (self.qdrant_url or "").startswith("https://"):
            raise ValueError("EPISODIC_QDRANT_CA_FILE set, but EPISODIC_QDRANT_URL is not an https:// URL")
        return self

    @field_validator("decay_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter

        if not croniter.is_valid(value.strip()):
            raise ValueError(f"not a cron expression (minute hour day month weekday, UTC): {value!r}")
        return value.strip()

    # Health agent (SPEC §8; definitions in episodic/domain/health.py and docs/health.md)
    health_daily_at: str = Field(
        default="03:00",
        pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$",
        description="UTC time (HH:MM) of the daily snapshot of every workspace and crew",
    )
    health_tick_s: float = Field(default=30.0, gt=0, le=3600, description="how often the scheduler looks at the clock")
    health_freshness_half_life_days: float = Field(
        default=60.0, gt=0, description="freshness = 100 x 0.5^(median age in days / this)"
    )
    health_coherence_sample: int = Field(
        default=512, ge=1, le=100_000, description="memories whose nearest neighbour is searched (stable sample)"
    )
    health_coherence_floor: float = Field(default=0.30, ge=-1.0, lt=1.0, description="mean top-1 cosine that maps to 0")
    health_coherence_ceiling: float = Field(default=0.80, gt=-1.0, le=1.0, description="... and to 100")
    health_efficiency_window_days: int = Field(default=7, ge=1, le=90, description="recalls counted by efficiency")
    health_efficiency_floor: float = Field(default=0.20, ge=-1.0, lt=1.0, description="mean hit cosine that maps to 0")
    health_efficiency_ceiling: float = Field(default=0.70, gt=-1.0, le=1.0, description="... and to 100")
    health_history_days: int = Field(default=400, ge=1, le=3650, description="daily snapshots kept per scope")
    health_gauge_workspaces: int = Field(
        default=50, ge=0, le=10_000, description="workspaces labelled in the health gauges (the lowest scores)"
    )

    # Nudge agent (SPEC §8, §10 "Nudge")
    nudge_threshold: int = Field(default=60, ge=1, description="entries of a run since its last memory.updated")
    nudge_run_idle_s: float = Field(
        default=86_400.0, gt=0, description="a run with no entry for this long is forgotten (its counter dropped)"
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Settings:
        for name in ("coherence", "efficiency"):
            lo, hi = getattr(self, f"health_{name}_floor"), getattr(self, f"health_{name}_ceiling")
            if hi <= lo:
                raise ValueError(f"health_{name}_ceiling ({hi}) must be above health_{name}_floor ({lo})")
        return self

    @property
    def dense_weight(self) -> float:
        """The dense leg's RRF weight: `rrf_dense_weight`, else the chunk mode's (eval/README.md, "Piece prior":
        2.5 over sentence pieces; over the windows 1, their own tree, oracle dev R@5 0.613 against 0.599)."""
        if self.rrf_dense_weight is not None:
            return self.rrf_dense_weight
        return FUSION_BY_CHUNK_MODE[self.chunk_mode][0]

    @property
    def head(self) -> int:
        """BM25's top N as an extra leg: `rrf_head`, else the chunk mode's (off over sentence pieces, 5 over
        the windows)."""
        if self.rrf_head is not None:
            return self.rrf_head
        return FUSION_BY_CHUNK_MODE[self.chunk_mode][1]

    @property
    def lexical_full(self) -> float:
        """The lexical confidence's full-weight strength: `rrf_lexical_full`, else the chunk mode's (4 over
        sentence pieces, where it was chosen; off over the windows, where it was not measured)."""
        if self.rrf_lexical_full is not None:
            return self.rrf_lexical_full
        return FUSION_BY_CHUNK_MODE[self.chunk_mode][2]

    @property
    def embedded_broker(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def fetch_wait_ms(self) -> int:
        """`fetch_max_wait_ms`, else 200 ms on Kafka, 50 on Tansu."""
        if self.fetch_max_wait_ms is not None:
            return self.fetch_max_wait_ms
        return TANSU_FETCH_WAIT_MS if self.broker_is_tansu else KAFKA_FETCH_WAIT_MS

    @property
    def broker_is_tansu(self) -> bool:
        """The broker is Tansu (EPISODIC_BROKER=tansu, or the stack fell back to it: `stack.engine`): no
        idempotent producers, end offsets from fetch high watermarks (its ListOffsets misreports them)."""
        return self.broker == "tansu"

    @property
    def exactly_once(self) -> bool:
        """The gate writes in transactions and its output's readers read committed records only:
        `gate_exactly_once`, never on Tansu (no transactions)."""
        return self.gate_exactly_once and not self.broker_is_tansu

    @property
    def isolation_level(self) -> str:
        """How the consumers of the gate's output read: committed records only under `exactly_once` (an aborted
        transaction's records are never seen), else everything written."""
        return "read_committed" if self.exactly_once else "read_uncommitted"

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"{self.broker_host}:{self.broker_port}"

    @property
    def onnx_cache_dir(self) -> Path:
        """The ONNX export cache: `model_cache_dir`, else the XDG cache (XDG_CACHE_HOME or ~/.cache)."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir
        return _xdg_cache() / "episodic" / "onnx"

    @property
    def packaged_models_dir(self) -> Path:
        """Where a model carried by packages in parts (all-mpnet-base-v2) is joined: `model_cache_dir`/models,
        else the XDG cache's episodic/models."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir / "models"
        return _xdg_cache() / "episodic" / "models"

    @property
    def sparse_only_forced(self) -> bool:
        return self.embed_model.strip().lower() in ("none", "", "off")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
