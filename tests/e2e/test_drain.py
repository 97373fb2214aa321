"""Drain order of `episodic up` on its own embedded broker: the gate drains first (delivers and commits its
batches in flight) while the consumer still runs, then the consumer finishes its batch and commits while
the broker is still up, then the broker stops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from consumers.embedding import EmbeddingConsumer
from infra.broker import KafkaBroker, free_port
from stack.roles import EmbedderRole
from stack.runtime import Stack
from streams.runner import GateRunner
from tests.e2e.conftest import poll, produce_lines, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_the_gate_drains_then_the_consumer_then_the_broker_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = stack_settings(
        "", tmp_path, kafka_bootstrap=None, broker_port=free_port(), embed_model="none", batch_size=8
    )
    stack = Stack(settings)
    order: list[tuple[str, dict[str, Any]]] = []

    def consumer_running() -> bool:
        role = stack.role(EmbedderRole)
        return role is not None and role._task is not None and not role._task.done()

    def broker_alive() -> bool:
        return stack.broker is not None and stack.broker.alive()

    real_gate_stop, real_run, real_broker_stop = GateRunner.stop, EmbeddingConsumer.run, KafkaBroker.stop

    async def gate_stop(self: GateRunner, *args: Any, **kwargs: Any) -> bool:
        drained = await real_gate_stop(self, *args, **kwargs)
        order.append(("gate", {"drained": drained, "consumer_running": consumer_running()}))
        return drained

    async def consumer_run(self: EmbeddingConsumer) -> None:
        await real_run(self)
        order.append(("consumer", {"broker_alive": broker_alive(), "batches": self.stats.batches}))

    def broker_stop(self: KafkaBroker, *args: Any, **kwargs: Any) -> None:
        order.append(("broker", {"alive": self.alive()}))
        real_broker_stop(self, *args, **kwargs)

    monkeypatch.setattr(GateRunner, "stop", gate_stop)
    monkeypatch.setattr(EmbeddingConsumer, "run", consumer_run)
    monkeypatch.setattr(KafkaBroker, "stop", broker_stop)

    lines = [
        json.dumps(
            {
                "id": f"d{i}", "workspace_id": "drain-ws", "agent_id": "a", "ts": "2026-04-01T00:00:00Z",
                "entry_type": "summary.generated", "severity": "info", "summary": f"drained entry {i}",
                "payload": {},
            }
        ).encode()
        for i in range(300)
    ]  # fmt: skip
    try:
        await stack.start()
        assert stack.broker is not None
        role = stack.role(EmbedderRole)
        assert role is not None and role.consumer is not None
        await role.consumer.wait_ready()
        await produce_lines(stack.broker.bootstrap, lines)
        assert stack.store is not None
        store = stack.store
        await poll(lambda: store.count("drain-ws") > 0, timeout=60, what="ingestion under way")
    finally:
        await stack.stop()
    assert [name for name, _ in order] == ["gate", "consumer", "broker"], order
    gate, consumer, broker = (facts for _, facts in order)
    assert gate == {"drained": True, "consumer_running": True}  # the consumer outlives the gate's drain
    assert consumer["broker_alive"] is True and consumer["batches"] > 0  # its last commit reached the broker
    assert broker == {"alive": True}  # stopped by the stack, last, not dead before
    assert stack.exit_code == 0
