"""`POST /v1/memory/review`: reviews from use (issue 26; seed 003 "Memory Review").

An agent says how the memories it was given served it: `again`, `hard`, `good` or `easy` for each
(`episodic_client.models.Review`). The request is checked (422 naming the field, e.g. `reviews.2.rating`;
at most `MAX_REVIEWS` reviews, and the body bound of every route: 413), authorized like a write to the
workspace (a bound token reviews as its own agent: 403 naming `agent_id` for another), its ids resolved to
their memories (an alias or a folded near duplicate counts for the memory that stands for it), and the
reviews of memories the caller may see are produced as one `memory.reviewed` event keyed by the workspace
(acks=all). The answer, 202, comes once the broker acknowledged it; the importance agent then applies it
once (`episodic.maintenance.reviews`). 503 when the broker did not: nothing is claimed, retry. A request
with a `review_id` (the clients set one per call) is one event whatever the number of tries: its event id is
derived from the workspace, the reviewing agent and that key, and the agent's ledger applies an event once.

An id of no memory, or of one the caller may not see (another agent's, for a bound token), is ignored and
listed in `ignored` with the same reason, so the answer cannot tell which ids exist (issue 29), as a forget
of such an id removes nothing. A request none of whose ids names a memory it may see is 404 naming
`reviews.0.entry_id`. Every refusal is counted in `episodic_reviews_refused_total{reason}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from episodic.kernel.auth import AuthError, Principal, authorize_review, may_see_stored
from episodic.lifecycle.inspect import resolve_memories
from episodic_client.models import (
    MAX_REVIEWS,
    ErrorResponse,
    ReviewAccepted,
    ReviewIgnored,
    ReviewRequest,
)
from recall.deps import Services, current_principal, get_services
from recall.views import View
from schemas.events import ReviewedEvent, ReviewItem
from schemas.topics import MEMORY_REVIEWED

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 30.0
PATH = "/v1/memory/review"

router = APIRouter(tags=["memory"])


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message})


def event_id(workspace_id: str, agent_id: str | None, review_id: str | None) -> str:
    """The event's ledger key: derived from the request's idempotency key (so a retried request is applied
    once, and two callers' keys never collide), else a fresh uuid."""
    if review_id is None:
        return uuid.uuid4().hex
    key = json.dumps([workspace_id, agent_id, review_id])
    return "r:" + hashlib.sha256(key.encode()).hexdigest()[:40]


def _selected(
    services: Services, principal: Principal, req: ReviewRequest
) -> tuple[list[ReviewItem], list[str], list[ReviewIgnored]]:
    """The reviews of memories the caller may see, as event items (the memory's own id), and the rest."""
    found = resolve_memories(services.store, req.workspace_id, [r.entry_id for r in req.reviews])
    view = View(services.store, principal, req.workspace_id)
    items: list[ReviewItem] = []
    owners: list[str] = []
    ignored: list[ReviewIgnored] = []
    for i, r in enumerate(req.reviews):
        payload = found.get(r.entry_id)
        if payload is None or not may_see_stored(principal, payload):
            ignored.append(ReviewIgnored(index=i, entry_id=r.entry_id, reason="no_memory"))
            continue
        owner = str(payload.get("entry_id") or r.entry_id)
        items.append(ReviewItem(entry_id=owner, rating=r.rating))
        # the memory that served is reviewed; a bound token is told only of ids it may see (recall.views: a
        # part folded into another agent's memory is reviewed there, and answered by its own id)
        owners.append(owner if not view.hides or view.sees(payload) else r.entry_id)
    return items, owners, ignored


@router.post(
    PATH,
    status_code=202,
    response_model=ReviewAccepted,
    responses={
        401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
        403: {
            "model": ErrorResponse,
            "description": "the workspace (or, for a bound token, agent_id) is not the token's",
        },
        404: {"model": ErrorResponse, "description": "no reviewed id names a memory the caller may see"},
        413: {"model": ErrorResponse, "description": "body too large"},
        422: {"model": ErrorResponse, "description": "invalid request; `error` names the field"},
        503: {"model": ErrorResponse, "description": "the broker did not acknowledge: nothing is claimed"},
    },
    summary=f"Say how recalled memories served (again, hard, good, easy; up to {MAX_REVIEWS}); 202 once queued",
)
async def review(
    req: ReviewRequest,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Any:
    refused = services.metrics.reviews_refused
    try:
        agent_id = authorize_review(principal, workspace_id=req.workspace_id, agent_id=req.agent_id)
    except AuthError:
        refused.labels(reason="forbidden").inc(len(req.reviews))
        raise
    if services.produce is None:
        refused.labels(reason="unavailable").inc(len(req.reviews))
        return _error(503, "reviews are unavailable: this service has no Kafka producer")
    items, owners, ignored = await run_in_threadpool(_selected, services, principal, req)
    refused.labels(reason="unknown_memory").inc(len(ignored))
    if not items:
        first = req.reviews[0].entry_id
        return _error(404, f"reviews.0.entry_id: no memory {first!r} in workspace {req.workspace_id!r}")
    event = ReviewedEvent(
        event_id=event_id(req.workspace_id, agent_id, req.review_id),
        workspace_id=req.workspace_id,
        agent_id=agent_id,
        at=services.engine.clock(),
        reviews=items,
        run_id=req.run_id,
    )
    try:
        await asyncio.wait_for(
            services.produce(MEMORY_REVIEWED, [(req.workspace_id.encode(), event.to_json())]), ACK_TIMEOUT_S
        )
    except Exception as e:
        refused.labels(reason="unavailable").inc(len(items))
        ref = uuid.uuid4().hex[:12]  # the broker's words stay in the log (they name its hosts)
        log.warning("POST %s: the broker did not acknowledge %d reviews (ref %s): %r", PATH, len(items), ref, e)
        return _error(
            503,
            f"the broker did not acknowledge the reviews ({type(e).__name__}; ref {ref}: see the service log); "
            "nothing is claimed: retry",
        )
    body = ReviewAccepted(accepted=len(items), entry_ids=owners, ignored=ignored, topic=MEMORY_REVIEWED)
    return JSONResponse(status_code=202, content=body.model_dump(mode="json"))
