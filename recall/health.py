"""Memory-health endpoints: `GET /v1/memory/health` (the stored snapshots, never recomputed on read) and
`POST /v1/admin/run/health` (compute, store and publish snapshots now; an admin token when auth is on).
The snapshots are the health agent's (`streams/health.py`), kept in the state store beside the memories."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from episodic.kernel.auth import Principal, authorize, authorize_crew
from episodic.maintenance.health_job import HealthJob, announce
from episodic_client.models import MAX_HEALTH_DAYS, MAX_ID_LEN, ErrorResponse, HealthResponse, HealthRunResponse
from recall.admin import ADMIN_ERRORS, require_admin
from recall.deps import Services, current_principal, get_services
from recall.routes import ERRORS

router = APIRouter()

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "no snapshot yet"}}


def _job(services: Services) -> HealthJob:
    if services.health is None:
        raise HTTPException(503, detail="memory health is not available: this process has no state store")
    return services.health


def _scope(workspace_id: str, crew_id: str | None) -> str:
    return f"workspace {workspace_id!r}" + (f", crew {crew_id!r}" if crew_id else "")


@router.get(
    "/v1/memory/health",
    response_model=HealthResponse,
    response_model_exclude_none=False,
    responses={**ERRORS, **NOT_FOUND},
    summary="The latest stored memory-health snapshot of a workspace or crew, and its daily history",
    tags=["memory"],
)
async def memory_health(
    workspace_id: str = Query(min_length=1, max_length=MAX_ID_LEN),
    crew_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    days: int | None = Query(
        default=None, ge=1, le=MAX_HEALTH_DAYS, description="also return the snapshots of the last N days"
    ),
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    authorize(principal, workspace_id)
    authorize_crew(principal, crew_id)
    job = _job(services)
    latest = await run_in_threadpool(job.latest, workspace_id, crew_id)
    if latest is None:
        at = services.settings.health_daily_at
        raise HTTPException(
            404,
            detail=f"no memory-health snapshot for {_scope(workspace_id, crew_id)} yet: the health agent takes one "
            f"daily at {at} UTC (EPISODIC_HEALTH_DAILY_AT) for every workspace and crew with memories; "
            "POST /v1/admin/run/health computes one now",
        )
    body = latest.to_json_dict()
    if days is not None:
        history = await run_in_threadpool(job.history, workspace_id, crew_id, days)
        body["history"] = [s.to_json_dict() for s in history]
    return body


@router.post(
    "/v1/admin/run/health",
    response_model=HealthRunResponse,
    responses={**ERRORS, **ADMIN_ERRORS, **NOT_FOUND},
    summary="Compute, store and publish health snapshots now (replaces today's); admin token when auth is on",
    tags=["admin"],
)
async def run_health(
    workspace_id: str | None = Query(
        default=None, min_length=1, max_length=MAX_ID_LEN, description="only this workspace (and its crews)"
    ),
    principal: Principal = Depends(require_admin),
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    job = _job(services)
    if workspace_id is not None:
        authorize(principal, workspace_id)
        known = await run_in_threadpool(job.workspaces)
        if workspace_id not in known:
            raise HTTPException(404, detail=f"workspace {workspace_id!r} has no memories and no accepted entries")
    t0 = time.perf_counter()
    snaps, failed = await run_in_threadpool(
        job.run, [workspace_id] if workspace_id else None, trigger="admin", force=True
    )
    announce(
        snaps,
        publish=services.publish,
        metrics=services.metrics,
        gauge_workspaces=services.settings.health_gauge_workspaces,
    )
    return {
        "workspaces": sum(1 for s in snaps if s.crew_id is None),
        "failed": failed,
        "duration_seconds": round(time.perf_counter() - t0, 4),
        "snapshots": [s.to_json_dict() for s in snaps],
    }
