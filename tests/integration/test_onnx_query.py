"""The ONNX Runtime query encoder against the real model: same vector as torch, cached export, fallbacks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodic.embedder import attach_query_encoder, load_embedder
from episodic.onnx_query import OnnxQueryEncoder
from episodic.settings import Settings

pytestmark = pytest.mark.integration

TEXTS = [
    "what did we decide about the ledger?",
    "x",
    "Ünïcödé – emoji 🚀 and 中文 text",
    "word " * 600,  # past the model's 256 word pieces: truncated exactly like the torch path
    "   ",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(embedder: Any, cache_dir: Path) -> Any:
    e = copy.copy(embedder)  # the session fixture stays on torch for the other tests
    e.query_threads = 2
    assert attach_query_encoder(e, Settings(model_cache_dir=cache_dir))
    return e


@pytest.mark.parametrize("text", TEXTS)
def test_onnx_query_vector_is_the_torch_vector(onnx_embedder: Any, text: str) -> None:
    fast = onnx_embedder.embed_query(text)
    ref = onnx_embedder.embed_query_torch(text)
    assert fast.dtype == np.float32 and fast.shape == (384,)
    assert abs(float(np.linalg.norm(fast)) - 1.0) < 1e-5
    assert float(fast @ ref) > 0.9999


def test_export_is_cached_and_reused(onnx_embedder: Any, cache_dir: Path, embedder: Any) -> None:
    files = sorted(cache_dir.glob("*.onnx"))
    assert len(files) == 1, files  # no temporary file left behind
    mtime = files[0].stat().st_mtime_ns
    again = OnnxQueryEncoder.build(
        embedder.model, embedder.model_path, threads=1, reference=embedder.embed_query_torch, cache_dir=cache_dir
    )
    assert again is not None
    assert sorted(cache_dir.glob("*.onnx")) == files and files[0].stat().st_mtime_ns == mtime


def test_a_failing_session_falls_back_to_torch_for_good(onnx_embedder: Any) -> None:
    e = copy.copy(onnx_embedder)

    class Broken:
        calls = 0

        def encode(self, text: str) -> np.ndarray:
            Broken.calls += 1
            raise RuntimeError("session lost")

    e.query_encoder = Broken()
    v = e.embed_query("still answers")
    assert float(v @ e.embed_query_torch("still answers")) > 0.99999
    assert e.query_encoder is None
    e.embed_query("again")
    assert Broken.calls == 1


def test_parity_failure_keeps_torch(embedder: Any, cache_dir: Path) -> None:
    def wrong(text: str) -> np.ndarray:  # a reference the ONNX vector cannot match
        v = np.zeros(384, dtype=np.float32)
        v[0] = 1.0
        return v

    assert (
        OnnxQueryEncoder.build(embedder.model, embedder.model_path, threads=1, reference=wrong, cache_dir=cache_dir)
        is None
    )


def test_unsupported_pipelines_keep_torch(embedder: Any, cache_dir: Path) -> None:
    class NotSentenceTransformer:
        def __init__(self) -> None:
            self._modules: dict[str, Any] = {}

    assert (
        OnnxQueryEncoder.build(
            NotSentenceTransformer(), "x", threads=1, reference=embedder.embed_query_torch, cache_dir=cache_dir
        )
        is None
    )


def test_an_unwritable_cache_keeps_torch(embedder: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    built = OnnxQueryEncoder.build(
        embedder.model, embedder.model_path, threads=1, reference=embedder.embed_query_torch, cache_dir=blocker / "x"
    )
    assert built is None


def test_settings_choose_the_backend(cache_dir: Path) -> None:
    torch_only = load_embedder(Settings(query_backend="torch", model_cache_dir=cache_dir))
    assert torch_only is not None and torch_only.query_encoder is None
    ingest_only = load_embedder(Settings(model_cache_dir=cache_dir), queries=False)
    assert ingest_only is not None and ingest_only.query_encoder is None
    serving = load_embedder(Settings(model_cache_dir=cache_dir))
    assert serving is not None and serving.query_encoder is not None
