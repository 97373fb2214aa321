"""The embedder with the real model: query fast path, chunking, thread settings, sparse-only fallback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodic.embedder import load_embedder, model_threads
from episodic.settings import Settings

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("text", ["what did we decide about the ledger?", "x", "word " * 600])
def test_query_fast_path_gives_the_encode_vector(embedder: Any, text: str) -> None:
    fast = embedder.embed_query(text)
    ref = embedder._encode([text])[0]
    assert fast.shape == (384,) and float(fast @ ref) > 0.99999 and abs(float(np.linalg.norm(fast)) - 1) < 1e-5


def test_long_text_chunks_cover_the_whole_text(embedder: Any) -> None:
    text = " ".join(f"sentence number {i} about topic {i % 7}." for i in range(400))
    chunks = embedder.chunk(text)
    assert len(chunks) > 3
    assert chunks[0].startswith("sentence number 0") and chunks[-1].endswith(
        f"sentence number 399 about topic {399 % 7}."
    )
    vecs = embedder.embed_documents([text, "short"])
    assert vecs[0].shape == (len(chunks), 384) and vecs[1].shape == (1, 384)


def test_model_threads_leave_a_core_to_the_other_stages() -> None:
    s = Settings()
    import os

    cores = os.cpu_count() or 1
    assert model_threads(s, shared_process=False) == cores
    assert model_threads(s, shared_process=True) == max(1, cores - 1)
    assert model_threads(Settings(embed_threads=3), shared_process=True) == 3


def test_missing_model_means_sparse_only_not_a_crash(tmp_path: Any) -> None:
    assert load_embedder(Settings(embed_model="none")) is None
    assert load_embedder(Settings(embed_model=str(tmp_path / "no-such-model"))) is None
