"""Forget from the explorer: by entry ids, by agent, or by run (a whole workspace stays an API call with
`all: true`: one click is too easy a way to lose a workspace).

The form is validated as `episodic_client.models.ForgetRequest` (the same 422 messages), the confirmation page shows
what the selection holds now (the memories the ids name, or the first `PREVIEW` of the agent's or run's),
and the confirmed forget is `recall.memories.submit_forget`, the function behind `POST /v1/memory/forget`:
the same narrowing for a bound token, the same pending -> applied status, read back with the checks of
`GET /v1/memory/forget/{id}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from episodic.kernel.auth import AuthError, Principal, authorize, forget_narrowed, may_see_memory
from episodic.kernel.ports import Selection
from episodic.lifecycle.forget import STATUS, owners_of
from episodic.lifecycle.inspect import memory_item, memory_page
from episodic_client.models import ForgetRequest
from recall.deps import Services
from recall.memories import submit_forget
from recall.ui.pages import BadInput
from recall.views import View

PREVIEW = 20
WAIT_S = 2.0  # the answer waits this long for the forget to be applied; the status page polls after


@dataclass(frozen=True, slots=True)
class Ask:
    workspace_id: str
    entry_ids: tuple[str, ...] = ()
    agent_id: str | None = None
    run_id: str | None = None

    @classmethod
    def from_form(cls, form: dict[str, str]) -> Ask:
        # one id a line, split on "\n" only: an id may hold any other character (a comma, U+2028, a form feed),
        # so `x,<victim>` is one id, never `x` and the victim's (issue 45)
        ids = [i.strip(" \t\r") for i in form.get("entry_ids", "").split("\n") if i.strip(" \t\r")]
        body: dict[str, Any] = {"workspace_id": form.get("workspace_id", "").strip()}
        if ids:
            body["entry_ids"] = ids
        for name in ("agent_id", "run_id"):
            if form.get(name, "").strip():
                body[name] = form[name].strip()
        try:
            req = ForgetRequest.model_validate(body)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ())) or "selection"
            raise BadInput(f"{loc}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}") from None
        return cls(req.workspace_id, tuple(req.entry_ids or ()), req.agent_id, req.run_id)

    @property
    def field(self) -> str:
        return "entry_ids" if self.entry_ids else "run_id" if self.run_id else "agent_id"

    def describe(self) -> str:
        parts = []
        if self.entry_ids:
            parts.append(f"{len(self.entry_ids)} entry id(s)")
        if self.run_id:
            parts.append(f"run {self.run_id!r}")
        if self.agent_id:
            parts.append(f"agent {self.agent_id!r}" if parts else f"every memory of agent {self.agent_id!r}")
        return " of ".join(parts) + f" in workspace {self.workspace_id!r}"


@dataclass(slots=True)
class Preview:
    memories: list[dict[str, Any]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # ids of no memory (they are tombstoned all the same)
    more: bool = False


def _narrowed(principal: Principal, ask: Ask) -> str | None:
    authorize(principal, ask.workspace_id)
    return forget_narrowed(principal, selector_field=ask.field, agent_id=ask.agent_id, all=False)


def preview(services: Services, principal: Principal, ask: Ask) -> Preview:
    """What the forget would take now (checked as the forget itself will be)."""
    agent = _narrowed(principal, ask)
    out = Preview()
    view = View(services.store, principal, ask.workspace_id)
    if ask.entry_ids:
        found = owners_of(services.store, ask.workspace_id, list(ask.entry_ids), services.state)
        for eid in ask.entry_ids:
            if eid not in found:
                out.unknown.append(eid)
                continue
            item = memory_item(found[eid][1])
            if agent is not None and item["agent_id"] != agent:  # another agent's: shown as an id of no memory,
                out.unknown.append(eid)  # as the narrowed forget treats it (a refusal would confirm it; issue 29)
                continue
            out.memories.append(item)
        out.memories = view.items(out.memories)
        return out
    selection = Selection(ask.workspace_id, agent_id=agent, run_id=ask.run_id)
    items, cursor = memory_page(services.store, selection, None, PREVIEW)
    out.memories, out.more = view.items(items), cursor is not None
    return out


async def submit(services: Services, principal: Principal, ask: Ask) -> tuple[int, dict[str, Any] | None]:
    """The forget, as `POST /v1/memory/forget` makes it: (HTTP status, its answer's body)."""
    resp = await submit_forget(
        services, principal, ask.workspace_id, WAIT_S,
        entry_ids=list(ask.entry_ids) or None, agent_id=ask.agent_id, run_id=ask.run_id, field=ask.field,
    )  # fmt: skip
    try:
        body = json.loads(bytes(resp.body))
    except ValueError:
        body = None
    return resp.status_code, body if isinstance(body, dict) else None


def status(services: Services, principal: Principal, workspace_id: str, forget_id: str) -> dict[str, Any] | None:
    """A forget's status document, with `GET /v1/memory/forget/{id}`'s checks; None when there is none."""
    authorize(principal, workspace_id)
    if services.state is None:
        raise BadInput("forget: this service has no state store")
    doc = services.state.get(STATUS, forget_id)
    if doc is None or doc.get("workspace_id") != workspace_id:
        return None
    if not may_see_memory(principal, agent_id=(doc.get("selector") or {}).get("agent_id"), crew_id=None):
        raise AuthError("forbidden", "a bound token reads only the forgets of its own agent", field="forget_id")
    return doc
