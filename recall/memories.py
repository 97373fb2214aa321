"""The memory lifecycle endpoints (SPEC §11): forget, its status, inspect one memory, list memories.

Forget is an event: the request is checked, recorded as pending in the state store, produced to
`journal.embeddable` keyed by its workspace (acks=all; `Services.forget_sink`), announced (its rule keeps
the selection's queued entries out from then on: `episodic.lifecycle.forget.announce`) and applied by the embedding
consumer in order with that workspace's entries (episodic.lifecycle.forget). The answer waits up to `wait` seconds
(default `episodic_client.models.DEFAULT_FORGET_WAIT_S`) for it to be applied: `200` with what was removed when it
was, else `202` with the forget id and `status_url` (also the `Location` header) to poll. `wait=0` answers
`202` at once. A forget the broker refused is `503` (nothing has been removed; its status says `failed`,
and says `applied` if the broker got it after all). One the broker has not acknowledged within
`forget_queue_timeout_s` is `202` with `note` "unknown: ... ask its status": the producer keeps trying, and
the status settles when it is done (announced and then applied, or failed).
One the store refused to apply (consumers.batch: not a transient failure) is `200` with status `failed`
and `failure`, as soon as that is known.

Every route authorizes the caller for the workspace (an admin token, or a token of that workspace). A bound
token (episodic.kernel.auth) is held to its agent: it inspects and lists its agent's memories (a lead also its
crew's), reads the status of forgets narrowed to its agent, and forgets only its own agent's memories: its
selection is narrowed to that agent (`agent_id` added to the selector, which the consumer honours), and
`all: true` or another agent is 403 naming the field. A bound token cannot tell another agent's entry id
from a missing one (issue 29): inspecting it is the same 404 as a missing id, and forgetting it is accepted
and removes nothing, as for an id of no memory (the forget is narrowed to the token's agent). Store and
model work, and a memory's or a page's validation and JSON encoding, run in the thread pool.

Entry ids may hold any character, `/` included, so `{entry_id}` takes the rest of the path. A GET of an id
spelled `stats` or `health`, or starting with `forget/`, reaches those routes instead: `GET
/v1/memory?workspace_id=&entry_id=` reads any id.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from episodic.kernel.auth import (
    AuthError,
    Principal,
    authorize,
    forget_narrowed,
    listing_narrowed,
    may_see_memory,
    may_see_stored,
)
from episodic.kernel.ports import Selection
from episodic.lifecycle.forget import (
    APPLIED,
    FAILED,
    PENDING,
    STATUS,
    announce,
    selector_of,
    status_document,
)
from episodic.lifecycle.inspect import BadCursor, Forgotten, memory_detail, memory_page
from episodic_client.models import (
    DEFAULT_FORGET_WAIT_S,
    DEFAULT_PAGE,
    MAX_FORGET_WAIT_S,
    MAX_ID_LEN,
    MAX_PAGE,
    ErrorResponse,
    ForgetRequest,
    ForgetResponse,
    MemoryDetail,
    MemoryPage,
)
from recall.deps import Services, current_principal, get_services
from recall.views import View
from schemas.events import ForgetRecord

log = logging.getLogger(__name__)
POLL_S = 0.05

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
    403: {"model": ErrorResponse, "description": "the token may not use this workspace (or agent, for a bound one)"},
    422: {"model": ErrorResponse, "description": "invalid request; `error` names the field"},
    503: {"model": ErrorResponse, "description": "the store or the broker is unavailable"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "no such memory"}}
FORGET_ANSWERS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    202: {"model": ForgetResponse, "description": "queued, not applied within `wait`: poll `status_url`"},
}

router = APIRouter(tags=["memory"])

Workspace = Query(min_length=1, max_length=MAX_ID_LEN, description="the memory's workspace")
Wait = Query(
    default=DEFAULT_FORGET_WAIT_S, ge=0, le=MAX_FORGET_WAIT_S, description="seconds to wait for the forget's effect"
)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message})


def _invalid(field: str, message: str) -> JSONResponse:
    detail = [{"loc": ["query", field], "msg": message, "type": "value_error"}]
    return JSONResponse(status_code=422, content={"error": f"{field}: {message}", "detail": detail})


def _status_url(forget_id: str, workspace_id: str) -> str:
    return f"/v1/memory/forget/{quote(forget_id, safe='')}?workspace_id={quote(workspace_id, safe='')}"


UNKNOWN_NOTE = (
    "unknown: the broker has not acknowledged the forget yet; it may still be queued and applied: ask its status"
)


def _settle(services: Services, record: ForgetRecord, send: asyncio.Future[None]) -> None:
    """A forget whose send outlived the request: announced when the broker acknowledges it, failed when the
    producer gives up (unless the consumer applied it meanwhile: a lost acknowledgement)."""
    state = services.state
    if state is None or send.cancelled():
        return
    error = send.exception()

    def settle() -> None:
        if error is None:
            announce(state, record)
            return
        done = state.get(STATUS, record.forget_id)
        if done is not None and done.get("status") == APPLIED:
            return
        log.warning("forget %s was never acknowledged: %s: %s", record.forget_id, type(error).__name__, error)
        failure = "could not queue the forget: the broker did not acknowledge it in time (see the service log)"
        state.put(STATUS, record.forget_id, status_document(record, FAILED, failure=failure))

    asyncio.get_running_loop().run_in_executor(None, settle)


def _answer(doc: dict[str, Any], *, note: str | None = None) -> JSONResponse:
    url = _status_url(str(doc["forget_id"]), str(doc["workspace_id"]))
    body = ForgetResponse.model_validate({**doc, "status_url": url, "note": note})
    applied = body.status == APPLIED
    headers = None if applied else {"Location": url}
    final = body.status in (APPLIED, FAILED)  # a forget the store refused is as done as an applied one
    return JSONResponse(status_code=200 if final else 202, content=body.model_dump(mode="json"), headers=headers)


async def submit_forget(
    services: Services,
    principal: Principal,
    workspace_id: str,
    wait: float,
    *,
    entry_ids: list[str] | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    all: bool = False,
    field: str = "entry_ids",
) -> JSONResponse:
    """A forget as `POST /v1/memory/forget` takes it (also the explorer's, recall/ui/forgets.py): checked,
    recorded pending, queued, announced, then waited for up to `wait` seconds."""
    authorize(principal, workspace_id)
    if principal.bound:
        selected = "entry_ids" if entry_ids else "run_id" if run_id else "agent_id"
        # Ids of another agent's memories are not refused (a 403 would tell them from missing ones): the
        # forget is narrowed to the token's agent, so it removes none of them, as for an id of no memory.
        agent_id = forget_narrowed(principal, selector_field=selected, agent_id=agent_id, all=all)
    selector = selector_of(entry_ids=entry_ids, agent_id=agent_id, run_id=run_id, all=all)
    state, sink = services.state, services.forget_sink
    if state is None or sink is None:
        return _error(503, "forget is unavailable: this service has no state store or no broker to send it to")
    record = ForgetRecord(
        forget_id=uuid.uuid4().hex,
        workspace_id=workspace_id,
        selector=selector,
        requested_at=datetime.now(UTC),
        requested_by=principal.name,
    )
    # pending first: the consumer may apply it as soon as the broker has it
    await run_in_threadpool(state.put, STATUS, record.forget_id, status_document(record, PENDING))
    send = asyncio.ensure_future(sink(record))
    try:
        await asyncio.wait_for(asyncio.shield(send), services.forget_queue_timeout_s)
    except TimeoutError:
        # Not acknowledged yet: the producer keeps trying, so the forget may still be queued and applied.
        # Unknown, and said so (issue 25): the status settles when the send does (`_settle`).
        send.add_done_callback(lambda done: _settle(services, record, done))
        return _answer(status_document(record, PENDING), note=UNKNOWN_NOTE)
    except Exception as e:
        services.metrics.consumer_errors.labels(stage="publish").inc()
        done = await run_in_threadpool(state.get, STATUS, record.forget_id)
        if done is not None and done.get("status") == APPLIED:  # the broker had it after all (a lost ack)
            return _answer(done)
        # The broker's error stays in the log (it may name hosts); the answer carries a reference to it.
        ref = uuid.uuid4().hex[:12]
        log.warning("forget %s could not be queued (ref %s): %s: %s", record.forget_id, ref, type(e).__name__, e)
        failure = (
            f"could not queue the forget: the broker refused or did not acknowledge it (ref {ref}: see the service log)"
        )
        failed = status_document(record, FAILED, failure=failure)
        await run_in_threadpool(state.put, STATUS, record.forget_id, failed)
        return _error(
            503,
            f"{failure} (forget {record.forget_id}: nothing has been removed; if the broker got it after all, it is "
            f"applied and its status says so: {_status_url(record.forget_id, record.workspace_id)}; else try again)",
        )
    await run_in_threadpool(announce, state, record)
    deadline = time.monotonic() + wait
    doc: dict[str, Any] | None = None
    while True:
        doc = await run_in_threadpool(state.get, STATUS, record.forget_id)
        if (doc is not None and doc.get("status") in (APPLIED, FAILED)) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    return _answer(doc or status_document(record, PENDING))


@router.post(
    "/v1/memory/forget",
    response_model=ForgetResponse,
    responses=FORGET_ANSWERS,
    summary="Forget memories: some entry ids, an agent's, a run's, or the whole workspace",
)
async def forget(
    req: ForgetRequest,
    wait: float = Wait,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> JSONResponse:
    return await submit_forget(
        services, principal, req.workspace_id, wait,
        entry_ids=req.entry_ids, agent_id=req.agent_id, run_id=req.run_id, all=req.all,
    )  # fmt: skip


@router.get(
    "/v1/memory/forget/{forget_id}",
    response_model=ForgetResponse,
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "no such forget in this workspace"}},
    summary="Where a forget stands: pending, applied (with what it removed) or failed",
)
async def forget_status(
    forget_id: str = Path(min_length=1, max_length=MAX_ID_LEN),
    workspace_id: str = Workspace,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> JSONResponse:
    authorize(principal, workspace_id)
    state = services.state
    if state is None:
        return _error(503, "forget is unavailable: this service has no state store")
    doc = await run_in_threadpool(state.get, STATUS, forget_id)
    if doc is None or doc.get("workspace_id") != workspace_id:
        return _error(404, f"forget_id: no forget {forget_id!r} in workspace {workspace_id!r}")
    selected_agent = (doc.get("selector") or {}).get("agent_id")
    if not may_see_memory(principal, agent_id=selected_agent, crew_id=None):
        raise AuthError("forbidden", "a bound token reads only the forgets of its own agent", field="forget_id")
    answer = _answer(doc)
    answer.status_code = 200
    return answer


def _json(model: MemoryDetail | MemoryPage) -> Response:
    """Validated and encoded by the caller, in the thread pool (recall/routes.py: the loop also carries the
    gate and the consumer in `episodic up`)."""
    return Response(model.model_dump_json().encode(), media_type="application/json")


def detail_view(services: Services, principal: Principal, workspace_id: str, entry_id: str) -> dict[str, Any] | None:
    """The memory as the caller may see it (recall.views: a bound token its agent's, or a lead's crew's, and
    nothing of another agent's that it names); None for a memory it may not see, answered as a missing one
    (issue 29: a 403 would confirm the id exists). Raises Forgotten. Also the explorer's memory page."""
    view = View(services.store, principal, workspace_id)
    found = memory_detail(services.store, services.state, workspace_id, entry_id, services.engine.clock())
    return None if found is None or not may_see_stored(principal, found) else view.detail(found)


def _detail_response(services: Services, principal: Principal, workspace_id: str, entry_id: str) -> Response | None:
    found = detail_view(services, principal, workspace_id, entry_id)
    return None if found is None else _json(MemoryDetail.model_validate(found))


async def _detail(services: Services, principal: Principal, workspace_id: str, entry_id: str) -> Response:
    authorize(principal, workspace_id)
    try:
        found = await run_in_threadpool(_detail_response, services, principal, workspace_id, entry_id)
    except Forgotten as e:
        if principal.bound:  # whose memory it was is not kept with its tombstone: answered as a missing one
            found = None
        else:
            return _error(404, f"entry_id: {e}")
    if found is None:
        return _error(404, f"entry_id: no memory {entry_id!r} in workspace {workspace_id!r}")
    return found


def _page_response(
    services: Services, principal: Principal, selection: Selection, cursor: str | None, limit: int
) -> Response:
    items, next_cursor = memory_page(services.store, selection, cursor, limit)
    items = View(services.store, principal, selection.workspace_id).items(items)
    return _json(MemoryPage.model_validate({"memories": items, "next_cursor": next_cursor}))


@router.get(
    "/v1/memory",
    response_model=MemoryDetail,
    responses={**ERRORS, **NOT_FOUND},
    summary="One memory by entry id (any id, also one spelled like a route below /v1/memory/)",
)
async def memory_by_query(
    workspace_id: str = Workspace,
    entry_id: str = Query(min_length=1, max_length=MAX_ID_LEN, description="an entry id or one of its aliases"),
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Any:
    return await _detail(services, principal, workspace_id, entry_id)


@router.get(
    "/v1/memories",
    response_model=MemoryPage,
    responses=ERRORS,
    summary="A workspace's memories, newest first, a page at a time (a bound token: its agent's, or crew's)",
)
async def memories(
    workspace_id: str = Workspace,
    agent_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    run_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    crew_id: str | None = Query(default=None, min_length=1, max_length=MAX_ID_LEN),
    entry_type: list[str] | None = Query(default=None, description="one or more (repeat the parameter)"),
    cursor: str | None = Query(default=None, min_length=1, max_length=1024, description="next_cursor of a page"),
    limit: int = Query(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE),
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Any:
    authorize(principal, workspace_id)
    agent_id, crew_id = listing_narrowed(principal, agent_id=agent_id, crew_id=crew_id)
    types = tuple(dict.fromkeys(entry_type or ()))
    for t in types:
        if not t or len(t) > MAX_ID_LEN:
            return _invalid("entry_type", f"must be 1..{MAX_ID_LEN} characters")
    selection = Selection(workspace_id, agent_id=agent_id, run_id=run_id, entry_types=types, crew_id=crew_id)
    try:
        return await run_in_threadpool(_page_response, services, principal, selection, cursor, limit)
    except BadCursor as e:
        return _invalid("cursor", str(e))


@router.delete(
    "/v1/memory/{entry_id:path}",
    response_model=ForgetResponse,
    responses=FORGET_ANSWERS,
    summary="Forget one memory (an alias id forgets its whole memory)",
)
async def forget_one(
    entry_id: str = Path(min_length=1, max_length=MAX_ID_LEN),
    workspace_id: str = Workspace,
    wait: float = Wait,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> JSONResponse:
    return await submit_forget(services, principal, workspace_id, wait, entry_ids=[entry_id], field="entry_id")


@router.get(
    "/v1/memory/{entry_id:path}",
    response_model=MemoryDetail,
    responses={**ERRORS, **NOT_FOUND},
    summary="One memory with importance, counters, aliases, occurrences, relations and its vector's model",
)
async def memory(
    entry_id: str = Path(min_length=1, max_length=MAX_ID_LEN, description="an entry id or one of its aliases"),
    workspace_id: str = Workspace,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> Any:
    return await _detail(services, principal, workspace_id, entry_id)
