"""A content-addressed cache of unit-norm embeddings (eval/results/emb/*.npz), keyed by text hash.

Documents are chunked exactly as the pipeline does it (``SentenceTransformerEmbedder.chunk``), and each
chunk's vector is cached under the hash of (kind, chunk text), so reruns and other chunkings that share
chunks cost nothing. One cache per model: the bundled all-MiniLM-L6-v2 ("minilm") in eval/results/emb,
any other sentence-transformers directory in eval/results/emb/<its folder name>.

    python -m eval.embcache --set both                        # the turns as the store indexes them
    python -m eval.embcache --set oracle --ctx prev=1,words=64,date=1  # a context-aware dense text
    python -m eval.embcache --set both --split p32                # sentence pieces (the shipped chunk mode)
    python -m eval.embcache --model /path/to/all-mpnet-base-v2 --set oracle --oracle-limit 150
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
EMB_DIR = RESULTS / "emb"

log = logging.getLogger("eval.embcache")


def key(text: str, kind: str = "doc") -> str:
    return hashlib.sha1(f"{kind}\x00{text}".encode()).hexdigest()


def model_dir(model: str) -> Path:
    return EMB_DIR if model == "minilm" else EMB_DIR / Path(model).name


class EmbeddingCache:
    def __init__(self, model: str = "minilm") -> None:
        self.model = model
        self.dir = model_dir(model)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._vecs: dict[str, np.ndarray] = {}
        for f in sorted(self.dir.glob("shard-*.npz")):
            with np.load(f) as z:
                for k, v in zip(z["keys"], z["vecs"], strict=True):
                    self._vecs[str(k)] = v
        self._embedder: Any = None

    def __len__(self) -> int:
        return len(self._vecs)

    @property
    def embedder(self):
        if self._embedder is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from episodic.embedding.embedder import load_model
            from episodic.kernel.settings import Settings

            name = "all-MiniLM-L6-v2" if self.model == "minilm" else self.model
            self._embedder = load_model(name, Settings())
        return self._embedder

    def chunker(self, chunk_tokens: int = 256, overlap: int = 32):
        """The pipeline's token-window cutter for the given window (``EPISODIC_CHUNK_MODE=window``; the
        sentence modes cut their long pieces with it, ``eval.sentences``)."""
        from episodic.embedding.embedder import SentenceTransformerEmbedder

        emb = self.embedder
        c = SentenceTransformerEmbedder(emb.model, emb.model_id, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
        return c.windows

    def missing(self, texts: list[str], kind: str = "doc") -> list[str]:
        seen: set[str] = set()
        out = []
        for t in texts:
            k = key(t, kind)
            if k not in self._vecs and k not in seen:
                seen.add(k)
                out.append(t)
        return out

    def fill(self, texts: list[str], kind: str = "doc", block: int = 2048) -> None:
        """Embed the texts not yet cached, saving a shard every `block` texts."""
        todo = self.missing(texts, kind)
        if not todo:
            return
        emb = self.embedder
        t0 = time.monotonic()
        done = 0
        for i in range(0, len(todo), block):
            part = todo[i : i + block]
            vecs = emb._encode(part)  # unit norm, same call the pipeline makes
            keys = [key(t, kind) for t in part]
            for k, v in zip(keys, vecs, strict=True):
                self._vecs[k] = v
            name = self.dir / f"shard-{time.time_ns()}.npz"
            np.savez(name, keys=np.array(keys), vecs=vecs.astype(np.float32))
            done += len(part)
            rate = done / max(1e-6, time.monotonic() - t0)
            log.info("%s: %d/%d embedded (%.1f/s, eta %.0fs)", kind, done, len(todo), rate, (len(todo) - done) / rate)

    def get(self, text: str, kind: str = "doc") -> np.ndarray:
        return self._vecs[key(text, kind)]

    def matrix(self, texts: list[str], kind: str = "doc") -> np.ndarray:
        return np.stack([self._vecs[key(t, kind)] for t in texts])


def main() -> None:
    from eval.context import ContextSpec, parse_ctx
    from eval.data import load, set_names
    from eval.memories import Memories
    from eval.sentences import pieces as split_pieces

    ap = argparse.ArgumentParser(description="fill the embedding cache for the eval sets")
    ap.add_argument("--set", default="both", help="oracle, s, locomo, both (oracle and s), all, or a list")
    ap.add_argument("--model", default="minilm", help="'minilm' (bundled) or a sentence-transformers directory")
    ap.add_argument("--ctx", action="append", default=None, help="context spec(s), e.g. prev=1,words=64,date=1")
    ap.add_argument("--s-limit", type=int, default=None, help="first N s haystacks (stratified by type)")
    ap.add_argument("--oracle-limit", type=int, default=None, help="pool only the first N oracle questions")
    ap.add_argument("--oracle-type", default=None, help="pool only the oracle questions of this type")
    ap.add_argument(
        "--split", default=None, help="sentence piece modes instead of windows, e.g. p32,s1 (eval.sentences)"
    )
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(a.threads)
    cache = EmbeddingCache(a.model)
    specs = [parse_ctx(c) for c in a.ctx] if a.ctx else [ContextSpec()]
    window = cache.chunker()
    splits = a.split.split(",") if a.split else [""]
    for name in set_names(a.set):
        if name == "oracle":
            corpora = load(name, limit=a.oracle_limit, only=a.oracle_type)
        else:
            corpora = load(name, limit=a.s_limit)
        cache.fill([q.question for c in corpora for q in c.questions], kind="query")
        for spec, split in ((sp, sl) for sp in specs for sl in splits):
            # s, locomo: one corpus at a time (s: types interleaved), so a partial fill is a fair sample
            for group in [[c] for c in corpora] if name != "oracle" else [corpora]:
                texts = [t for c in group for t in Memories.build(c).texts(spec)]
                pieces = [
                    p for t in dict.fromkeys(texts) for p in (split_pieces(t, split, window) if split else window(t))
                ]
                log.info("%s %s ctx=%s split=%s: %d chunks", name, group[0].name, spec.label(), split, len(pieces))
                cache.fill(sorted(dict.fromkeys(pieces), key=len))  # similar lengths together: less padding


if __name__ == "__main__":
    main()
