"""A content-addressed cache of unit-norm embeddings (eval/results/emb/*.npz), keyed by text hash.

Documents are chunked exactly as the pipeline does it (``SentenceTransformerEmbedder.chunk``), and each
chunk's vector is cached under the hash of (kind, chunk text), so reruns and other chunkings that share
chunks cost nothing. ``python -m eval.embcache`` fills the cache for both sets in the background.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
EMB_DIR = RESULTS / "emb"

log = logging.getLogger("eval.embcache")


def key(text: str, kind: str = "doc") -> str:
    return hashlib.sha1(f"{kind}\x00{text}".encode()).hexdigest()


class EmbeddingCache:
    def __init__(self, directory: Path = EMB_DIR) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._vecs: dict[str, np.ndarray] = {}
        for f in sorted(self.dir.glob("shard-*.npz")):
            with np.load(f) as z:
                for k, v in zip(z["keys"], z["vecs"], strict=True):
                    self._vecs[str(k)] = v
        self._embedder = None

    def __len__(self) -> int:
        return len(self._vecs)

    @property
    def embedder(self):
        if self._embedder is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from episodic.embedder import load_model
            from episodic.settings import Settings

            self._embedder = load_model("all-MiniLM-L6-v2", Settings())
        return self._embedder

    def chunker(self, chunk_tokens: int = 256, overlap: int = 32):
        """A chunk function with the pipeline's exact logic for the given window."""
        from episodic.embedder import SentenceTransformerEmbedder

        emb = self.embedder
        c = SentenceTransformerEmbedder(emb.model, emb.model_id, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
        return c.chunk

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
        return np.stack([self._vecs[key(t, kind)] for t in texts]) if texts else np.zeros((0, 384), np.float32)


def main() -> None:
    from eval.data import load

    ap = argparse.ArgumentParser(description="fill the embedding cache for the eval sets")
    ap.add_argument("--set", default="both", choices=["oracle", "s", "both"])
    ap.add_argument("--chunk", type=int, nargs=2, action="append", metavar=("TOKENS", "OVERLAP"))
    ap.add_argument("--no-role", action="store_true", help="also embed the content without the role prefix")
    ap.add_argument("--s-limit", type=int, default=None, help="first N s haystacks (stratified by type)")
    ap.add_argument("--oracle-limit", type=int, default=None, help="pool only the first N oracle questions")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(a.threads)
    cache = EmbeddingCache()
    chunkings = [tuple(c) for c in (a.chunk or [(256, 32)])]
    sets = ["oracle", "s"] if a.set == "both" else [a.set]
    for name in sets:
        corpora = load(name, limit=a.s_limit if name == "s" else a.oracle_limit)
        cache.fill([q.question for c in corpora for q in c.questions], kind="query")
        for tokens, overlap in chunkings:
            chunk = cache.chunker(tokens, overlap)
            for role in [True, False] if a.no_role else [True]:
                # s: one haystack at a time, types interleaved, so a partial fill is a fair sample
                for group in [[c] for c in corpora] if name == "s" else [corpora]:
                    texts = [t.text(role) for c in group for t in c.turns]
                    pieces = [p for t in dict.fromkeys(texts) for p in chunk(t)]
                    log.info(
                        "%s %s chunk=%d/%d role=%s: %d chunks", name, group[0].name, tokens, overlap, role, len(pieces)
                    )
                    cache.fill(pieces)


if __name__ == "__main__":
    main()
