"""Admin endpoints: run a maintenance job now (`POST /v1/admin/run/decay`).

A job is a blocking callable the composition root hands in (`Services.jobs`, name -> callable returning
what it did); it runs in the thread pool and the response is its report. An admin token is required when
the service has a tokens file (an open service on loopback treats every caller as admin, like /stats).
Another process running the same job answers 409 with its progress; a job this process was not given, 503.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from episodic.kernel.auth import AuthError, Principal
from episodic.maintenance.decay import JobBusy
from episodic_client.models import DecayRunResponse, ErrorResponse, JobBusyResponse
from recall.deps import Services, current_principal, get_services

log = logging.getLogger(__name__)

router = APIRouter()

ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
    403: {"model": ErrorResponse, "description": "not an admin token"},
    409: {"model": JobBusyResponse, "description": "a run of this job is in progress in another process"},
    503: {"model": ErrorResponse, "description": "the job is not available here, or the store is unavailable"},
}


def require_admin(principal: Principal = Depends(current_principal)) -> Principal:
    if not principal.admin:
        raise AuthError("forbidden", f"token {principal.name!r} is not an admin token: only admins run jobs")
    return principal


async def run_job(services: Services, name: str) -> Mapping[str, Any] | JSONResponse:
    job = services.jobs.get(name)
    if job is None:
        msg = f"the {name} job is not available in this process"
        return JSONResponse(status_code=503, content={"error": msg, "detail": msg})
    try:
        return await run_in_threadpool(job)
    except JobBusy as e:
        return JSONResponse(status_code=409, content={"error": str(e), "detail": str(e), "progress": e.progress})


@router.post(
    "/v1/admin/run/decay",
    response_model=DecayRunResponse,
    responses=ADMIN_ERRORS,
    summary="Run DecayAndReinforce (and retention, when on) over the whole store now",
    tags=["admin"],
)
async def run_decay(
    _admin: Principal = Depends(require_admin), services: Services = Depends(get_services)
) -> Mapping[str, Any] | JSONResponse:
    return await run_job(services, "decay")
