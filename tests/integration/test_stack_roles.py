"""A Stack role on its own, over the real store (Qdrant Edge): the recall service's start, answer, drain."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from episodic.kernel.errors import BrokerUnavailable, EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore
from episodic.kernel.settings import Settings
from episodic.lifecycle.forget import STATUS
from episodic.store.sparse import Bm25Encoder
from stack.roles import HttpRole, Resources
from stack.stores import open_state, open_store

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(Settings(data_dir=tmp_path), dim=384)
    try:
        yield s
    finally:
        s.close()


async def no_kafka() -> Any:
    raise BrokerUnavailable("no Kafka in this test")  # events would wait in the publisher's buffer


def resources(settings: Settings, store: MemoryStore, failed: list[int]) -> Resources:
    return Resources(
        settings=settings,
        metrics=Metrics(CollectorRegistry()),
        producer=None,
        kafka_connect=no_kafka,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": settings.bootstrap},
        fail=failed.append,
        store=store,
        bm25=Bm25Encoder(),
    )


async def test_the_recall_service_role_starts_answers_and_drains(tmp_path: Path, store: MemoryStore) -> None:
    settings = Settings(data_dir=tmp_path, http_port=0, embed_model="none")
    failed: list[int] = []
    role = HttpRole()
    try:
        await role.start(resources(settings, store, failed))
        assert role.http_port and role.describe() == (
            f"recall service: http://127.0.0.1:{role.http_port}  (OpenAPI: /docs, metrics: /metrics)"
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{role.http_port}", timeout=5) as http:
            health = (await http.get("/healthz")).json()
            # no tokens file on loopback: a request addressed to another name (DNS rebinding) is refused
            rebound = await http.get("/v1/memory/stats", headers={"host": f"rebind.example:{role.http_port}"})
        assert health["kafka"] == "ok" and health["episodic"] == "sparse-only"
        assert rebound.status_code == 421 and "loopback" in rebound.json()["error"]
    finally:
        await role.drain()
    assert role.server.should_exit and failed == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{role.http_port}/healthz", timeout=2)


async def test_a_busy_port_fails_the_start_and_not_the_process(tmp_path: Path, store: MemoryStore) -> None:
    """uvicorn calls sys.exit when it cannot bind: that must become a start error (`cannot start`, status 2)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        role = HttpRole()
        try:
            with pytest.raises(EpisodicError, match=f"did not start on 127.0.0.1:{port}"):
                await role.start(resources(Settings(data_dir=tmp_path, http_port=port), store, []))
        finally:
            await role.drain()


async def test_the_recall_service_answers_while_the_stacks_loop_is_blocked(tmp_path: Path, store: MemoryStore) -> None:
    """The service runs on a loop of its own: a stack loop held by an agent's callback (here: blocked outright,
    until the answer is in) does not hold a request. On the stack's loop this request could never be answered
    and the wait would run out."""
    settings = Settings(data_dir=tmp_path, http_port=0, embed_model="none")
    role = HttpRole()
    answered = threading.Event()
    got: list[int] = []

    def ask() -> None:
        got.append(httpx.get(f"http://127.0.0.1:{role.http_port}/v1/memory/stats", timeout=10).status_code)
        answered.set()

    try:
        await role.start(resources(settings, store, []))
        threading.Thread(target=ask, daemon=True).start()
        assert answered.wait(10), "the request waited for the stack's loop"  # blocks this loop, on purpose
        assert got == [200] and role.crash() is None
    finally:
        await role.drain()
    assert role.crash() is None  # drained, not crashed


class LateFailingProducer:
    """A broker that takes a second to refuse a forget (the service has long answered "unknown" by then)."""

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(1.0)
        raise KafkaError("the broker never acknowledged it")


async def test_a_forget_answered_unknown_still_settles_when_the_service_drains(
    tmp_path: Path, store: MemoryStore
) -> None:
    """A forget whose acknowledgement outlives its request settles its status when the send ends, on the
    service's loop: draining the service waits for that send, so the status becomes `failed` rather than
    staying `pending` for good."""
    settings = Settings(data_dir=tmp_path, http_port=0, embed_model="none")
    state = open_state(store)
    res = dataclasses.replace(resources(settings, store, []), producer=LateFailingProducer(), state=state)
    role = HttpRole()
    try:
        await role.start(res)
        app = role.server.config.app
        app.state.services = dataclasses.replace(app.state.services, forget_queue_timeout_s=0.2)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{role.http_port}", timeout=10) as http:
            r = await http.post("/v1/memory/forget", json={"workspace_id": "w", "entry_ids": ["e1"]})
        assert r.status_code == 202 and "unknown" in r.json()["note"], r.text
        assert state.get(STATUS, r.json()["forget_id"])["status"] == "pending"
    finally:
        await role.drain()
    assert state.get(STATUS, r.json()["forget_id"])["status"] == "failed"
