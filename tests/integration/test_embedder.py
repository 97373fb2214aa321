"""The embedder with the real model: query fast path, chunking, thread settings, sparse-only fallback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodic.embedding.embedder import load_embedder, model_threads
from episodic.kernel.settings import Settings

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


PASSING_FACT = (
    "I was thinking of getting a tree stand for deer hunting this season. I have been reading reviews of "
    "ladder stands and hang-on stands for weeks, comparing weight limits, seat comfort, safety harnesses and "
    "how loud they are to climb in the dark. Can you tell me what to consider when buying one, and do you have "
    "any recommendations for a good beginner stand that is easy to carry through thick woods? Oh, and by the "
    "way, I caught 7 largemouth bass on my trip to Lake Michigan with Alex on 7/10 - that was a great day!"
)


def _best_cosine(embedder: Any, text: str, query: str) -> float:
    rows = embedder.embed_documents([text])[0]
    return float(np.max(rows @ embedder.embed_query(query)))


def test_sentence_pieces_match_a_fact_said_in_passing(embedder: Any) -> None:
    """The default chunk mode gives the passing sentence its own vector, so a question about it matches far
    better than the window over the whole text (which is about tree stands); the window mode is unchanged."""
    query = "How many largemouth bass did I catch with Alex at Lake Michigan?"
    assert embedder.chunk_mode == "sentences" and embedder.chunk_words == 32
    pieces = embedder.chunk(PASSING_FACT)
    assert len(pieces) > 1 and pieces[-1].startswith("Oh, and by the way, I caught 7 largemouth bass")
    sentences_cos = _best_cosine(embedder, PASSING_FACT, query)
    embedder.chunk_mode = "window"
    try:
        assert embedder.chunk(PASSING_FACT) == [PASSING_FACT]  # shorter than one window
        window_cos = _best_cosine(embedder, PASSING_FACT, query)
    finally:
        embedder.chunk_mode = "sentences"
    assert sentences_cos > window_cos + 0.15, (sentences_cos, window_cos)
