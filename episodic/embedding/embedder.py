"""Sentence-transformers embedder with chunking for long text (SPEC §10 "Long text").

A text is cut into pieces (episodic.domain.chunking): by default its sentences packed into pieces of at most
`chunk_words` words, each cut further when it is longer than the model reads (all-MiniLM-L6-v2: 256 word
pieces) into overlapping windows of word pieces (cut on the tokenizer's character offsets, so every chunk
is real text). Every piece gets its own vector; the store keeps them as one multivector per point and
scores with max-sim. All pieces of a batch go through one model call.

Backends (`EPISODIC_EMBED_BACKEND`, `EPISODIC_QUERY_BACKEND`): ONNX Runtime by default, on the project's
own export of the model (episodic.embedding.onnx_encoder), for ingestion batches and for queries, each checked
against the torch vectors at start; torch when that is off, unavailable or differs (a warning and
`episodic_embed_fallbacks_total{path,reason}`), and for good after an ONNX failure at run time. On ONNX,
batches take their cores from the process's core budget (episodic.embedding.cores) before every forward pass
(every core while the gate and recall are idle, one fewer while they need one), in concurrent passes
(`EPISODIC_EMBED_STREAMS`)."""

from __future__ import annotations

import copy
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from episodic.domain.chunking import ChunkMode, Scheme, pieces
from episodic.embedding import packaged
from episodic.embedding.cores import CoreBudget, available_cores
from episodic.kernel.errors import EmbedderUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import DEFAULT_MODEL, Settings

log = logging.getLogger(__name__)

_BUNDLED_ALIASES = packaged.BUNDLED
resolve_model_path = packaged.resolve  # the configured model as SentenceTransformer opens it offline


class SentenceTransformerEmbedder:
    """Embedder port implementation over sentence-transformers."""

    def __init__(
        self,
        model: Any,
        model_id: str,
        *,
        batch_size: int = 64,
        chunk_tokens: int = 256,
        chunk_overlap: int = 32,
        chunk_mode: ChunkMode = "window",
        chunk_words: int = 32,
        document_threads: int | None = None,
        query_threads: int | None = None,
        model_path: str | None = None,
    ) -> None:
        self._model = model
        # torch's intra-op thread count is per calling thread: ingestion batches and queries each get their own
        self.document_threads = document_threads
        self.query_threads = query_threads
        self._model_id = model_id
        self._batch_size = batch_size
        dim = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
        if dim is None:
            dim = model.get_sentence_embedding_dimension()
        self._dim = int(dim)
        max_len = int(getattr(model, "max_seq_length", chunk_tokens) or chunk_tokens)
        # Room for [CLS] and [SEP].
        self._max_window = max(8, max_len - 2)
        self._window = max(8, min(chunk_tokens, max_len) - 2)
        self._overlap = max(0, min(chunk_overlap, self._window // 2))
        self.chunk_mode: ChunkMode = chunk_mode
        self.chunk_words = chunk_words
        self._tokenizer = model.tokenizer
        self._documents_lock = threading.Lock()  # one ingestion batch on the model's core at a time
        self.model_path = model_path or model_id  # where the files are (keys the ONNX export cache)
        # Set by `attach_onnx` when ONNX Runtime reproduces the torch vectors (episodic/embedding/onnx_encoder.py).
        self.query_encoder: Any = None
        self.document_encoder: Any = None
        self.cores = CoreBudget(fixed=document_threads)  # replaced by the stack's, shared with the gate and recall
        self.streams: int | None = None  # ONNX forward passes at once (EPISODIC_EMBED_STREAMS); None: one per core
        self.fallbacks: list[tuple[str, str]] = []  # (path, reason) of every fall back to torch
        self._metrics: Metrics | None = None

    @property
    def backends(self) -> dict[str, str]:
        """The backend of each path now: {"documents": "onnx"|"torch", "queries": ...}."""
        onnx = {"documents": self.document_encoder is not None, "queries": self.query_encoder is not None}
        return {path: "onnx" if on else "torch" for path, on in onnx.items()}

    def bind_metrics(self, metrics: Metrics) -> None:
        """Export the backends and the fallbacks so far (and later ones) to `metrics`."""
        self._metrics = metrics
        for path, reason in self.fallbacks:
            metrics.embed_fallbacks.labels(path=path, reason=reason).inc()
        self._export_backends()

    def _export_backends(self) -> None:
        if self._metrics is not None:
            for path, backend in self.backends.items():
                for b in ("onnx", "torch"):
                    self._metrics.embed_backend.labels(path=path, backend=b).set(1 if b == backend else 0)

    def fall_back(self, path: str, reason: str, why: str) -> None:
        """Leave ONNX for torch on `path` ("documents" or "queries"), with a warning and the metric."""
        log.warning("onnx %s: %s; %s are embedded with torch", path, why, path)
        if path == "documents":
            self.document_encoder = None
        else:
            self.query_encoder = None
        self.fallbacks.append((path, reason))
        if self._metrics is not None:
            self._metrics.embed_fallbacks.labels(path=path, reason=reason).inc()
        self._export_backends()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def model(self) -> Any:
        return self._model

    @property
    def pieces(self) -> str:
        """How this embedder cuts a text into vectors (episodic.domain.chunking.Scheme's key): part of an embedding
        generation's identity."""
        words = self.chunk_words if self.chunk_mode == "sentences" else 0
        return Scheme(self.chunk_mode, words, self._window, self._overlap).key()

    def with_pieces(self, key: str) -> SentenceTransformerEmbedder:
        """The same model (weights, encoders, cores, lock shared) cutting texts by another scheme (windows of
        unrecorded sizes, `LEGACY`: this one's), never longer than the model reads. ValueError: no scheme."""
        scheme = Scheme.parse(key)
        other = copy.copy(self)
        other.chunk_mode = scheme.mode
        other.chunk_words = scheme.words or self.chunk_words
        if scheme.window:
            other._window = min(scheme.window, self._max_window)
            other._overlap = min(scheme.overlap, other._window // 2)
        return other

    def chunk(self, text: str) -> list[str]:
        """The pieces of `text` that get a vector each (episodic.domain.chunking, `chunk_mode`)."""
        return pieces(text, self.chunk_mode, self.chunk_words, self.windows)

    def windows(self, text: str) -> list[str]:
        """Split `text` into windows of at most `window` word pieces (character-exact slices)."""
        if len(text) <= self._window:  # a word piece covers at least one character
            return [text]
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
        offsets = enc["offset_mapping"]
        if len(offsets) <= self._window:
            return [text]
        chunks: list[str] = []
        step = self._window - self._overlap
        start = 0
        while start < len(offsets):
            end = min(start + self._window, len(offsets))
            a = offsets[start][0]
            b = offsets[end - 1][1]
            piece = text[a:b].strip()
            if piece:
                chunks.append(piece)
            if end == len(offsets):
                break
            start += step
        return chunks or [text[: self._window]]

    @staticmethod
    def _use_threads(n: int | None) -> None:
        if n:
            import torch

            if torch.get_num_threads() != n:
                torch.set_num_threads(n)

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self._dim)

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        if not texts:
            return []
        self._use_threads(self.document_threads)
        spans: list[tuple[int, int]] = []
        flat: list[str] = []
        for t in texts:
            parts = self.chunk(t)
            spans.append((len(flat), len(flat) + len(parts)))
            flat.extend(parts)
        with self._documents_lock:
            vecs = self._encode_documents(flat)  # one model call for the whole batch
        return [vecs[a:b] for a, b in spans]

    def _encode_documents(self, texts: list[str]) -> np.ndarray:
        enc = self.document_encoder
        if enc is not None:
            try:
                out = enc.encode_batch(
                    texts,
                    threads=self.cores.threads,
                    token_budget=self.cores.token_budget,
                    max_batch=self._batch_size,
                    max_streams=self.streams or self.cores.bulk,
                    on_pass=self._passed,
                )
                return np.asarray(out, dtype=np.float32).reshape(len(texts), self._dim)
            except Exception as e:
                self.fall_back("documents", "error", f"a batch failed ({type(e).__name__}: {e})")
        self._use_threads(self.document_threads)
        return self._encode(texts)

    def _passed(self, threads: int, tokens: int, seconds: float) -> None:
        self.cores.observe(threads, tokens, seconds)
        m = self._metrics
        if m is not None:
            m.embed_threads.set(threads)
            if threads < self.cores.bulk:
                m.embed_yielded.inc()

    def embed_query(self, text: str) -> np.ndarray:
        """One short text on the latency path: ONNX Runtime when `query_encoder` is set (same vector,
        ~2.5x faster), else the torch forward pass. A failing ONNX session falls back to torch for good."""
        enc = self.query_encoder
        if enc is not None:
            try:
                return np.asarray(enc.encode(text), dtype=np.float32)
            except Exception as e:
                self.fall_back("queries", "error", f"a query failed ({type(e).__name__}: {e})")
        return self.embed_query_torch(text)

    def embed_query_torch(self, text: str) -> np.ndarray:
        """The model's forward pass without `encode`'s batching machinery (about 6 ms less a call on one
        thread), on all the query threads. Same vector as encode."""
        import torch

        self._use_threads(self.query_threads)
        model = self._model
        prep = getattr(model, "preprocess", None) or model.tokenize
        with torch.inference_mode():
            features = prep([text])
            features = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in features.items()}
            vec = model(features)["sentence_embedding"]
            vec = torch.nn.functional.normalize(vec, p=2, dim=-1)
        return np.asarray(vec[0].float().cpu().numpy(), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)


def model_threads(settings: Settings, *, shared_process: bool) -> int:
    """torch threads for ingestion batches (the fallback path; ONNX batches follow the core budget).

    Measured on 2 cores with one core busy elsewhere (the gate, the broker, a producer): 2 torch threads
    fell from 58 to 21 texts/s (OpenMP threads waiting on a preempted peer), 1 thread held 31 texts/s. So a
    process that also runs other stages leaves them a core.
    """
    if settings.embed_threads:
        return settings.embed_threads
    cores = available_cores()
    return max(1, cores - 1) if shared_process else cores


def load_embedder(
    settings: Settings, *, shared_process: bool = False, queries: bool = True, cores: CoreBudget | None = None
) -> SentenceTransformerEmbedder | None:
    """Load the configured model, or return None (sparse-only) when it is off, missing or broken.
    `queries`: this process answers recalls, so set up the fast query encoder (settings.query_backend).
    `cores`: the process's core budget (the gate and recall claim cores from it); else one of its own."""
    if settings.sparse_only_forced:
        log.warning(
            "EPISODIC_EMBED_MODEL=none: running sparse-only (BM25, no vector similarity). "
            "Unset EPISODIC_EMBED_MODEL to use the bundled %s.",
            DEFAULT_MODEL,
        )
        return None
    try:
        embedder = load_model(settings.embed_model, settings)
    except EmbedderUnavailable as e:
        log.warning(
            "embedder unavailable, running sparse-only (BM25, no vector similarity): %s. Fix: what it says, or "
            "unset EPISODIC_EMBED_MODEL (the bundled model), or point it at a local sentence-transformers model.",
            e,
        )
        return None
    embedder.document_threads = model_threads(settings, shared_process=shared_process)
    embedder.query_threads = settings.embed_threads or available_cores()
    embedder.cores = cores or CoreBudget(fixed=settings.embed_threads)
    if settings.embed_device == "cpu":
        attach_onnx(
            embedder,
            settings,
            queries=queries and settings.query_backend == "onnx",
            documents=settings.embed_backend == "onnx",
        )
    b = embedder.backends
    log.info(
        "embedder: %s on %s; ingestion batches: %s on %s threads; queries: %s on %d threads",
        embedder.model_id,
        settings.embed_device,
        b["documents"],
        f"{embedder.cores.shared}-{embedder.cores.bulk}" if b["documents"] == "onnx" else embedder.document_threads,
        b["queries"],
        embedder.query_threads,
    )
    return embedder


def attach_onnx(embedder: SentenceTransformerEmbedder, settings: Settings, *, queries: bool, documents: bool) -> None:
    """Move `queries` and/or ingestion batches (`documents`) onto ONNX Runtime where it reproduces the
    torch vectors (cosine >= PARITY_MIN_COSINE on probe texts, a padded batch for documents)."""
    from episodic.embedding.onnx_encoder import PARITY_MIN_COSINE, OnnxEncoder

    if not (queries or documents):
        return
    enc = OnnxEncoder.build(
        embedder.model,
        embedder.model_path,
        query_threads=embedder.query_threads or available_cores(),
        cache_dir=settings.onnx_cache_dir,
    )
    paths = [p for p, on in (("queries", queries), ("documents", documents)) if on]
    if enc is None:
        for p in paths:
            embedder.fall_back(p, "unavailable", "no ONNX export for this model (see above)")
        return
    for p in paths:
        try:
            if p == "queries":
                worst = enc.query_parity(embedder.embed_query_torch)
            else:
                worst = enc.batch_parity(embedder._encode, threads=embedder.cores.bulk)
        except Exception as e:
            embedder.fall_back(p, "error", f"the parity check failed ({type(e).__name__}: {e})")
            continue
        if worst < PARITY_MIN_COSINE:
            embedder.fall_back(p, "parity", f"vectors differ from torch (cosine {worst:.6f})")
            continue
        log.info("onnx %s: ready (%s, parity cosine %.7f)", p, enc.path.name, worst)
        if p == "queries":
            embedder.query_encoder = enc
        else:
            embedder.document_encoder, embedder.streams, c = enc, settings.embed_streams, embedder.cores
            enc.prepare(sorted({c.shared, c.bulk}), embedder.streams or c.bulk)  # every session now, none later
    embedder._export_backends()


def attach_query_encoder(embedder: SentenceTransformerEmbedder, settings: Settings) -> bool:
    """Give `embedder` the ONNX Runtime query encoder when it reproduces the torch vector."""
    attach_onnx(embedder, settings, queries=True, documents=False)
    return embedder.query_encoder is not None


def load_model(name: str, settings: Settings) -> SentenceTransformerEmbedder:
    """Load a model or raise EmbedderUnavailable."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    path = resolve_model_path(name, settings.packaged_models_dir)
    if name.lower() not in _BUNDLED_ALIASES and not Path(path).exists() and "/" not in path:
        raise EmbedderUnavailable(f"model {name!r} is neither the bundled model nor a local path")
    try:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(path, device=settings.embed_device)
    except Exception as e:  # any load failure means sparse-only, never a crash
        raise EmbedderUnavailable(f"cannot load model {name!r}: {e}") from e
    return SentenceTransformerEmbedder(
        model,
        name,
        batch_size=settings.encode_batch,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap_tokens,
        chunk_mode=settings.chunk_mode,
        chunk_words=settings.chunk_words,
        model_path=path,
    )
