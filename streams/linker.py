"""The linker agent: memory.indexed -> similar edges (SPEC §5, §8). A thin pipe around `episodic.maintenance.linker`.

It decodes `memory.indexed` records, hands each batch to `Linker.link` (which acts on `vector` events only:
a memory's dense vector exists only then) and counts what happened. Consumer group
`<consumer_group_prefix>-linker`.
"""

from __future__ import annotations

from typing import Any

from episodic.kernel.metrics import AGENT_OUTCOMES, Metrics
from episodic.kernel.settings import Settings
from episodic.maintenance.linker import Linker
from schemas import topics as T
from schemas.events import IndexedEvent
from streams.agents import AgentRunner, Decoded, batch_runner

NAME = "linker"


def decode(raw: bytes | None) -> IndexedEvent:
    return IndexedEvent.from_json(raw or b"")


def handler(linker: Linker, metrics: Metrics) -> Any:
    def handle(items: list[Decoded[IndexedEvent]]) -> None:
        result = linker.link_all([ev for _, ev in items])
        for outcome in AGENT_OUTCOMES[NAME]:
            metrics.agent_events.labels(agent=NAME, outcome=outcome).inc(getattr(result, outcome))
        metrics.similar_edges.inc(result.edges)

    return handle


def linker_runner(
    settings: Settings, *, linker: Linker, metrics: Metrics, topic: str = T.MEMORY_INDEXED, app_id: str | None = None
) -> AgentRunner:
    return batch_runner(
        settings, name=NAME, topic=topic, decode=decode, handle=handler(linker, metrics), metrics=metrics, app_id=app_id
    )
