"""The importance agent: memory.referenced -> reference counts, once per event (SPEC §5, §8). A thin pipe
around `episodic.maintenance.importance.ReferenceCounter`; the nightly decay runs beside it (see stack.roles).

Consumer group `<consumer_group_prefix>-importance`. Events are keyed by workspace, so one workspace's
events are applied in order by one process.
"""

from __future__ import annotations

from typing import Any

from episodic.kernel.metrics import AGENT_OUTCOMES, Metrics
from episodic.kernel.settings import Settings
from episodic.maintenance.importance import ReferenceCounter, event_key
from schemas import topics as T
from schemas.events import ReferencedEvent
from streams.agents import AgentRunner, Decoded, batch_runner

NAME = "importance"


def decode(raw: bytes | None) -> ReferencedEvent:
    return ReferencedEvent.from_json(raw or b"")


def handler(counter: ReferenceCounter, metrics: Metrics) -> Any:
    def handle(items: list[Decoded[ReferencedEvent]]) -> None:
        result = counter.apply([(event_key(ev, rec.value or b""), ev) for rec, ev in items])
        for outcome in AGENT_OUTCOMES[NAME]:
            metrics.agent_events.labels(agent=NAME, outcome=outcome).inc(getattr(result, outcome))
        metrics.references.labels(outcome="counted").inc(result.hits)
        metrics.references.labels(outcome="missing").inc(result.missing)

    return handle


def importance_runner(
    settings: Settings,
    *,
    counter: ReferenceCounter,
    metrics: Metrics,
    topic: str = T.MEMORY_REFERENCED,
    app_id: str | None = None,
) -> AgentRunner:
    return batch_runner(
        settings,
        name=NAME,
        topic=topic,
        decode=decode,
        handle=handler(counter, metrics),
        metrics=metrics,
        app_id=app_id,
    )
