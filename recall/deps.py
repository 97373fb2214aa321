"""Request-scoped dependencies: the wired services and the caller's principal."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from episodic.kernel.auth import OPEN, AuthError, Principal, TokenTable
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.health_job import HealthJob
from episodic.retrieval.engine import RecallEngine
from schemas.events import ForgetRecord

Publish = Callable[[str, str | None, dict[str, Any]], None]
Status = Callable[[], Mapping[str, Any]]
NudgeLookup = Callable[[str, str | None, str], str | None]
# ForgetSink(record): produce a forget to journal.embeddable, keyed by its workspace; completes once the
# broker acknowledged it (acks=all), raises when it could not be queued
ForgetSink = Callable[[ForgetRecord], Awaitable[None]]
Job = Callable[[], Mapping[str, Any]]  # a blocking maintenance job: runs, returns what it did
# Produce = (topic, [(key, value), ...]) -> awaitable that completes once the broker acknowledged all of them
Produce = Callable[[str, Sequence[tuple[bytes | None, bytes]]], Awaitable[None]]

# Declares the bearer scheme in the OpenAPI document; the header itself is read raw below so that a
# malformed header is told apart from a missing one.
bearer_scheme = HTTPBearer(auto_error=False, description="Authorization: Bearer <token> (see episodic.kernel.auth)")


@dataclass
class Services:
    settings: Settings
    store: MemoryStore
    engine: RecallEngine
    publish: Publish
    status: Status
    metrics: Metrics
    tokens: TokenTable | None
    nudges: NudgeLookup | None = None
    state: StateStore | None = None  # forget status, tombstones (the memory lifecycle)
    forget_sink: ForgetSink | None = None  # forgets answer 503 without it
    forget_queue_timeout_s: float = 20.0  # the broker's acknowledgement of a forget, before "unknown" (202)
    jobs: Mapping[str, Job] = field(default_factory=dict)  # name -> job, for /v1/admin/run/{name}
    produce: Produce | None = None  # POST /v1/journal answers 503 without it
    health: HealthJob | None = None  # the stored health snapshots (None: no state store in this process)
    dlq_index: Any = None  # the explorer's dead letters (episodic.lifecycle.dlq_index.DlqIndex), made on first use
    recall_slots: asyncio.Semaphore | None = None  # EPISODIC_RECALL_CONCURRENCY (None: no limit)


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def current_principal(
    request: Request,
    _scheme: Any = Depends(bearer_scheme),
    services: Services = Depends(get_services),
) -> Principal:
    """The caller, or AuthError (401). Open service (no tokens file): everyone is OPEN."""
    if services.tokens is None:
        return OPEN
    return services.tokens.authenticate(request.headers.get("authorization"))


__all__ = [
    "AuthError",
    "ForgetSink",
    "Job",
    "NudgeLookup",
    "Produce",
    "Publish",
    "Services",
    "Status",
    "current_principal",
    "get_services",
]
