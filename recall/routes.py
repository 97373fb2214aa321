"""The endpoints of SPEC §7. Blocking and CPU work (the model, the store, rendering, the response's
validation and JSON encoding, the metrics exposition) runs in the thread pool: in `episodic up` the event
loop also carries the gate and the consumer. `publish` is called on the event-loop thread after the
response is computed, and never fails a request."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from episodic.domain.context_mode import ContextMode
from episodic.domain.folding import FoldRule
from episodic.kernel.auth import Principal, authorize, authorize_recall
from episodic.retrieval.engine import RecallHit, RecallResult
from episodic.retrieval.render import render
from episodic.retrieval.repeats import distinct
from episodic_client.models import (
    MAX_ID_LEN,
    MAX_K,
    ErrorResponse,
    HealthzResponse,
    Hit,
    RecallRequest,
    RecallResponse,
    RenderRequest,
    RenderResponse,
    StatsResponse,
)
from recall.deps import Services, current_principal, get_services
from recall.views import View
from schemas.topics import MEMORY_REFERENCED

log = logging.getLogger(__name__)

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
    403: {"model": ErrorResponse, "description": "the token may not read this (workspace, agent, crew, scope)"},
    422: {"model": ErrorResponse, "description": "invalid request; `error` names the field"},
    503: {"model": ErrorResponse, "description": "the memory store is unavailable"},
}

router = APIRouter()


def _hits(hits: list[RecallHit]) -> list[Hit]:
    return [Hit.model_validate(h.public()) for h in hits]


def _json(model: RecallResponse | RenderResponse) -> Response:
    return Response(model.model_dump_json().encode(), media_type="application/json")


@dataclass(slots=True)
class Answer:
    """What a recall route computed off the event loop: the response, and what the loop still does
    (metrics, and the `memory.referenced` event, published from the loop thread)."""

    response: Response
    result: RecallResult
    referenced: dict[str, Any]
    n_hits: int


def _seen(services: Services, principal: Principal, req: RecallRequest, hits: list[RecallHit]) -> list[RecallHit]:
    """The hits as the caller may see them (recall.views: a bound token reads nothing of another agent's
    through its own hits)."""
    return View(services.store, principal, req.workspace_id).hits(hits)


def _answer_recall(services: Services, principal: Principal, req: RecallRequest) -> Answer:
    result = services.engine.recall(req)
    hits = _seen(services, principal, req, result.hits)
    body = RecallResponse(mode=req.mode, degraded=result.degraded, hits=_hits(hits))
    return Answer(_json(body), result, result.referenced_event(hits), len(hits))


def _answer_render(services: Services, principal: Principal, req: RenderRequest) -> Answer:
    # Twice the hits asked for (at most 50), so that the k distinct ones can fill the places of repeats.
    result = services.engine.recall(req.model_copy(update={"k": min(MAX_K, 2 * req.k)}))
    s = services.settings
    hits = distinct(result.hits, req.k, FoldRule(cosine=s.fold_cosine, additions=s.fold_additions, swaps=s.fold_swaps))
    hits = _seen(services, principal, req, hits)
    rendered = render(hits, req.budget_chars)  # up to k=50 hits of 16k characters: CPU work
    shown = [hits[i] for i in rendered.included]
    nudge = None
    if req.run_id is not None and services.nudges is not None:
        try:
            nudge = services.nudges(req.workspace_id, req.agent_id, req.run_id)
        except Exception as e:
            log.warning("nudge lookup failed: %s", e)
    body = RenderResponse(
        text=rendered.text,
        hits=_hits(shown),
        nudge=nudge,
        mode=req.mode,
        degraded=result.degraded,
        similar_left_out=sum(h.similar_left_out for h in shown),
    )
    # only the hits that made it into the text are marked referenced
    return Answer(_json(body), result, result.referenced_event(shown), len(shown))


async def _answer(
    services: Services,
    principal: Principal,
    req: RecallRequest,
    compute: Callable[[Services, Principal, Any], Answer],
) -> Response:
    """Run `compute` in the thread pool (the store query, the model, rendering and the JSON encoding stay
    off the loop that also carries the gate and the consumer in `episodic up`), then observe and publish.
    With `recall_slots` (EPISODIC_RECALL_CONCURRENCY) at most that many are computed at once, the others
    waiting in arrival order (asyncio.Semaphore is fair); the latency observed includes the wait."""
    t0 = time.perf_counter()
    async with services.recall_slots or contextlib.nullcontext():
        answer = await run_in_threadpool(compute, services, principal, req)
    m = services.metrics
    m.recall_latency.labels(mode=req.mode).observe(time.perf_counter() - t0)
    m.recall_hits.observe(answer.n_hits)
    if answer.result.degraded:
        m.recall_degraded.inc()
    try:
        services.publish(MEMORY_REFERENCED, answer.result.workspace_id, answer.referenced)
    except Exception as e:  # publishing is best effort: the importance agent tolerates a lost event
        log.warning("could not publish %s: %s", MEMORY_REFERENCED, e)
    return answer.response


@router.post(
    "/v1/recall",
    response_model=RecallResponse,
    responses=ERRORS,
    summary="Ranked memories for a query, within one workspace and scope",
    tags=["recall"],
)
async def recall(
    req: RecallRequest,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Response:
    authorize_recall(
        principal, workspace_id=req.workspace_id, scope=req.scope, agent_id=req.agent_id, crew_id=req.crew_id
    )
    return await _answer(services, principal, req, _answer_recall)


@router.post(
    "/v1/recall/render",
    response_model=RenderResponse,
    responses=ERRORS,
    summary="A prompt-ready <recalled-memory> block within a character (or token) budget",
    tags=["recall"],
)
async def recall_render(
    req: RenderRequest,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Response:
    authorize_recall(
        principal, workspace_id=req.workspace_id, scope=req.scope, agent_id=req.agent_id, crew_id=req.crew_id
    )
    return await _answer(services, principal, req, _answer_render)


@router.get(
    "/v1/memory/stats",
    response_model=StatsResponse,
    responses=ERRORS,
    summary="Memory counts of a workspace (all workspaces: admin token or open service)",
    tags=["memory"],
)
async def memory_stats(
    workspace_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> StatsResponse:
    authorize(principal, workspace_id)

    def counts() -> StatsResponse:
        from episodic.kernel.errors import EpisodicError, StoreError

        store, limit = services.store, services.settings.densify_max_attempts
        try:
            total = store.count(workspace_id)
            dense = store.count(workspace_id, has_dense=True)
            quarantined = store.count_quarantined(workspace_id, limit)
        except EpisodicError:
            raise
        except Exception as e:
            raise StoreError(f"store count failed: {type(e).__name__}: {e}") from e
        return StatsResponse(indexed=total, dense=dense, sparse_only=max(0, total - dense), quarantined=quarantined)

    return await run_in_threadpool(counts)


def context_state(mode: ContextMode, has_context: bool) -> str:
    """What /healthz says about context-aware indexing."""
    if mode.off:
        return "off"
    return mode.label() if has_context else "unavailable"


@router.get("/healthz", response_model=HealthzResponse, tags=["ops"], summary="Liveness and mode (no auth)")
async def healthz(response: Response, services: Services = Depends(get_services)) -> HealthzResponse:
    try:
        st = dict(services.status())
    except Exception as e:
        log.warning("status callable failed: %s", e)
        st = {}
    kafka = str(st.get("kafka", "unknown"))
    store_ok = await run_in_threadpool(services.store.ping)
    qdrant = "ok" if store_ok else "down"
    body = HealthzResponse(
        status="ok" if (store_ok and kafka == "ok") else "degraded",
        episodic="sparse-only" if services.engine.sparse_only else "vector",
        kafka=kafka,
        qdrant=qdrant,
        kafka_bootstrap=st.get("kafka_bootstrap"),
        journal=st.get("journal") if st.get("journal") in ("durable", "volatile") else "unknown",
        context=context_state(services.settings.context, services.store.has_context),
    )
    if not store_ok:  # cannot serve recall at all: fail readiness probes
        response.status_code = 503
    return body


@router.get(
    "/metrics",
    tags=["ops"],
    summary="Prometheus exposition (no auth; an admin token with EPISODIC_METRICS_ADMIN_ONLY)",
    response_class=Response,
)
async def metrics(request: Request, services: Services = Depends(get_services)) -> Response:
    # Its health gauges carry workspace ids: where tenants can reach the port, keep it for an admin token
    # (Prometheus: `authorization: {credentials: ...}`) so that no tenant learns another's workspaces.
    if services.settings.metrics_admin_only and services.tokens is not None:
        authorize(services.tokens.authenticate(request.headers.get("authorization")), None)
    text = await run_in_threadpool(generate_latest, services.metrics.registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
