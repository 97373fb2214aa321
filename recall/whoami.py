"""`GET /v1/whoami`: what the caller's token may do. Clients (`episodic mcp`, `MemoryClient`) take their
identity from it when their configuration does not name one, so that a bound token is all an agent needs."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from episodic.kernel.auth import Principal
from episodic_client.models import ErrorResponse, WhoAmI, scope_for_role
from recall.deps import Services, current_principal, get_services

router = APIRouter()


@router.get(
    "/v1/whoami",
    response_model=WhoAmI,
    responses={401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"}},
    summary="The caller's token: its workspaces and, for a bound token, its agent, crew, role and scope",
    tags=["auth"],
)
async def whoami(
    principal: Principal = Depends(current_principal), services: Services = Depends(get_services)
) -> WhoAmI:
    return WhoAmI(
        name=principal.name,
        auth=services.tokens is not None,
        admin=principal.admin,
        workspaces=sorted(principal.workspaces),
        agent_id=principal.agent_id,
        crew_id=principal.crew_id,
        role=principal.role,
        scope=scope_for_role(principal.role) if principal.bound else None,
    )
