"""The ONNX Runtime encoder against the real model: the torch vectors for queries and for padded ingestion
batches (chunked multivectors included), the cached export, the threads the core budget gives, fallbacks."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodic.embedding.cores import CoreBudget
from episodic.embedding.embedder import attach_onnx, attach_query_encoder, load_embedder
from episodic.embedding.onnx_encoder import OnnxEncoder
from episodic.embedding.passes import passes
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings

pytestmark = pytest.mark.integration

TEXTS = [
    "what did we decide about the ledger?",
    "x",
    "Ünïcödé – emoji 🚀 and 中文 text",
    "word " * 600,  # past the model's 256 word pieces: truncated exactly like the torch path
    "   ",
]
# Ingestion texts: one-liners, paragraphs and long reports that the embedder chunks (multivectors).
DOCUMENTS = [
    "Deployed v2.3.1 to staging; smoke tests green.",
    "x",
    "The nightly eval regressed 4 points on the retrieval set after the tokenizer upgrade; "
    "rolled back and opened a ticket with the numbers attached. " * 3,
    "Ünïcödé – emoji 🚀 and 中文 text in a summary",
    " ".join(f"step {i}: checked shard {i % 7} of the ledger and found {i * 3} stale rows." for i in range(120)),
    "Connection pool exhausted on the payments gateway; retries doubled the load and the breaker opened.",
    "   ",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(embedder: Any, cache_dir: Path) -> Any:
    e = copy.copy(embedder)  # the session fixture stays on torch for the other tests
    e.query_threads = 2
    e.cores = CoreBudget(cores=2)
    e.fallbacks = []
    attach_onnx(e, Settings(model_cache_dir=cache_dir), queries=True, documents=True)
    assert e.backends == {"documents": "onnx", "queries": "onnx"}
    return e


@pytest.mark.parametrize("text", TEXTS)
def test_onnx_query_vector_is_the_torch_vector(onnx_embedder: Any, text: str) -> None:
    fast = onnx_embedder.embed_query(text)
    ref = onnx_embedder.embed_query_torch(text)
    assert fast.dtype == np.float32 and fast.shape == (384,)
    assert abs(float(np.linalg.norm(fast)) - 1.0) < 1e-5
    assert float(fast @ ref) > 0.9999


def test_onnx_batches_are_the_torch_multivectors(onnx_embedder: Any, embedder: Any) -> None:
    fast = onnx_embedder.embed_documents(DOCUMENTS)
    ref = embedder.embed_documents(DOCUMENTS)  # the torch path (the session fixture has no ONNX encoder)
    assert len(fast) == len(ref) == len(DOCUMENTS)
    assert max(len(v) for v in fast) > 1  # the long report is chunked: a multivector
    for f, r in zip(fast, ref, strict=True):
        assert f.shape == r.shape and f.dtype == np.float32
        assert np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-5)
        assert float(np.min(np.sum(f * r, axis=1))) >= 0.999


def test_batch_vectors_do_not_depend_on_padding_or_order(onnx_embedder: Any) -> None:
    enc = onnx_embedder.document_encoder
    texts = [c for d in DOCUMENTS for c in onnx_embedder.chunk(d)]
    one_pass = enc.encode_batch(texts, threads=lambda: 1, token_budget=lambda: 1 << 20, max_batch=len(texts))
    many = enc.encode_batch(texts[::-1], threads=lambda: 2, token_budget=lambda: 300, max_batch=2)[::-1]
    assert float(np.min(np.sum(one_pass * many, axis=1))) > 0.9999


def test_forward_passes_take_the_threads_the_budget_gives(onnx_embedder: Any) -> None:
    e = copy.copy(onnx_embedder)
    e.cores = CoreBudget(cores=2)
    m = Metrics()
    e.bind_metrics(m)
    e.embed_documents(DOCUMENTS)
    assert m.embed_threads._value.get() == 2 and m.embed_yielded._value.get() == 0
    with e.cores.foreground():  # a recall in flight: one core goes back
        e.embed_documents(DOCUMENTS)
    assert m.embed_threads._value.get() == 1 and m.embed_yielded._value.get() >= 1
    yielded = m.embed_yielded._value.get()
    e.cores.gate_behind(5.0)  # the gate routed a batch 5 s late
    e.embed_documents(DOCUMENTS[:2])
    assert m.embed_yielded._value.get() > yielded
    # Every session the streams use was made when the encoder was attached, none on the ingestion path.
    assert set(e.document_encoder._sessions) == {(2, 0), (1, 0), (1, 1)}


class Spy:
    """The encoder's passes: (threads, stream, OS thread, start, end) of each."""

    def __init__(self, enc: OnnxEncoder) -> None:
        self.enc = copy.copy(enc)
        self.calls: list[tuple[int, int, int, float, float]] = []
        forward, session = self.enc._forward, self.enc.session

        def spied_session(threads: int, stream: int = 0) -> Any:
            return (threads, stream, session(threads, stream))

        def spied_forward(s: Any, *a: Any) -> Any:
            t0 = time.perf_counter()
            out = forward(s[2], *a)
            self.calls.append((s[0], s[1], threading.get_ident(), t0, time.perf_counter()))
            return out

        self.enc.session = spied_session  # type: ignore[method-assign]
        self.enc._forward = spied_forward  # type: ignore[method-assign]


def test_passes_run_as_concurrent_streams_while_the_cores_are_free(onnx_embedder: Any) -> None:
    texts = [c for d in DOCUMENTS for c in onnx_embedder.chunk(d)] * 4
    ref = onnx_embedder.document_encoder.encode_batch(texts, threads=lambda: 1, token_budget=lambda: 600, max_batch=4)
    spy = Spy(onnx_embedder.document_encoder)
    budget = CoreBudget(cores=2)
    two = spy.enc.encode_batch(texts, threads=budget.threads, token_budget=lambda: 600, max_batch=4, max_streams=2)
    assert float(np.min(np.sum(two * ref, axis=1))) > 0.9999  # the same vectors, in the same rows
    assert {(t, s) for t, s, *_ in spy.calls} == {(1, 0), (1, 1)}  # two single-thread streams...
    assert len({ident for _, _, ident, *_ in spy.calls}) == 2  # ...on two threads...
    spans = sorted((a, b) for *_, a, b in spy.calls)
    assert any(a2 < b1 for (_, b1), (a2, _) in itertools.pairwise(spans))  # ...at the same time

    spy.calls.clear()  # a recall claims a core: one stream, one thread
    with budget.foreground():
        one = spy.enc.encode_batch(texts, threads=budget.threads, token_budget=lambda: 600, max_batch=4, max_streams=2)
    assert {(t, s) for t, s, *_ in spy.calls} == {(1, 0)}
    assert float(np.min(np.sum(one * ref, axis=1))) > 0.9999

    spy.calls.clear()  # a batch of one pass (steady ingestion): every core on it
    spy.enc.encode_batch(texts[:3], threads=budget.threads, token_budget=lambda: 1 << 20, max_batch=8, max_streams=2)
    assert [(t, s) for t, s, *_ in spy.calls] == [(2, 0)]


def test_a_failing_stream_fails_the_batch_without_hanging(onnx_embedder: Any) -> None:
    spy = Spy(onnx_embedder.document_encoder)
    forward = spy.enc._forward

    def fails_on_stream_1(s: Any, *a: Any) -> Any:
        if s[1] == 1:
            raise RuntimeError("session lost")
        time.sleep(0.05)  # stream 0's passes are slow: stream 1 fails while it is still at the start
        return forward(s, *a)

    spy.enc._forward = fails_on_stream_1  # type: ignore[method-assign]
    texts = [c for d in DOCUMENTS for c in onnx_embedder.chunk(d)] * 4
    with pytest.raises(RuntimeError, match="session lost"):
        spy.enc.encode_batch(texts, threads=lambda: 2, token_budget=lambda: 600, max_batch=4, max_streams=2)
    todo = passes([len(x) for x in spy.enc._tokenizer(texts)["input_ids"]], 600, 4)
    assert len(todo) > 12 and len(spy.calls) <= 4  # the other stream stopped taking passes


def test_export_is_cached_and_reused(onnx_embedder: Any, cache_dir: Path, embedder: Any) -> None:
    files = sorted(cache_dir.glob("*.onnx"))
    assert len(files) == 1, files  # no temporary file left behind; one export for queries and batches
    mtime = files[0].stat().st_mtime_ns
    again = OnnxEncoder.build(embedder.model, embedder.model_path, query_threads=1, cache_dir=cache_dir)
    assert again is not None
    assert sorted(cache_dir.glob("*.onnx")) == files and files[0].stat().st_mtime_ns == mtime


class Broken:
    calls = 0

    def encode(self, text: str) -> np.ndarray:
        Broken.calls += 1
        raise RuntimeError("session lost")

    def encode_batch(self, texts: list[str], **kw: Any) -> np.ndarray:
        Broken.calls += 1
        raise RuntimeError("session lost")


def test_a_failing_session_falls_back_to_torch_for_good(onnx_embedder: Any, embedder: Any) -> None:
    e = copy.copy(onnx_embedder)
    e.fallbacks = []
    m = Metrics()
    e.bind_metrics(m)
    Broken.calls = 0
    e.query_encoder = Broken()
    e.document_encoder = Broken()
    v = e.embed_query("still answers")
    assert float(v @ e.embed_query_torch("still answers")) > 0.99999
    docs = e.embed_documents(DOCUMENTS[:3])
    for f, r in zip(docs, embedder.embed_documents(DOCUMENTS[:3]), strict=True):
        assert float(np.min(np.sum(f * r, axis=1))) > 0.9999
    assert e.backends == {"documents": "torch", "queries": "torch"}
    e.embed_query("again")
    e.embed_documents(["again"])
    assert Broken.calls == 2
    for path in ("queries", "documents"):
        assert m.embed_fallbacks.labels(path=path, reason="error")._value.get() == 1
        assert m.embed_backend.labels(path=path, backend="torch")._value.get() == 1
        assert m.embed_backend.labels(path=path, backend="onnx")._value.get() == 0


def test_parity_failure_keeps_torch_with_a_warning_and_the_metric(
    embedder: Any, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    e = copy.copy(embedder)
    e.fallbacks = []
    e.query_encoder = e.document_encoder = None

    def wrong(texts: list[str]) -> np.ndarray:  # a torch reference the ONNX vectors cannot match
        v = np.zeros((len(texts), 384), dtype=np.float32)
        v[:, 0] = 1.0
        return v

    e._encode = wrong
    e.embed_query_torch = lambda text: wrong([text])[0]
    attach_onnx(e, Settings(model_cache_dir=cache_dir), queries=True, documents=True)
    assert e.backends == {"documents": "torch", "queries": "torch"}
    assert sorted(e.fallbacks) == [("documents", "parity"), ("queries", "parity")]
    assert "differ from torch" in caplog.text
    m = Metrics()
    e.bind_metrics(m)  # the fallbacks at start reach the metrics bound later (the stack binds after loading)
    assert m.embed_fallbacks.labels(path="documents", reason="parity")._value.get() == 1


def test_unsupported_pipelines_keep_torch(embedder: Any, cache_dir: Path) -> None:
    class NotSentenceTransformer:
        def __init__(self) -> None:
            self._modules: dict[str, Any] = {}

    assert OnnxEncoder.build(NotSentenceTransformer(), "x", query_threads=1, cache_dir=cache_dir) is None


def test_an_unwritable_cache_keeps_torch(embedder: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert OnnxEncoder.build(embedder.model, embedder.model_path, query_threads=1, cache_dir=blocker / "x") is None
    e = copy.copy(embedder)
    e.fallbacks = []
    e.query_encoder = e.document_encoder = None
    assert not attach_query_encoder(e, Settings(model_cache_dir=blocker / "x"))
    assert e.fallbacks == [("queries", "unavailable")]


def test_settings_choose_the_backends(cache_dir: Path) -> None:
    torch_only = load_embedder(Settings(query_backend="torch", embed_backend="torch", model_cache_dir=cache_dir))
    assert torch_only is not None and torch_only.backends == {"documents": "torch", "queries": "torch"}
    assert torch_only.fallbacks == []  # chosen, not fallen back
    ingest_only = load_embedder(Settings(model_cache_dir=cache_dir), queries=False)
    assert ingest_only is not None and ingest_only.backends == {"documents": "onnx", "queries": "torch"}
    budget = CoreBudget(cores=2)
    serving = load_embedder(Settings(model_cache_dir=cache_dir), cores=budget)
    assert serving is not None and serving.backends == {"documents": "onnx", "queries": "onnx"}
    assert serving.cores is budget
