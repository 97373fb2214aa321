"""Bearer-token auth for the recall service: tokens mapped to workspaces, optionally bound to an agent and
a role, plus admin tokens.

The tokens file (named by `EPISODIC_TOKENS_FILE`) is JSON, parsed by the `TokensFile` model::

    {
      "tokens": [
        {"name": "orchestrator-a", "token": "a-long-random-secret-1", "workspaces": ["ws-a"]},
        {"name": "planner", "token": "another-long-secret-2", "workspaces": ["ws-a"],
         "agent_id": "planner", "role": "agent", "crew_id": "platform"},
        {"name": "platform-lead", "sha256": "<hex sha256 of the token>", "workspaces": ["ws-a"],
         "agent_id": "lead-1", "role": "lead", "crew_id": "platform"},
        {"name": "ops", "token": "yet-another-long-secret", "admin": true}
      ]
    }

- Each entry has `token` (the secret itself, at least 16 characters) or `sha256` (the hex SHA-256 of
  the secret, so the file need not hold it); `name` (for logs, defaults to "token-<n>"); `workspaces`
  (the workspaces it may read and write; required unless admin); `admin` (default false: true sees every
  workspace, and may ask /v1/memory/stats without a workspace).
- Binding (seed 001's ScopeForRole): `role` "agent" (requires `agent_id`) may recall only `own` memories
  of its `agent_id`; `role` "lead" (requires `crew_id`) may also use `crew_shared` of its `crew_id`, with
  its own `agent_id` or none. `agent_id` alone means role "agent". A bound token writes journal entries
  only as its agent (and crew), and without `priority` (an operator's marker). A request outside the
  binding is 403 with a message naming the field. Tokens without a role (workspace tokens) keep the
  workspace rule only: any agent, crew and scope of their workspaces (for orchestrators that act for many
  agents). Admin tokens cannot be bound.
- A request carries `Authorization: Bearer <token>`. Missing header -> 401 (reason "missing");
  malformed header or unknown token -> 401 (reason "invalid"); a known token asking for something it may
  not -> 403 (reason "forbidden").
- The memory lifecycle (`recall/memories.py`): a bound token inspects and lists only its agent's memories
  (a lead also its crew's), and forgets only its own agent's: its forget is narrowed to that agent, and
  `all: true` or another agent is 403 naming the field (`may_see_memory`, `listing_narrowed`,
  `forget_narrowed`).
- No tokens file: the service is open, and the server refuses to bind beyond loopback unless --insecure.
- `/healthz`, `/metrics` and the OpenAPI document are never authenticated (probes and scrapers).

Tokens are compared by their SHA-256 digest, so lookups do not depend on the secret's bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictBool, StrictStr, ValidationError, model_validator

from episodic_client.models import Role, Scope, scope_for_role

MIN_TOKEN_CHARS = 16
AuthReason = Literal["missing", "invalid", "forbidden"]

_Id = Annotated[StrictStr, Field(min_length=1, max_length=128)]


class AuthConfigError(ValueError):
    """The tokens file is missing or malformed."""


class AuthError(Exception):
    """A rejected request. `status` is 401 or 403; `reason` is the metric label; `field` is what the
    request asked for that the token may not have (the message starts with it)."""

    def __init__(self, reason: AuthReason, message: str, *, field: str | None = None) -> None:
        self.reason: AuthReason = reason
        self.field = field
        self.detail = message
        self.message = f"{field}: {message}" if field else message
        super().__init__(self.message)

    @property
    def status(self) -> int:
        return 403 if self.reason == "forbidden" else 401

    def at(self, prefix: str) -> AuthError:
        """The same refusal about `prefix.field` (e.g. `entries[3].workspace_id` for one entry of a batch)."""
        return AuthError(self.reason, self.detail, field=f"{prefix}.{self.field}" if self.field else prefix)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    workspaces: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False
    agent_id: str | None = None
    crew_id: str | None = None
    role: Role | None = None  # None: a workspace token, not bound to an agent

    def may_read(self, workspace_id: str) -> bool:
        return self.admin or workspace_id in self.workspaces

    @property
    def bound(self) -> bool:
        return self.role is not None


# The principal of an open service (no tokens file): may read everything.
OPEN = Principal(name="open", admin=True)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenSpec(BaseModel):
    """One entry of the tokens file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[StrictStr, Field(min_length=1)] | None = None
    token: SecretStr | None = Field(default=None, min_length=MIN_TOKEN_CHARS)
    sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-fA-F]{64}$")] | None = None
    workspaces: list[_Id] = Field(default_factory=list)
    admin: StrictBool = False
    agent_id: _Id | None = None
    crew_id: _Id | None = None
    role: Role | None = None

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of 'token' or 'sha256'")
        if self.token is not None and self.token.get_secret_value() != self.token.get_secret_value().strip():
            raise ValueError("token: must not have surrounding whitespace")
        bound = self.role is not None or self.agent_id is not None or self.crew_id is not None
        if self.admin and bound:
            raise ValueError("an admin token cannot be bound to an agent, crew or role")
        if not self.admin and not self.workspaces:
            raise ValueError("a non-admin token needs at least one workspace")
        role = self.role or ("agent" if self.agent_id is not None else None)
        if role == "agent" and self.agent_id is None:
            raise ValueError("role 'agent' needs agent_id (the agent the token acts as)")
        if role == "lead" and self.crew_id is None:
            raise ValueError("role 'lead' needs crew_id (the crew it leads)")
        if role is None and self.crew_id is not None:
            raise ValueError("crew_id binds a token only with a role ('agent' or 'lead')")
        if role != self.role:
            object.__setattr__(self, "role", role)
        return self

    @property
    def key(self) -> str:
        if self.token is not None:
            return digest(self.token.get_secret_value())
        assert self.sha256 is not None
        return self.sha256.lower()


class TokensFile(BaseModel):
    """The tokens file: `{"tokens": [TokenSpec, ...]}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[TokenSpec] = Field(min_length=1)


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "tokens file"


def _config_error(e: ValidationError) -> AuthConfigError:
    problems = []
    for err in e.errors():
        where, kind, msg = _where(err["loc"]), err["type"], str(err["msg"]).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            msg = "unknown field"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            msg = 'expected an object {"tokens": [...]}' if where == "tokens file" else "expected an object"
        elif kind == "list_type":
            msg = "expected a list"
        elif kind == "too_short" and where == "tokens":
            msg = "no tokens (remove the setting to run open on loopback)"
        elif kind in ("too_short", "string_too_short") and where.endswith(".token"):
            msg = f"must be a string of at least {MIN_TOKEN_CHARS} characters"
        elif kind == "string_pattern_mismatch" and where.endswith(".sha256"):
            msg = "must be 64 hex characters"
        problems.append(msg if where == "tokens file" else f"{where}: {msg}")
    return AuthConfigError("tokens file: " + "; ".join(problems or ["invalid"]))


@dataclass(frozen=True)
class TokenTable:
    by_digest: dict[str, Principal]

    def __len__(self) -> int:
        return len(self.by_digest)

    @property
    def admins(self) -> int:
        return sum(1 for p in self.by_digest.values() if p.admin)

    @property
    def bound(self) -> int:
        return sum(1 for p in self.by_digest.values() if p.bound)

    @classmethod
    def from_dict(cls, data: Any) -> TokenTable:
        try:
            spec = TokensFile.model_validate(data)
        except ValidationError as e:
            raise _config_error(e) from None
        table: dict[str, Principal] = {}
        for n, item in enumerate(spec.tokens):
            if item.key in table:
                raise AuthConfigError(f"tokens file: tokens[{n}]: duplicate token")
            table[item.key] = Principal(
                name=item.name or f"token-{n}",
                workspaces=frozenset(item.workspaces),
                admin=item.admin,
                agent_id=item.agent_id,
                crew_id=item.crew_id,
                role=item.role,
            )
        return cls(table)

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        p = Path(path)
        try:
            raw = p.read_text(encoding="utf-8")
        except OSError as e:
            raise AuthConfigError(f"cannot read tokens file {p}: {e}") from e
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise AuthConfigError(f"tokens file {p} is not JSON: {e}") from e
        try:
            return cls.from_dict(data)
        except AuthConfigError as e:
            raise AuthConfigError(f"{p}: {e}") from None

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization` header value, or AuthError (401)."""
        if authorization is None or not authorization.strip():
            raise AuthError("missing", "missing bearer token: send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise AuthError("invalid", "malformed Authorization header: expected 'Bearer <token>'")
        principal = self.by_digest.get(digest(token))
        if principal is None:
            raise AuthError("invalid", "invalid bearer token")
        return principal


def _forbid(field: str, message: str) -> AuthError:
    return AuthError("forbidden", message, field=field)


def authorize(principal: Principal, workspace_id: str | None, *, verb: str = "read") -> None:
    """Raise AuthError (403) unless `principal` may read `workspace_id` (None: all workspaces, admin only)."""
    if workspace_id is None:
        if not principal.admin:
            raise _forbid("workspace_id", "only an admin token may read across workspaces")
        return
    if not principal.may_read(workspace_id):
        raise _forbid("workspace_id", f"token {principal.name!r} may not {verb} workspace {workspace_id!r}")


def authorize_unfold(principal: Principal, workspace_id: str) -> None:
    """Taking a near duplicate back out of the memory it folded into (`episodic.lifecycle.unfold`): an
    operator's act, a workspace or admin token of the workspace; never a bound token (an agent could undo
    the fold of another agent's memory, and see its text in its own scope)."""
    authorize(principal, workspace_id, verb="unfold in")
    if principal.bound:
        raise _forbid("entry_id", f"token {principal.name!r} is bound to an agent: only an operator's token unfolds")


def authorize_recall(
    principal: Principal, *, workspace_id: str, scope: Scope, agent_id: str | None, crew_id: str | None
) -> None:
    """A recall (or render) request: the workspace rule, then the token's binding (agent, crew, scope)."""
    authorize(principal, workspace_id)
    if not principal.bound:
        return
    who = f"token {principal.name!r} is bound to"
    if scope == "crew_shared" and scope_for_role(principal.role) != "crew_shared":
        raise _forbid("scope", f"{who} role {principal.role!r}, whose widest scope is 'own'")
    if agent_id is not None and agent_id != principal.agent_id:
        if principal.agent_id is None:
            raise _forbid("agent_id", f"{who} crew {principal.crew_id!r} without an agent: leave agent_id out")
        raise _forbid("agent_id", f"{who} agent {principal.agent_id!r}; it may not read agent {agent_id!r}")
    authorize_crew(principal, crew_id)


def authorize_crew(principal: Principal, crew_id: str | None) -> None:
    """A bound token with a crew may name no other crew."""
    if crew_id is not None and principal.crew_id is not None and crew_id != principal.crew_id:
        raise _forbid("crew_id", f"token {principal.name!r} is bound to crew {principal.crew_id!r}; not {crew_id!r}")


def authorize_write(
    principal: Principal, *, workspace_id: str, agent_id: str, crew_id: str | None, priority: str | None = None
) -> None:
    """A journal entry: its workspace must be the token's; a bound token writes only as its agent and crew,
    and sets no `priority` (an operator's marker that floors importance at up to 0.95: an agent could
    otherwise lift its own entries into its lead's crew-shared recall; issue 29)."""
    authorize(principal, workspace_id, verb="write")
    if not principal.bound:
        return
    if priority is not None:
        raise _forbid(
            "priority",
            f"{_bound_to(principal)}; priority is an operator's marker: only a workspace or admin token sets it",
        )
    if agent_id != principal.agent_id:
        bound_to = f"agent {principal.agent_id!r}" if principal.agent_id else f"crew {principal.crew_id!r} only"
        raise _forbid(
            "agent_id", f"token {principal.name!r} is bound to {bound_to}; it may not write as agent {agent_id!r}"
        )
    authorize_crew(principal, crew_id)


def authorize_review(principal: Principal, *, workspace_id: str, agent_id: str | None) -> str | None:
    """A review of memories (`POST /v1/memory/review`, issue 26): the workspace's write rule; a bound token
    reviews as its own agent only (403 naming `agent_id` for another). Returns the reviewing agent."""
    authorize(principal, workspace_id, verb="write")
    if not principal.bound:
        return agent_id
    if agent_id is not None and agent_id != principal.agent_id:
        raise _forbid("agent_id", f"{_bound_to(principal)}; it may not review as agent {agent_id!r}")
    return principal.agent_id


# -- the memory lifecycle (inspect, list, forget) for bound tokens ------------------------------------------
def _bound_to(principal: Principal) -> str:
    if principal.role == "lead":
        agent = f" and agent {principal.agent_id!r}" if principal.agent_id else ""
        return f"token {principal.name!r} is bound to crew {principal.crew_id!r} (lead){agent}"
    return f"token {principal.name!r} is bound to agent {principal.agent_id!r}"


def may_see_memory(principal: Principal, *, agent_id: str | None, crew_id: str | None) -> bool:
    """Whether `principal` may inspect a memory of (agent_id, crew_id) in a workspace it may read: any,
    unless bound; a bound token its agent's; a lead also its crew's."""
    if not principal.bound:
        return True
    if principal.agent_id is not None and agent_id == principal.agent_id:
        return True
    return principal.role == "lead" and crew_id is not None and crew_id == principal.crew_id


def may_see_stored(principal: Principal, memory: Mapping[str, Any]) -> bool:
    """`may_see_memory` for a stored memory's payload. A memory that absorbed entries of other agents of its
    crew is still its own agent's only (issue 47: another agent's own scope must not read its text); each of
    those agents keeps its own entry, which answers for itself."""
    return may_see_memory(principal, agent_id=memory.get("agent_id"), crew_id=memory.get("crew_id"))


def authorize_memory(
    principal: Principal, *, entry_id: str, agent_id: str | None, crew_id: str | None, field: str = "entry_id"
) -> None:
    """One memory, found in a workspace the principal may read: 403 naming `field` unless it may see it."""
    if not may_see_memory(principal, agent_id=agent_id, crew_id=crew_id):
        raise _forbid(field, f"{_bound_to(principal)}; memory {entry_id!r} is not one of its memories")


def listing_narrowed(
    principal: Principal, *, agent_id: str | None, crew_id: str | None
) -> tuple[str | None, str | None]:
    """The (agent_id, crew_id) a listing is narrowed to: as asked, unless bound. An agent-bound token lists
    its agent's memories (another agent: 403 naming agent_id); a lead its crew's, or all of its own agent's
    (another crew: 403 naming crew_id)."""
    if not principal.bound:
        return agent_id, crew_id
    authorize_crew(principal, crew_id)
    if agent_id is not None and agent_id == principal.agent_id:
        return agent_id, crew_id
    if principal.role == "lead":
        return agent_id, principal.crew_id
    if agent_id is not None:
        raise _forbid("agent_id", f"{_bound_to(principal)}; it may not list agent {agent_id!r}'s memories")
    return principal.agent_id, crew_id


def forget_narrowed(principal: Principal, *, selector_field: str, agent_id: str | None, all: bool) -> str | None:
    """The agent a forget is narrowed to: `agent_id` as asked, unless bound. A bound token (agent or lead)
    forgets only its own agent's memories: its selection is narrowed to that agent; a whole workspace, or
    another agent, is 403 naming the field (`all`, `agent_id`); a lead without an agent forgets nothing."""
    if not principal.bound:
        return agent_id
    if all:
        raise _forbid("all", f"{_bound_to(principal)}; only a workspace or admin token may forget a workspace")
    if principal.agent_id is None:
        raise _forbid(selector_field, f"{_bound_to(principal)} without an agent: it may forget no memories")
    if agent_id is not None and agent_id != principal.agent_id:
        raise _forbid("agent_id", f"{_bound_to(principal)}; it may not forget agent {agent_id!r}'s memories")
    return principal.agent_id


def load_tokens(path: str | Path | None) -> TokenTable | None:
    """The token table named by settings, or None (open service) when no file is configured."""
    return None if path is None else TokenTable.load(path)
