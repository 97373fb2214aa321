"""Embeddings on ONNX Runtime: the same vectors as the torch model, for recall queries and ingestion batches.

Queries: a recall embeds one short query on the latency path. Measured on 2 cores
(`bench.bench_recall_latency` reports it next to the torch path in the same run): torch eager forward
p50 ~9 ms, this ~3.5 ms. It runs on a session of its own, so ingestion never queues in front of it.

Batches (`encode_batch`): the texts are tokenized once, sorted by length and cut into forward passes of
at most a token budget (padding included; `episodic.embedding.cores`), so a pass pads only to its own longest text.
The passes run on the cores the core budget gives at that moment (every core while the gate and recall are
idle, one fewer while they need one), as concurrent *streams*: with `max_streams` > 1, up to that many
passes at once (at most `STREAMS_MAX`), each on a session of its own with its share of the cores, rather
than one pass at a time spread over every core. A forward pass of a batch of short texts is a few small
matrix products; split over two threads, each product waits for its slower half, and on a machine whose
cores other work also wants, for a preempted peer. Two single-thread passes side by side wait for
nothing: on 2 cores the ONNX passes of a 2,000-summary burst ran 1.28x faster (169 vs 132 summaries/s,
medians of 5 interleaved runs; 1.1x with another process taking half a core). A batch of one pass runs
it on every core (steady ingestion's latency). One session per (threads, stream), created on first use.

How: the sentence-transformers model's transformer is exported once with the eager attention (so ONNX
Runtime's BERT optimizer can fuse it into its Attention kernels) into a cache directory keyed by the model
files, torch and transformers versions; pooling and normalisation are done here in numpy. Only the plain
Transformer -> Pooling (mean or CLS) -> [Normalize] pipeline is supported (the vector is always
normalised, as on the torch path); anything else, a failed export,
or a parity check against the torch vectors below `PARITY_MIN_COSINE` (the caller runs it: `query_parity`,
`batch_parity`) keeps torch. `EPISODIC_QUERY_BACKEND=torch` / `EPISODIC_EMBED_BACKEND=torch` skip it.

Why not sentence-transformers' own ONNX backend (`SentenceTransformer(path, backend="onnx")`): it needs
optimum-onnx, whose only release (0.1.0) requires transformers < 4.58 while the project runs on
transformers 5 (installing it would downgrade transformers, huggingface_hub and tokenizers). Measured in
an isolated install with that older transformers, one query at a time on the 2-core machine (each next
to the torch forward in the same process): its vectors match torch (cosine 1.0), but p50 26.2 ms vs torch
37.6 ms (0.70x), where this encoder gives p50 9.2 ms vs torch 39.4 ms (0.23x): its plain export runs
unfused attention, this one is fused by ONNX Runtime's BERT optimizer.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from episodic.embedding.passes import Passes, passes, share

log = logging.getLogger(__name__)

PARITY_MIN_COSINE = 0.9999
PROBES = (
    "why was the checkout service OOM-killed after the deploy?",
    "eval regression",
    "Connection pool exhausted on the payments gateway; retries doubled the load and the breaker opened.",
)
# A padded batch: short and long texts together (the longest near the model's 256 word pieces).
BATCH_PROBES = (
    *PROBES,
    "x",
    "Deployed v2.3.1 to staging; smoke tests green, p95 latency 180 ms. " * 12,
    "Ünïcödé – emoji 🚀 and 中文 text in a summary",
)
_EXPORT_LOCK = threading.Lock()
STREAMS_MAX = 4  # concurrent forward passes at most (the cores beyond go into each pass's threads)
STREAM_WAIT_S = 0.25  # a stream the core budget has no core for asks again after a pass, or this long


def _pipeline(model: Any) -> tuple[Any, str] | None:
    """(transformer module, pooling 'mean'|'cls') for a plain pipeline, else None. The vector is always
    normalised, as `embed_query` does on the torch path."""
    mods = list(model._modules.values()) if hasattr(model, "_modules") else []
    if len(mods) not in (2, 3):
        return None
    names = [type(m).__name__ for m in mods]
    if names[0] != "Transformer" or names[1] != "Pooling" or (len(mods) == 3 and names[2] != "Normalize"):
        return None
    pool = mods[1]
    mode = getattr(pool, "pooling_mode", None)
    if isinstance(mode, str):  # sentence-transformers >= 5
        if mode not in ("mean", "cls"):
            return None
    else:
        flags = {
            "mean": bool(getattr(pool, "pooling_mode_mean_tokens", False)),
            "cls": bool(getattr(pool, "pooling_mode_cls_token", False)),
        }
        others = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")
        if any(getattr(pool, o, False) for o in others) or sum(flags.values()) != 1:
            return None
        mode = "mean" if flags["mean"] else "cls"
    if getattr(pool, "include_prompt", True) is False:
        return None
    return mods[0], mode


def _cache_key(auto_model: Any, model_path: str) -> str:
    import torch
    import transformers

    h = hashlib.sha256()
    h.update(f"{torch.__version__}|{transformers.__version__}|v1|".encode())
    h.update(repr(sorted(auto_model.config.to_dict().items())).encode())
    path = Path(model_path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    for p in files:
        st = p.stat()
        h.update(f"{p.relative_to(path)}:{st.st_size}:{int(st.st_mtime)}|".encode())
    if not files:
        # No local directory to fingerprint: hash the weights themselves.
        for name, t in sorted(auto_model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes()[:4096])
    return h.hexdigest()[:20]


def _export(auto_model: Any, tokenizer: Any, target: Path) -> None:
    """Export `auto_model` (a copy with eager attention) to `target`, then fuse it."""
    import torch

    m = copy.deepcopy(auto_model).eval()
    try:
        m.set_attn_implementation("eager")
    except Exception:
        m.config._attn_implementation = "eager"
    enc = tokenizer(["hello world"], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]

    class _Wrapper(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state

    axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, raw_name = tempfile.mkstemp(suffix=".onnx", dir=target.parent)
    os.close(fd)
    raw = Path(raw_name)
    try:
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python branches
            torch.onnx.export(
                _Wrapper(m),
                tuple(enc[n] for n in names),
                str(raw),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        try:  # fuse attention/GELU/LayerNorm (measured ~25 % faster per query); the raw graph also works
            from onnxruntime.transformers import optimizer

            cfg = auto_model.config
            logging.disable(logging.INFO)  # the optimizer logs every fusion step at INFO
            try:
                opt = optimizer.optimize_model(
                    str(raw),
                    model_type="bert",
                    num_heads=int(cfg.num_attention_heads),
                    hidden_size=int(cfg.hidden_size),
                )
                opt.save_model_to_file(str(raw))
            finally:
                logging.disable(logging.NOTSET)
        except Exception as e:
            log.info("onnx: graph fusion skipped (%s); using the plain export", e)
        os.replace(raw, target)  # atomic: concurrent processes never read a half-written file
    finally:
        raw.unlink(missing_ok=True)


def _session(ort: Any, path: Path, threads: int) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # A spinning pool burns the cores that the gate, the consumer and the broker share with us.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """Texts -> unit vectors, as the torch sentence-transformers pipeline computes them."""

    def __init__(self, path: Path, ort: Any, tokenizer: Any, max_len: int, pooling: str, *, query_threads: int) -> None:
        self.path = path
        self._ort = ort
        self._tokenizer = tokenizer
        self._max_len = max_len
        self._pooling = pooling
        self._query = _session(ort, path, query_threads)
        self._inputs = [i.name for i in self._query.get_inputs()]
        self._sessions: dict[tuple[int, int], Any] = {}
        self._lock = threading.Lock()
        self._streams: ThreadPoolExecutor | None = None  # the streams after the first (the caller's thread)
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_id = int(pad) if pad is not None else 0

    def session(self, threads: int, stream: int = 0) -> Any:
        """Stream `stream`'s batch session with `threads` intra-op threads (created once per pair)."""
        with self._lock:
            s = self._sessions.get((threads, stream))
            if s is None:
                s = self._sessions[threads, stream] = _session(self._ort, self.path, threads)
            return s

    def prepare(self, cores: Sequence[int], max_streams: int) -> None:
        """Create every session that passes on `cores` threads in all can use (none created on the
        ingestion path)."""
        for n in cores:
            for width in range(1, min(n, max_streams, STREAMS_MAX) + 1):
                for stream in range(width):
                    self.session(share(n, width, stream), stream)

    def _pool_rows(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self._pooling == "cls":
            vecs = hidden[:, 0, :]
        else:
            m = mask.astype(np.float32)[:, :, None]
            vecs = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        vecs = np.asarray(vecs, dtype=np.float32)
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

    def encode(self, text: str) -> np.ndarray:
        """One query on the query session."""
        enc = self._tokenizer([text], truncation=True, max_length=self._max_len, return_tensors="np")
        feed = {n: np.asarray(enc[n], dtype=np.int64) for n in self._inputs}
        hidden = self._query.run(None, feed)[0]
        return self._pool_rows(hidden, feed["attention_mask"])[0]

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        threads: Callable[[], int],
        token_budget: Callable[[], int],
        max_batch: int,
        max_streams: int = 1,
        on_pass: Callable[[int, int, float], None] | None = None,
    ) -> np.ndarray:
        """(len(texts) × dim) unit vectors. `threads` (the cores to use) is asked before every forward
        pass (the core budget may change in between), `token_budget` once; up to `max_streams` passes run
        at once, the cores shared among them (see the module doc). `on_pass(cores, word pieces, seconds)`
        is told what each pass ran on and how long it took, per stream: the seconds that all the streams
        together took for its word pieces."""
        enc = self._tokenizer(list(texts), truncation=True, max_length=self._max_len)
        ids: list[list[int]] = enc["input_ids"]
        types: list[list[int]] | None = enc.get("token_type_ids")
        todo = passes([len(x) for x in ids], token_budget(), max_batch)
        if not todo:
            return np.zeros((0, 0), dtype=np.float32)
        width = min(max_streams, STREAMS_MAX, len(todo))  # a batch of one pass runs it on every core
        shared = Passes(todo)

        def stream(k: int) -> None:
            while not shared.stop:
                n = threads()
                streams = min(n, width)
                if k >= streams:  # the budget has no core for this stream now: ask again after a pass
                    if not shared.wait(STREAM_WAIT_S):
                        return
                    continue
                group = shared.take()
                if group is None:
                    return
                mine = share(n, streams, k)
                vecs, pieces, took = self._forward(self.session(mine, k), group, ids, types)
                shared.put(group, vecs)
                if on_pass is not None:  # the rate of all `streams` together (each ran about as long)
                    on_pass(n, pieces, took / streams)

        others = [self._executor().submit(shared.guard, stream, k) for k in range(1, width)]
        try:
            shared.guard(stream, 0)
        finally:
            for f in others:
                f.result()
        return shared.result()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._streams is None:
                self._streams = ThreadPoolExecutor(STREAMS_MAX - 1, thread_name_prefix="onnx-stream")
            return self._streams

    def _forward(
        self, session: Any, group: list[int], ids: list[list[int]], types: list[list[int]] | None
    ) -> tuple[np.ndarray, int, float]:
        """One forward pass over the texts `group`: (their unit vectors, word pieces with padding, seconds)."""
        width = max(len(ids[j]) for j in group)
        input_ids = np.full((len(group), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(group), width), dtype=np.int64)
        type_ids = np.zeros((len(group), width), dtype=np.int64)
        for row, j in enumerate(group):
            k = len(ids[j])
            input_ids[row, :k] = ids[j]
            mask[row, :k] = 1
            if types is not None:
                type_ids[row, :k] = types[j]
        feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": type_ids}
        t0 = time.perf_counter()
        hidden = session.run(None, {k: feed[k] for k in self._inputs})[0]
        took = time.perf_counter() - t0
        return self._pool_rows(hidden, mask), int(input_ids.size), took

    def query_parity(self, reference: Callable[[str], np.ndarray]) -> float:
        """The worst cosine between this encoder's query vectors and `reference`'s on the probes."""
        return min(float(np.dot(self.encode(p), reference(p))) for p in PROBES)

    def batch_parity(self, reference: Callable[[list[str]], np.ndarray], *, threads: int) -> float:
        """The worst cosine between one padded batch of the probes and `reference`'s vectors of it."""
        texts = list(BATCH_PROBES)
        mine = self.encode_batch(texts, threads=lambda: threads, token_budget=lambda: 1 << 20, max_batch=len(texts))
        ref = np.asarray(reference(texts), dtype=np.float32)
        return float(np.min(np.sum(mine * ref, axis=1)))

    @classmethod
    def build(cls, model: Any, model_path: str, *, query_threads: int, cache_dir: Path) -> OnnxEncoder | None:
        """An encoder for `model` (exported once into `cache_dir`), or None (the reason logged) when the
        torch path must stay. Parity is the caller's to check (`query_parity`, `batch_parity`)."""
        try:
            import onnxruntime as ort
        except ImportError:
            log.info("onnxruntime is not installed: embeddings stay on torch")
            return None
        parts = _pipeline(model)
        if parts is None:
            log.info("onnx: the model is not a plain Transformer/Pooling/Normalize pipeline; embeddings use torch")
            return None
        transformer, pooling = parts
        auto_model = getattr(transformer, "auto_model", None)
        tokenizer = getattr(model, "tokenizer", None)
        if auto_model is None or tokenizer is None:
            return None
        try:
            target = cache_dir / f"{_cache_key(auto_model, model_path)}.onnx"
            with _EXPORT_LOCK:
                if not target.exists():
                    log.info("onnx: exporting the model to %s (once per model)", target)
                    _export(auto_model, tokenizer, target)
            max_len = int(getattr(model, "max_seq_length", None) or getattr(tokenizer, "model_max_length", None) or 512)
            return cls(target, ort, tokenizer, max_len, pooling, query_threads=query_threads)
        except Exception as e:
            log.warning("onnx: encoder unavailable (%s: %s); embeddings use torch", type(e).__name__, e)
            return None
