"""The importance agent: memory.referenced -> reference counts, and memory.reviewed -> the review state (issue
26), each event once (SPEC §5, §8). Thin pipes around `episodic.maintenance.importance.ReferenceCounter`
and `episodic.maintenance.reviews.ReviewApplier`; the nightly decay runs beside them (see stack.roles).

Consumer group `<consumer_group_prefix>-importance`: one Faust app with two batch agents (`importance` on
memory.referenced, `reviews` on memory.reviewed; their metrics carry those agent names). Events are keyed
by workspace, so one workspace's events of each topic are applied in order by one process. A record that
does not decode is counted (`episodic_agent_malformed_total`) and skipped, never a crash; a memory.reviewed
record that does not decode also goes to journal.dlq with reason `bad_review` (its bytes, the error, its
partition and offset; `review_dead_letters`), once the runner is given a producer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import faust

from episodic.kernel.metrics import AGENT_OUTCOMES, Metrics
from episodic.kernel.settings import Settings
from episodic.maintenance.importance import ReferenceCounter, event_key
from episodic.maintenance.reviews import ReviewApplier
from schemas import topics as T
from schemas.events import BAD_REVIEW, DlqRecord, ReferencedEvent, ReviewedEvent
from streams.agents import AgentRunner, DeadLetters, Decoded, install_batch_agent

NAME = "importance"
REVIEWS = "reviews"


def decode(raw: bytes | None) -> ReferencedEvent:
    return ReferencedEvent.from_json(raw or b"")


def decode_review(raw: bytes | None) -> ReviewedEvent:
    return ReviewedEvent.from_json(raw or b"")


def handler(counter: ReferenceCounter, metrics: Metrics) -> Any:
    def handle(items: list[Decoded[ReferencedEvent]]) -> None:
        result = counter.apply([(event_key(ev, rec.value or b""), ev) for rec, ev in items])
        for outcome in AGENT_OUTCOMES[NAME]:
            metrics.agent_events.labels(agent=NAME, outcome=outcome).inc(getattr(result, outcome))
        metrics.references.labels(outcome="counted").inc(result.hits)
        metrics.references.labels(outcome="missing").inc(result.missing)

    return handle


def review_handler(applier: ReviewApplier, metrics: Metrics) -> Any:
    def handle(items: list[Decoded[ReviewedEvent]]) -> None:
        result = applier.apply([(event_key(ev, rec.value or b""), ev) for rec, ev in items])
        for outcome in AGENT_OUTCOMES[REVIEWS]:
            metrics.agent_events.labels(agent=REVIEWS, outcome=outcome).inc(getattr(result, outcome))
        for rating, n in result.ratings.items():
            metrics.reviews.labels(rating=rating).inc(n)
        metrics.reviews_refused.labels(reason="memory_gone").inc(result.missing)

    return handle


def review_dead_letters(producer: Any, metrics: Metrics, *, topic: str = T.JOURNAL_DLQ) -> DeadLetters:
    """Send memory.reviewed records that do not decode to the dead-letter topic (acks awaited), keyed as they
    came, with reason `bad_review`."""

    async def send(bad: list[tuple[Any, Exception]]) -> None:
        futures = []
        for rec, error in bad:
            letter = DlqRecord.build(
                reason=BAD_REVIEW,
                error=str(error).splitlines()[0][:500] or BAD_REVIEW,
                raw=rec.value,
                topic=rec.topic,
                partition=rec.partition,
                offset=rec.offset,
            )
            futures.append(await producer.send(topic, key=rec.key, value=letter.to_json()))
        await asyncio.gather(*futures)
        metrics.dead_lettered.labels(reason=BAD_REVIEW).inc(len(bad))

    return send


def importance_runner(
    settings: Settings,
    *,
    counter: ReferenceCounter,
    metrics: Metrics,
    reviews: ReviewApplier | None = None,
    dead_letter: DeadLetters | None = None,
    topic: str = T.MEMORY_REFERENCED,
    reviewed_topic: str = T.MEMORY_REVIEWED,
    app_id: str | None = None,
) -> AgentRunner:
    """The importance agent's app: reference counts, and the review state when `reviews` is given."""
    topics: Sequence[str] = (topic, reviewed_topic) if reviews is not None else (topic,)

    def install(app: faust.App) -> None:
        install_batch_agent(
            app, topic=topic, name=NAME, decode=decode, handle=handler(counter, metrics), metrics=metrics
        )
        if reviews is not None:
            install_batch_agent(
                app,
                topic=reviewed_topic,
                name=REVIEWS,
                decode=decode_review,
                handle=review_handler(reviews, metrics),
                metrics=metrics,
                dead_letter=dead_letter,
            )

    return AgentRunner(settings, name=NAME, topics=topics, install=install, metrics=metrics, app_id=app_id, gather=True)
