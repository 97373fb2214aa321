"""The endpoints of SPEC §7. Blocking work (model, store) runs in the thread pool; `publish` is called on
the event-loop thread after the response is computed, and never fails a request."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from episodic.auth import Principal, authorize
from episodic.context import ContextMode
from episodic.recall import RecallHit, RecallResult
from episodic.render import render
from recall.deps import Services, current_principal, get_services
from schemas.api import (
    MAX_ID_LEN,
    ErrorResponse,
    HealthzResponse,
    Hit,
    RecallRequest,
    RecallResponse,
    RenderRequest,
    RenderResponse,
    StatsResponse,
)
from schemas.topics import MEMORY_REFERENCED

log = logging.getLogger(__name__)

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
    403: {"model": ErrorResponse, "description": "the token may not read this workspace"},
    422: {"model": ErrorResponse, "description": "invalid request; `error` names the field"},
    503: {"model": ErrorResponse, "description": "the memory store is unavailable"},
}

router = APIRouter()


def _hits(hits: list[RecallHit]) -> list[Hit]:
    return [Hit.model_validate(h.public()) for h in hits]


def _publish_referenced(services: Services, result: RecallResult, hits: list[RecallHit]) -> None:
    try:
        services.publish(MEMORY_REFERENCED, result.workspace_id, result.referenced_event(hits))
    except Exception as e:  # publishing is best effort: the importance agent tolerates a lost event
        log.warning("could not publish %s: %s", MEMORY_REFERENCED, e)


async def _recall(services: Services, req: RecallRequest) -> tuple[RecallResult, float]:
    t0 = time.perf_counter()
    result = await run_in_threadpool(services.engine.recall, req)
    return result, t0


def _observe(services: Services, req: RecallRequest, result: RecallResult, n_hits: int, t0: float) -> None:
    m = services.metrics
    m.recall_latency.labels(mode=req.mode).observe(time.perf_counter() - t0)
    m.recall_hits.observe(n_hits)
    if result.degraded:
        m.recall_degraded.inc()


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
) -> RecallResponse:
    authorize(principal, req.workspace_id)
    result, t0 = await _recall(services, req)
    response = RecallResponse(mode=req.mode, degraded=result.degraded, hits=_hits(result.hits))
    _observe(services, req, result, len(result.hits), t0)
    _publish_referenced(services, result, result.hits)
    return response


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
) -> RenderResponse:
    authorize(principal, req.workspace_id)
    result, t0 = await _recall(services, req)
    rendered = render(result.hits, req.budget_chars)
    shown = [result.hits[i] for i in rendered.included]
    nudge = None
    if req.run_id is not None and services.nudges is not None:
        try:
            nudge = services.nudges(req.workspace_id, req.agent_id, req.run_id)
        except Exception as e:
            log.warning("nudge lookup failed: %s", e)
    response = RenderResponse(
        text=rendered.text, hits=_hits(shown), nudge=nudge, mode=req.mode, degraded=result.degraded
    )
    _observe(services, req, result, len(shown), t0)
    _publish_referenced(services, result, shown)  # only hits that made it into the text
    return response


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
        from episodic.errors import EpisodicError, StoreError

        try:
            total = services.store.count(workspace_id)
            dense = services.store.count(workspace_id, has_dense=True)
        except EpisodicError:
            raise
        except Exception as e:
            raise StoreError(f"store count failed: {type(e).__name__}: {e}") from e
        return StatsResponse(indexed=total, dense=dense, sparse_only=max(0, total - dense))

    return await run_in_threadpool(counts)


@router.get(
    "/v1/memory/health",
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "no snapshot yet"}},
    summary="The latest stored memory-health snapshot",
    tags=["memory"],
)
async def memory_health(
    workspace_id: str = Query(min_length=1, max_length=MAX_ID_LEN),
    crew_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> JSONResponse:
    authorize(principal, workspace_id)
    msg = (
        "no memory-health snapshot: the daily health agent (SPEC §8) is not part of this build yet, "
        "so no snapshot has been stored"
    )
    return JSONResponse(status_code=404, content={"error": msg, "detail": msg})


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
        context=context_state(services.settings.context, services.store.has_context),
    )
    if not store_ok:  # cannot serve recall at all: fail readiness probes
        response.status_code = 503
    return body


@router.get("/metrics", tags=["ops"], summary="Prometheus exposition (no auth)", response_class=Response)
async def metrics(services: Services = Depends(get_services)) -> Response:
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
