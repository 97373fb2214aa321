"""What the sync and async memory clients share: identity, errors, the calls of the API as values, the
retry policy. No IO here: `episodic_client.client` sends a `Call` with httpx and hands the answer to `decode`.

Adding an endpoint is one `Calls` method returning a `Call` and a one-line method on each client.

Size: a little over 400 lines: every call of the API as a value in one place, so the two clients cannot drift.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from episodic_client.errors import (
    BY_STATUS,
    ClientConfigError,
    EntriesRejected,
    RequestRefused,
    ServiceUnavailable,
    ServiceUnreachable,
    UnexpectedAnswer,
)
from episodic_client.models import (
    JOURNAL_TOPIC,
    MAX_FORGET_WAIT_S,
    MAX_ID_LEN,
    MAX_JOURNAL_BYTES,
    MAX_JOURNAL_ENTRIES,
    MAX_PAGE,
    EntryError,
    ForgetRequest,
    ForgetResponse,
    JournalAccepted,
    MemoryDetail,
    MemoryPage,
    RecallRequest,
    RecallResponse,
    RenderRequest,
    RenderResponse,
    Review,
    ReviewAccepted,
    ReviewRequest,
    Role,
    Scope,
    StatsResponse,
    WhoAmI,
    scope_for_role,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
# reviews as the clients take them: {entry_id: rating}, or (entry_id, rating) pairs, or Review models
Reviews = Mapping[str, str] | Iterable[Review | tuple[str, str]]

DEFAULT_TIMEOUT_S = 10.0
ANSWER_MARGIN_S = 10.0  # a forget's HTTP timeout: its `wait` plus this (the service answers after `wait`)
MAX_RETRY_AFTER_S = 30.0
_ENVELOPE_BYTES = 64  # `{"entries":[...]}` and the commas, generously
_ENTRY_INDEX = re.compile(r"^entries\[(\d+)\]")


# -- identity ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """Who the client recalls and writes as. From configuration (EPISODIC_WORKSPACE_ID, EPISODIC_AGENT_ID,
    EPISODIC_CREW_ID, EPISODIC_ROLE) or from the token (`GET /v1/whoami`); explicit arguments win."""

    workspace_id: str | None = None
    agent_id: str | None = None
    crew_id: str | None = None
    role: Role | None = None

    @property
    def scope(self) -> Scope:
        if self.role is not None:
            return scope_for_role(self.role)
        return "crew_shared" if self.agent_id is None and self.crew_id is not None else "own"

    def fill_from(self, who: WhoAmI) -> Identity:
        """This identity with its gaps filled from what the token is bound to."""
        workspace = self.workspace_id
        if workspace is None and len(who.workspaces) == 1:
            workspace = who.workspaces[0]
        return Identity(
            workspace_id=workspace,
            agent_id=self.agent_id or who.agent_id,
            crew_id=self.crew_id or who.crew_id,
            role=self.role or who.role,
        )

    def workspace(self, given: str | None = None) -> str:
        ws = given or self.workspace_id
        if ws is None:
            raise ClientConfigError(
                "workspace_id: not configured (set EPISODIC_WORKSPACE_ID, pass identity=, or use a token of "
                "one workspace and call identify())"
            )
        return ws

    def recall_fields(self, scope: Scope | None = None) -> dict[str, Any]:
        """The identity part of a recall in `scope` (default: the identity's). The crew goes with
        `crew_shared` only: in scope `own` a crew_id narrows the recall to the agent's memories of that crew,
        which would hide the ones it made in other crews."""
        scope = scope or self.scope
        out: dict[str, Any] = {"scope": scope}
        if self.workspace_id is not None:
            out["workspace_id"] = self.workspace_id
        if self.agent_id is not None:
            out["agent_id"] = self.agent_id
        if self.crew_id is not None and scope == "crew_shared":
            out["crew_id"] = self.crew_id
        return out


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_entry(identity: Identity, summary: str, **fields: Any) -> dict[str, Any]:
    """A journal entry (SPEC §3) written as `identity`: a fresh id and ts unless given; None fields left out
    (a None argument keeps the default)."""
    entry: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "workspace_id": identity.workspace_id,
        "agent_id": identity.agent_id,
        "crew_id": identity.crew_id,
        "ts": now_rfc3339(),
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": summary,
    }
    entry.update({k: v for k, v in fields.items() if v is not None})
    return {k: v for k, v in entry.items() if v is not None}


def complete_entry(identity: Identity, entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` with the identity's workspace/agent/crew, an id and a ts where it has none."""
    out = dict(entry)
    defaults = {
        "workspace_id": identity.workspace_id,
        "agent_id": identity.agent_id,
        "crew_id": identity.crew_id,
        "id": None,
        "ts": None,
    }
    for key, value in defaults.items():
        if out.get(key) is None:
            if key == "id":
                value = str(uuid.uuid4())
            elif key == "ts":
                value = now_rfc3339()
            if value is not None:
                out[key] = value
    return out


def journal_batches(entries: list[dict[str, Any]]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(offset, entries) batches within the service's bounds on entries and bytes."""
    batch: list[dict[str, Any]] = []
    start, size = 0, _ENVELOPE_BYTES
    for i, entry in enumerate(entries):
        n = len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if batch and (len(batch) >= MAX_JOURNAL_ENTRIES or size + n > MAX_JOURNAL_BYTES):
            yield start, batch
            batch, start, size = [], i, _ENVELOPE_BYTES
        batch.append(entry)
        size += n
    if batch:
        yield start, batch


def merge_accepted(parts: Iterable[tuple[int, JournalAccepted]], topic: str = JOURNAL_TOPIC) -> JournalAccepted:
    """One answer for a batch sent in parts: indexes (and `entries[i]` in messages) relative to the whole."""
    ids: list[str] = []
    errors: list[EntryError] = []
    for offset, part in parts:
        ids.extend(part.ids)
        topic = part.topic
        for e in part.errors:
            message = _ENTRY_INDEX.sub(f"entries[{e.index + offset}]", e.error)
            errors.append(e.model_copy(update={"index": e.index + offset, "error": message}))
    return JournalAccepted(accepted=len(ids), ids=ids, rejected=len(errors), errors=errors, topic=topic)


# -- calls ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call(Generic[T]):
    """One request of the API and how to read its answer."""

    method: str
    path: str
    decode: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] | None = None
    ok: tuple[int, ...] = (200,)
    refused: dict[int, type[RequestRefused]] = field(default_factory=dict)  # per-call error classes
    timeout: float | None = None  # at least this long (a forget that waits); None: the client's timeout

    def timeout_s(self, client_timeout: float) -> float:
        return client_timeout if self.timeout is None else max(client_timeout, self.timeout)


def model(cls: type[M]) -> Callable[[Any], M]:
    return cls.model_validate


def as_dict(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UnexpectedAnswer(f"expected a JSON object, got {type(data).__name__}")
    return data


@dataclass(frozen=True)
class Calls:
    """The API's calls, made as `identity`."""

    identity: Identity = field(default_factory=Identity)

    def recall(self, query: str | RecallRequest, fields: Mapping[str, Any]) -> Call[RecallResponse]:
        req = query if isinstance(query, RecallRequest) else self._request(RecallRequest, query, fields)
        return Call("POST", "/v1/recall", model(RecallResponse), json=req.model_dump(mode="json", exclude_none=True))

    def render(self, query: str | RenderRequest, fields: Mapping[str, Any]) -> Call[RenderResponse]:
        req = query if isinstance(query, RenderRequest) else self._request(RenderRequest, query, fields)
        return Call(
            "POST", "/v1/recall/render", model(RenderResponse), json=req.model_dump(mode="json", exclude_none=True)
        )

    def journal(self, entries: list[dict[str, Any]]) -> Call[JournalAccepted]:
        return Call(
            "POST", "/v1/journal", model(JournalAccepted), json={"entries": entries}, ok=(202,),
            refused={422: EntriesRejected},
        )  # fmt: skip

    def stats(self, workspace_id: str | None, all_workspaces: bool = False) -> Call[StatsResponse]:
        params = {} if all_workspaces else {"workspace_id": self.identity.workspace(workspace_id)}
        return Call("GET", "/v1/memory/stats", model(StatsResponse), params=params)

    def health(self, workspace_id: str | None, crew_id: str | None, days: int | None = None) -> Call[dict[str, Any]]:
        """`GET /v1/memory/health`: the latest stored snapshot (with `days`, its daily history too)."""
        params: dict[str, Any] = {"workspace_id": self.identity.workspace(workspace_id)}
        if crew_id is not None:
            params["crew_id"] = crew_id
        if days is not None:
            params["days"] = days
        return Call("GET", "/v1/memory/health", as_dict, params=params)

    def run_health(self, workspace_id: str | None) -> Call[dict[str, Any]]:
        """`POST /v1/admin/run/health`: compute, store and publish snapshots now (of one workspace, or all)."""
        params = {} if workspace_id is None else {"workspace_id": workspace_id}
        return Call("POST", "/v1/admin/run/health", as_dict, params=params)

    def whoami(self) -> Call[WhoAmI]:
        return Call("GET", "/v1/whoami", model(WhoAmI))

    # -- the memory lifecycle (SPEC §11) ---------------------------------------------------------------------
    def forget(self, selector: Mapping[str, Any], workspace_id: str | None, wait: float) -> Call[ForgetResponse]:
        """`POST /v1/memory/forget`: 200 applied, or 202 pending (poll `forget_status`)."""
        req = ForgetRequest.model_validate({**selector, "workspace_id": self.identity.workspace(workspace_id)})
        return _forget_call("POST", "/v1/memory/forget", {"wait": wait}, wait, req.model_dump(exclude_defaults=True))

    def delete(self, entry_id: str, workspace_id: str | None, wait: float) -> Call[ForgetResponse]:
        """`DELETE /v1/memory/{entry_id}`: forget one memory (an alias id: its whole memory)."""
        params = {"workspace_id": self.identity.workspace(workspace_id), "wait": wait}
        return _forget_call("DELETE", f"/v1/memory/{_segment('entry_id', entry_id)}", params, wait)

    def forget_status(self, forget_id: str, workspace_id: str | None) -> Call[ForgetResponse]:
        params = {"workspace_id": self.identity.workspace(workspace_id)}
        return Call(
            "GET", f"/v1/memory/forget/{_segment('forget_id', forget_id)}", model(ForgetResponse), params=params
        )

    def get(self, entry_id: str, workspace_id: str | None) -> Call[MemoryDetail]:
        """`GET /v1/memory?entry_id=` (the query form reads any id, also one spelled like a route)."""
        params = {"workspace_id": self.identity.workspace(workspace_id), "entry_id": _id("entry_id", entry_id)}
        return Call("GET", "/v1/memory", model(MemoryDetail), params=params)

    def memories(self, selection: Mapping[str, Any], cursor: str | None, limit: int) -> Call[MemoryPage]:
        """`GET /v1/memories`: one page, newest first. `selection`: agent_id, run_id, crew_id, entry_types."""
        unknown = sorted(set(selection) - {"agent_id", "run_id", "crew_id", "entry_types", "workspace_id"})
        if unknown:
            raise ClientConfigError(f"{unknown[0]}: not a listing parameter (agent_id, run_id, crew_id, entry_types)")
        params: dict[str, Any] = {"workspace_id": self.identity.workspace(selection.get("workspace_id"))}
        for key, name in (("agent_id", "agent_id"), ("run_id", "run_id"), ("crew_id", "crew_id")):
            if selection.get(key) is not None:
                params[name] = _id(key, selection[key])
        if selection.get("entry_types"):
            params["entry_type"] = [_id("entry_types", t) for t in selection["entry_types"]]
        if cursor is not None:
            params["cursor"] = cursor
        if not 1 <= limit <= MAX_PAGE:
            raise ClientConfigError(f"limit: must be 1..{MAX_PAGE} (the service's page bound), not {limit}")
        params["limit"] = limit
        return Call("GET", "/v1/memories", model(MemoryPage), params=params)

    def review(self, reviews: Reviews, workspace_id: str | None, run_id: str | None) -> Call[ReviewAccepted]:
        """`POST /v1/memory/review`: how the memories given served, as the identity's agent (202 once queued)."""
        items = [
            r.model_dump() if isinstance(r, Review) else {"entry_id": r[0], "rating": r[1]}
            for r in (reviews.items() if isinstance(reviews, Mapping) else reviews)
        ]
        body: dict[str, Any] = {
            "workspace_id": self.identity.workspace(workspace_id),
            "reviews": items,
            "review_id": uuid.uuid4().hex,  # one per call: a retry of this call is applied once
        }
        if self.identity.agent_id is not None:
            body["agent_id"] = self.identity.agent_id
        if run_id is not None:
            body["run_id"] = run_id
        req = ReviewRequest.model_validate(body)
        return Call(
            "POST", "/v1/memory/review", model(ReviewAccepted), json=req.model_dump(exclude_none=True), ok=(202,)
        )

    def _request(self, cls: type[M], query: str, fields: Mapping[str, Any]) -> M:
        body = {**self.identity.recall_fields(fields.get("scope")), **fields, "query": query}
        if "workspace_id" not in body:
            self.identity.workspace()  # raises ClientConfigError naming the setting
        return cls.model_validate(body)


def _segment(name: str, value: str) -> str:
    """One path segment: ids may hold any character, `/` included."""
    return quote(_id(name, value), safe="")


def _id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LEN:
        raise ClientConfigError(f"{name}: must be a string of 1..{MAX_ID_LEN} characters, not {value!r}")
    return value


def _forget_call(method: str, path: str, params: dict[str, Any], wait: float, body: Any = None) -> Call[ForgetResponse]:
    if not 0 <= wait <= MAX_FORGET_WAIT_S:
        raise ClientConfigError(f"wait: must be 0..{MAX_FORGET_WAIT_S:g} seconds, not {wait}")
    params["wait"] = float(wait)
    return Call(
        method, path, model(ForgetResponse), json=body, params=params, ok=(200, 202), timeout=wait + ANSWER_MARGIN_S
    )


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, min(float(value), MAX_RETRY_AFTER_S))
    except ValueError:
        return None


def decode(call: Call[T], response: httpx.Response) -> T:
    """The call's result, or the `RequestRefused` subclass for its status (with the service's `error`)."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code in call.ok:
        if data is None:
            raise UnexpectedAnswer(f"HTTP {response.status_code} without a JSON body: {response.text[:300]!r}")
        try:
            return call.decode(data)
        except ValidationError as e:
            raise UnexpectedAnswer(f"HTTP {response.status_code}: not the API's answer: {e}") from None
    message = data.get("error") if isinstance(data, dict) else None
    if not message:
        message = response.text[:500] if data is None else data
    cls = call.refused.get(response.status_code) or BY_STATUS.get(response.status_code, RequestRefused)
    raise cls(response.status_code, message, data, _retry_after(response))


# -- retries -------------------------------------------------------------------------------------------------
def retryable(exc: BaseException) -> bool:
    """Retry what a later attempt may cure: no connection, a timeout, a 503. Never a 4xx."""
    return isinstance(exc, ServiceUnreachable | ServiceUnavailable)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter (or the service's Retry-After) on 503 and connection errors."""

    retries: int = 3
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def tenacity_kwargs(self) -> dict[str, Any]:
        # backoff_s * 2**(n-1) plus up to backoff_s of jitter, at most max_backoff_s: wait_exponential_jitter's
        # formula, built from parts every tenacity>=9 has (its `initial` is deprecated from 9.2, and the
        # `multiplier` that replaces it is not in 9.0/9.1)
        backoff = wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s) + wait_random(0, self.backoff_s)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            if isinstance(exc, RequestRefused) and exc.retry_after is not None:
                return min(exc.retry_after, self.max_backoff_s)
            return min(float(backoff(state)), self.max_backoff_s)

        return {
            "retry": retry_if_exception(retryable),
            "stop": stop_after_attempt(self.retries + 1),
            "wait": wait,
            "reraise": True,
        }
