"""Settings: one frozen pydantic-settings class, prefix EPISODIC_ (SPEC §9)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from episodic.context import ContextMode

DEFAULT_MODEL = "all-MiniLM-L6-v2"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EPISODIC_", frozen=True, extra="ignore")

    # Kafka
    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; unset: start the embedded broker"
    )
    broker_port: int = Field(default=9092, ge=1, le=65535, description="embedded broker port")
    broker_host: str = "127.0.0.1"
    topic_partitions: int = Field(default=4, ge=1, le=256)
    topic_replication: int = Field(default=1, ge=1)
    consumer_group_prefix: str = "episodic"
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    lag_interval_s: float = Field(
        default=5.0, gt=0, le=3600, description="consumer lag is measured this often, stuck or not (SPEC §10)"
    )
    referenced_buffer: int = Field(
        default=10_000,
        ge=0,
        le=1_000_000,
        description="memory.referenced events kept while Kafka is unreachable; beyond it they are dropped "
        "and counted (episodic_referenced_dropped_total)",
    )

    # Store
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset: embedded Qdrant Edge")
    qdrant_api_key: SecretStr | None = None
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
        description="torch threads for the model; unset: all cores for a dedicated embedder, one fewer when "
        "the process runs other stages too (an oversubscribed OpenMP pool stalls)",
    )
    query_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="recall query embeddings: ONNX Runtime (same vector, ~2.5x faster; exported once into "
        "model_cache_dir) or the torch model",
    )
    model_cache_dir: Path | None = Field(
        default=None, description="ONNX export cache; unset: $XDG_CACHE_HOME/episodic/onnx (~/.cache/episodic/onnx)"
    )
    chunk_tokens: int = Field(default=256, ge=16, le=512, description="word pieces per dense chunk")
    chunk_overlap_tokens: int = Field(default=32, ge=0, le=256)
    # Context-aware indexing (episodic.context; chosen on LongMemEval dev, eval/README.md): a second BM25
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
    alias_limit: int = Field(
        default=20,
        ge=0,
        le=10_000,
        description="alias ids kept per duplicate memory (the newest); occurrences counts them all",
    )

    # HTTP
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)
    tokens_file: Path | None = Field(default=None, description="bearer tokens file (JSON)")

    # Recall
    high_value_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    prefetch_limit: int = Field(default=100, ge=10, le=2000)
    # Hybrid fusion, chosen on LongMemEval dev (eval/README.md): weighted RRF (k=3) over five legs: dense (1),
    # BM25 (1), the dense candidates re-scored by the context BM25 (0.5), BM25's top 5 again (0.75) and the
    # context BM25 (1); with context off, or a collection without it, the first four (re-scored by BM25).
    fusion: Literal["rrf", "dbsf", "rrf_equal"] = "rrf"
    rrf_k: int = Field(default=3, ge=1)
    rrf_dense_weight: float = Field(default=1.0, ge=0.0)
    rrf_sparse_weight: float = Field(default=1.0, ge=0.0)
    rrf_both_weight: float = Field(default=0.5, ge=0.0, description="dense candidates re-scored by BM25; 0: off")
    rrf_head: int = Field(default=5, ge=0, le=100, description="BM25's top N as an extra leg; 0: off")
    rrf_head_weight: float = Field(default=0.75, ge=0.0)
    rrf_context_weight: float = Field(
        default=1.0, ge=0.0, description="BM25 over the context-folded text as a fifth leg; 0: off"
    )
    rrf_both_context: bool = Field(
        default=True, description="the dense candidates are re-scored by the context-folded BM25 (not the entry's)"
    )
    # Episode adjacency at recall: a direct hit's previous/next memory in its run, scored below it, in k.
    recall_adjacent: bool = Field(default=False, description="default of the recall request's `adjacent`")
    adjacent_weight: float = Field(
        default=0.5, gt=0.0, lt=1.0, description="an adjacent memory scores this fraction of its hit's score"
    )

    @field_validator("context_mode")
    @classmethod
    def _context_mode(cls, v: str) -> str:
        from episodic.context import parse_mode

        parse_mode(v)
        return v.strip().lower()

    @property
    def context(self) -> ContextMode:
        from episodic.context import parse_mode

        return parse_mode(self.context_mode, self.context_words, date=self.context_date)

    # Maintenance agents (SPEC §8): the linker, the importance agent with its nightly decay, retention
    linker_enabled: bool = Field(default=True, description="run the linker (similar edges) in `episodic up`")
    similar_threshold: float = Field(default=0.80, gt=0.0, le=1.0, description="similar edge: cosine above this")
    similar_top_k: int = Field(default=3, ge=1, le=50, description="similar edges per new memory, at most")
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
    retention_enabled: bool = Field(default=False, description="archive and remove memories long at the floor")
    retention_floor_days: int = Field(
        default=30, ge=0, le=36_500, description="days at the importance floor before a memory is archived"
    )

    @field_validator("decay_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter

        if not croniter.is_valid(value.strip()):
            raise ValueError(f"not a cron expression (minute hour day month weekday, UTC): {value!r}")
        return value.strip()

    # Agent surfaces and client commands: where a client finds the service and who it is
    # (`MemoryClient.from_settings`, `episodic mcp`, `episodic recall` / `doctor`, the LangChain retriever).
    # Never taken from a tool argument.
    url: str | None = Field(default=None, description="the recall service's URL (EPISODIC_URL)")
    recall_url: str | None = Field(default=None, description="older name of EPISODIC_URL")
    token: SecretStr | None = Field(default=None, description="bearer token the client sends (EPISODIC_TOKEN)")
    workspace_id: str | None = Field(default=None, min_length=1, max_length=128)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)
    crew_id: str | None = Field(default=None, min_length=1, max_length=128)
    role: Literal["agent", "lead"] | None = Field(
        default=None, description="agent: recall scope own; lead: crew_shared (seed 001 ScopeForRole)"
    )
    client_timeout_s: float = Field(default=10.0, gt=0, le=600)
    client_retries: int = Field(default=3, ge=0, le=20, description="retries on 503 and connection errors")

    @property
    def service_url(self) -> str:
        """EPISODIC_URL, else EPISODIC_RECALL_URL, else http://<http_host>:<http_port> (a wildcard host: loopback)."""
        explicit = self.url or self.recall_url
        if explicit:
            return explicit.rstrip("/")
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "::", "") else self.http_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.http_port}"

    @property
    def embedded_broker(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"{self.broker_host}:{self.broker_port}"

    @property
    def onnx_cache_dir(self) -> Path:
        """The ONNX export cache: `model_cache_dir`, else the XDG cache (XDG_CACHE_HOME or ~/.cache)."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "episodic" / "onnx"

    @property
    def sparse_only_forced(self) -> bool:
        return self.embed_model.strip().lower() in ("none", "", "off")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
