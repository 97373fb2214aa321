"""`POST /v1/journal`: journal entries over HTTP, for agents and languages without a Kafka client.

Each entry is validated by the gate's own parser (`parse_entry` on the entry's JSON bytes); invalid ones
come back with their index, field and reason, valid ones are produced to `journal.entries` keyed by
workspace (acks=all), and the answer (202) comes only after the broker acknowledged every one of them.
A broker failure is 503 and nothing is claimed: retrying the batch is safe, since an entry is idempotent
by (workspace_id, id). A token may write only to its own workspaces, and a bound token only as its agent and
without `priority` (403 naming `entries[i].<field>`). The entry id is not checked here: an id that another
agent's memory holds is dead-lettered by the consumer (`id_taken`), so that this answer cannot tell which ids
exist (issue 29). The body is bounded (`MAX_JOURNAL_BYTES`, chunked bodies included: 413).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from episodic.kernel.auth import AuthError, Principal, authorize_write
from episodic_client.models import (
    MAX_JOURNAL_BYTES,
    MAX_JOURNAL_ENTRIES,
    EntryError,
    ErrorResponse,
    JournalAccepted,
    JournalBatch,
    JournalRejected,
)
from recall.deps import Services, current_principal, get_services
from schemas.journal import InvalidEntry, parse_entry
from schemas.topics import JOURNAL_ENTRIES

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 30.0  # the broker's acknowledgement of the whole batch
# SPEC §3's fields: an error message that starts with one of them (or a path into one) names it.
ENTRY_FIELDS = (
    "id", "workspace_id", "crew_id", "agent_id", "run_id", "ts", "entry_type", "severity", "summary", "payload",
    "refs", "priority",
)  # fmt: skip
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w.\[\]]*)\s*:")
_AT_PATH = re.compile(r"at `\$\.([\w.\[\]]+)`")  # msgspec's "... - at `$.field`"

router = APIRouter()


def entry_field(error: InvalidEntry) -> str:
    """The field an `InvalidEntry` is about ("entry" when the value is not an object at all)."""
    for pattern in (_LEADING_PATH, _AT_PATH):
        m = pattern.search(error.error)
        if m and m.group(1).split(".")[0].split("[")[0] in ENTRY_FIELDS:
            return m.group(1)
    return "entry"


def _error_body(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message, **extra})


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it is larger than `limit` (by Content-Length or as it streams)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body: larger than {limit} bytes; split the batch")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body: larger than {limit} bytes; split the batch")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_batch(raw: bytes) -> JournalBatch:
    """The envelope (`{"entries": [...]}`), or 422 naming what is wrong with it."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise HTTPException(422, f"body: not valid JSON ({e})") from None
    try:
        return JournalBatch.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise HTTPException(422, f"{where}: {first['msg']}") from None


def validate_entries(batch: JournalBatch) -> tuple[list[tuple[int, Any, bytes]], list[EntryError]]:
    """(index, entry, JSON bytes) of the valid entries, and the errors of the others, by the gate's parser."""
    valid: list[tuple[int, Any, bytes]] = []
    errors: list[EntryError] = []
    for i, obj in enumerate(batch.entries):
        try:
            value = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
            entry = parse_entry(value)
        except InvalidEntry as e:
            eid = obj.get("id") if isinstance(obj, dict) else None
            field = entry_field(e)
            message = f"entries[{i}].{e.error}" if e.error.startswith(f"{field}:") else f"entries[{i}]: {e.error}"
            errors.append(
                EntryError(
                    index=i, id=eid if isinstance(eid, str) else None, field=field, reason=e.reason, error=message
                )
            )
        except (ValueError, RecursionError) as e:  # not encodable (e.g. nesting too deep)
            errors.append(EntryError(index=i, field="entry", reason="invalid_field", error=f"entries[{i}]: {e}"))
        else:
            valid.append((i, entry, value))
    return valid, errors


@router.post(
    "/v1/journal",
    status_code=202,
    response_model=JournalAccepted,
    responses={
        401: {"model": ErrorResponse, "description": "missing, malformed or unknown bearer token"},
        403: {"model": ErrorResponse, "description": "an entry's workspace (or agent) is not the token's"},
        413: {"model": ErrorResponse, "description": f"body larger than {MAX_JOURNAL_BYTES} bytes"},
        422: {"model": JournalRejected, "description": "no valid entry, or a malformed envelope"},
        503: {"model": ErrorResponse, "description": "the broker did not acknowledge: nothing is claimed"},
    },
    summary=f"Write up to {MAX_JOURNAL_ENTRIES} journal entries; 202 once the broker acknowledged them",
    tags=["journal"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": JournalBatch.model_json_schema()}},
        }
    },
)
async def post_journal(
    request: Request,
    principal: Principal = Depends(current_principal),
    services: Services = Depends(get_services),
) -> JSONResponse:
    counter = services.metrics.journal_http_entries
    batch = parse_batch(await read_limited(request, MAX_JOURNAL_BYTES))
    valid, errors = validate_entries(batch)
    counter.labels(outcome="invalid").inc(len(errors))
    for i, entry, _ in valid:
        try:
            authorize_write(
                principal,
                workspace_id=entry.workspace_id,
                agent_id=entry.agent_id,
                crew_id=entry.crew_id,
                priority=entry.priority,
            )
        except AuthError as e:
            counter.labels(outcome="forbidden").inc(len(valid))
            raise e.at(f"entries[{i}]") from None
    if not valid:
        first = errors[0]
        return _error_body(
            422,
            f"no valid entry in the batch: {first.error}",
            errors=[e.model_dump() for e in errors],
        )
    if services.produce is None:
        counter.labels(outcome="unavailable").inc(len(valid))
        return _error_body(503, "journal endpoint unavailable: this service has no Kafka producer")
    records = [(entry.workspace_id.encode(), value) for _, entry, value in valid]
    try:
        await asyncio.wait_for(services.produce(JOURNAL_ENTRIES, records), ACK_TIMEOUT_S)
    except Exception as e:
        counter.labels(outcome="unavailable").inc(len(valid))
        # The broker's words stay in the log (they name its hosts); the answer carries a reference to them.
        ref = uuid.uuid4().hex[:12]
        log.warning("POST /v1/journal: the broker did not acknowledge %d entries (ref %s): %r", len(valid), ref, e)
        return _error_body(
            503,
            f"the broker did not acknowledge the batch ({type(e).__name__}; ref {ref}: see the service log); "
            "nothing is claimed: retry it (entries are idempotent by workspace_id and id)",
        )
    counter.labels(outcome="accepted").inc(len(valid))
    body = JournalAccepted(
        accepted=len(valid),
        ids=[entry.id for _, entry, _ in valid],
        rejected=len(errors),
        errors=errors,
        topic=JOURNAL_ENTRIES,
    )
    return JSONResponse(status_code=202, content=body.model_dump(mode="json"))
