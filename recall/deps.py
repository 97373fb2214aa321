"""Request-scoped dependencies: the wired services and the caller's principal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from episodic.auth import OPEN, AuthError, Principal, TokenTable
from episodic.health_job import HealthJob
from episodic.metrics import Metrics
from episodic.ports import MemoryStore
from episodic.recall import RecallEngine
from episodic.settings import Settings

Publish = Callable[[str, str | None, dict[str, Any]], None]
Status = Callable[[], Mapping[str, Any]]
NudgeLookup = Callable[[str, str | None, str], str | None]

# Declares the bearer scheme in the OpenAPI document; the header itself is read raw below so that a
# malformed header is told apart from a missing one.
bearer_scheme = HTTPBearer(auto_error=False, description="Authorization: Bearer <token> (see episodic.auth)")


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
    health: HealthJob | None = None  # the stored health snapshots (None: no state store in this process)


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


__all__ = ["AuthError", "NudgeLookup", "Publish", "Services", "Status", "current_principal", "get_services"]
