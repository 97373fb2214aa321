"""Query embeddings on ONNX Runtime: the same vector as the torch model, about 2.5x faster per query.

A recall embeds one short query on the latency path. Measured on 2 cores (`bench.bench_recall_latency`
reports it next to the torch path in the same run): torch eager forward p50 ~9 ms, this ~3.5 ms.
Ingestion batches stay on torch: for padded batches of long chunks ONNX Runtime was no faster here.

How: the sentence-transformers model's transformer is exported once with the eager attention (so ONNX
Runtime's BERT optimizer can fuse it into its Attention kernels) into a cache directory keyed by the model
files, torch and transformers versions; pooling and normalisation are done here in numpy. Only the plain
Transformer -> Pooling (mean or CLS) -> [Normalize] pipeline is supported (the vector is always
normalised, as on the torch path); anything else, a failed export,
or a parity check against the torch vector below `PARITY_MIN_COSINE` returns None and the caller keeps
torch. Set `EPISODIC_QUERY_BACKEND=torch` to skip this entirely.

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
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

PARITY_MIN_COSINE = 0.9999
PROBES = (
    "why was the checkout service OOM-killed after the deploy?",
    "eval regression",
    "Connection pool exhausted on the payments gateway; retries doubled the load and the breaker opened.",
)
_EXPORT_LOCK = threading.Lock()


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


class OnnxQueryEncoder:
    """One text -> unit vector, as the torch sentence-transformers pipeline computes it."""

    def __init__(self, session: Any, tokenizer: Any, max_len: int, pooling: str) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._max_len = max_len
        self._pooling = pooling
        self._inputs = [i.name for i in session.get_inputs()]

    def encode(self, text: str) -> np.ndarray:
        enc = self._tokenizer([text], truncation=True, max_length=self._max_len, return_tensors="np")
        feed = {n: np.asarray(enc[n], dtype=np.int64) for n in self._inputs}
        hidden = self._session.run(None, feed)[0][0]
        if self._pooling == "cls":
            vec = hidden[0]
        else:
            mask = feed["attention_mask"][0].astype(np.float32)[:, None]
            vec = (hidden * mask).sum(axis=0) / max(float(mask.sum()), 1e-9)
        vec = np.asarray(vec, dtype=np.float32)
        return vec / max(float(np.linalg.norm(vec)), 1e-12)

    @classmethod
    def build(
        cls,
        model: Any,
        model_path: str,
        *,
        threads: int,
        reference: Callable[[str], np.ndarray],
        cache_dir: Path,
    ) -> OnnxQueryEncoder | None:
        """An encoder for `model`, or None (with the reason logged) when the torch path must stay."""
        try:
            import onnxruntime as ort
        except ImportError:
            log.info("onnxruntime is not installed: queries are embedded with torch")
            return None
        parts = _pipeline(model)
        if parts is None:
            log.info("onnx: the model is not a plain Transformer/Pooling/Normalize pipeline; queries use torch")
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
                    log.info("onnx: exporting the query encoder to %s (once per model)", target)
                    _export(auto_model, tokenizer, target)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = max(1, threads)
            opts.inter_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # A spinning pool burns the cores that the gate, the consumer and the broker share with us.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
            max_len = int(getattr(model, "max_seq_length", None) or getattr(tokenizer, "model_max_length", None) or 512)
            enc = cls(session, tokenizer, max_len, pooling)
            worst = min(float(np.dot(enc.encode(p), reference(p))) for p in PROBES)
        except Exception as e:
            log.warning("onnx: query encoder unavailable (%s: %s); queries use torch", type(e).__name__, e)
            return None
        if worst < PARITY_MIN_COSINE:
            log.warning("onnx: query vectors differ from torch (cosine %.6f); queries use torch", worst)
            return None
        log.info("onnx: query encoder ready (%s, %d threads, parity cosine %.7f)", target.name, threads, worst)
        return enc
