"""The explorer's unfold (issue 47): take a near duplicate back out of the memory it folded into.

On a memory's page, each part it absorbed is listed with the cosine and the fold rule's reason; an operator
(a workspace or admin token: `authorize_unfold`, never an agent's bound token) asks to unfold one, sees a
confirmation page with both texts, and only the confirmed POST (CSRF-checked, as forget and replay are)
writes, through `episodic.lifecycle.unfold.unfold_part`. Its own router, beside the pages of routes.py.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from episodic.domain.identity import point_id
from episodic.kernel.auth import Principal, authorize_unfold
from episodic.lifecycle.unfold import NotFolded, Unfolded, part_of_owner, unfold_part
from recall.deps import Services
from recall.ui import pages
from recall.ui.routes import html, page, session_of

log = logging.getLogger(__name__)
router = APIRouter(prefix="/ui", include_in_schema=False)


def _ask(form: dict[str, str]) -> tuple[str, str, str]:
    """(workspace, owner, part) from the form, each required."""
    values = tuple(form.get(k, "").strip() for k in ("workspace_id", "owner", "entry_id"))
    for name, value in zip(("workspace_id", "owner", "entry_id"), values, strict=True):
        if not value:
            raise pages.BadInput(f"{name}: required (the memory and the part to unfold)")
        if len(value) > 256:
            raise pages.BadInput(f"{name}: at most 256 characters")
    return values  # type: ignore[return-value]


def preview(services: Services, principal: Principal, workspace_id: str, owner: str, entry_id: str) -> dict[str, Any]:
    """Both memories as they are now, and the owner's record of the part (NotFolded when it is none)."""
    authorize_unfold(principal, workspace_id)
    found = services.store.retrieve([point_id(workspace_id, owner), point_id(workspace_id, entry_id)])
    mine, part = found.get(point_id(workspace_id, owner)), found.get(point_id(workspace_id, entry_id))
    record = part_of_owner(mine, entry_id) if mine is not None else None
    if mine is None or part is None or record is None:
        raise NotFolded(f"{entry_id!r} is not a part of memory {owner!r}")
    return {"owner": mine, "part": part, "record": record}


def apply(services: Services, principal: Principal, workspace_id: str, owner: str, entry_id: str) -> Unfolded:
    authorize_unfold(principal, workspace_id)
    done = unfold_part(services.store, workspace_id, owner, entry_id, by=principal.name, now=services.engine.clock())
    if done.rewritten:
        services.metrics.unfolds.inc()
    log.info("explorer: %s unfolded %s from %s in %s", principal.name, entry_id, owner, workspace_id)
    return done


@router.post("/unfold")
async def unfold(request: Request) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}

    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        session_of(request).check_csrf(request, form.get("csrf"))
        workspace_id, owner, entry_id = _ask(form)
        try:
            if form.get("confirm") != "yes":
                shown = await run_in_threadpool(preview, services, principal, workspace_id, owner, entry_id)
                return html("unfold_confirm.html", **ctx, ws=workspace_id, **shown)
            done = await run_in_threadpool(apply, services, principal, workspace_id, owner, entry_id)
        except NotFolded as e:
            return html("error.html", 409, title="Not folded", message=f"entry_id: {e}", **ctx)
        return html("unfold_done.html", **ctx, done=done)

    return await page(request, build)
