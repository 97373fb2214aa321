"""Bearer-token auth for the recall service: tokens mapped to workspaces, plus admin tokens.

The tokens file (named by `EPISODIC_TOKENS_FILE`) is JSON::

    {
      "tokens": [
        {"name": "orchestrator-a", "token": "a-long-random-secret-1", "workspaces": ["ws-a"]},
        {"name": "team-b", "sha256": "<hex sha256 of the token>", "workspaces": ["ws-b", "ws-c"]},
        {"name": "ops", "token": "another-long-random-secret", "admin": true}
      ]
    }

- Each entry has `token` (the secret itself, at least 16 characters) or `sha256` (the hex SHA-256 of
  the secret, so the file need not hold it); `name` (for logs, defaults to "token-<n>"); `workspaces`
  (the workspaces it may read; required unless admin); `admin` (default false: true sees every
  workspace, and may ask /v1/memory/stats without a workspace).
- A request carries `Authorization: Bearer <token>`. Missing header -> 401 (reason "missing");
  malformed header or unknown token -> 401 (reason "invalid"); a known token asking for a workspace it
  is not mapped to -> 403 (reason "forbidden").
- No tokens file: the service is open, and the server refuses to bind beyond loopback unless --insecure.
- `/healthz`, `/metrics` and the OpenAPI document are never authenticated (probes and scrapers).

Tokens are compared by their SHA-256 digest, so lookups do not depend on the secret's bytes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MIN_TOKEN_CHARS = 16
AuthReason = Literal["missing", "invalid", "forbidden"]
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class AuthConfigError(ValueError):
    """The tokens file is missing or malformed."""


class AuthError(Exception):
    """A rejected request. `status` is 401 or 403; `reason` is the metric label."""

    def __init__(self, reason: AuthReason, message: str) -> None:
        super().__init__(message)
        self.reason: AuthReason = reason
        self.message = message

    @property
    def status(self) -> int:
        return 403 if self.reason == "forbidden" else 401


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    workspaces: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False

    def may_read(self, workspace_id: str) -> bool:
        return self.admin or workspace_id in self.workspaces


# The principal of an open service (no tokens file): may read everything.
OPEN = Principal(name="open", admin=True)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenTable:
    by_digest: dict[str, Principal]

    def __len__(self) -> int:
        return len(self.by_digest)

    @property
    def admins(self) -> int:
        return sum(1 for p in self.by_digest.values() if p.admin)

    @classmethod
    def from_dict(cls, data: Any) -> TokenTable:
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise AuthConfigError('tokens file: expected an object {"tokens": [...]}')
        table: dict[str, Principal] = {}
        for n, item in enumerate(data["tokens"]):
            where = f"tokens[{n}]"
            if not isinstance(item, dict):
                raise AuthConfigError(f"{where}: expected an object")
            unknown = set(item) - {"name", "token", "sha256", "workspaces", "admin"}
            if unknown:
                raise AuthConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
            token, sha = item.get("token"), item.get("sha256")
            if (token is None) == (sha is None):
                raise AuthConfigError(f"{where}: give exactly one of 'token' or 'sha256'")
            if token is not None:
                if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS or token != token.strip():
                    raise AuthConfigError(
                        f"{where}.token: must be a string of at least {MIN_TOKEN_CHARS} characters, "
                        "without surrounding whitespace"
                    )
                key = digest(token)
            else:
                if not isinstance(sha, str) or not _HEX64.match(sha.lower()):
                    raise AuthConfigError(f"{where}.sha256: must be 64 hex characters")
                key = sha.lower()
            admin = item.get("admin", False)
            if not isinstance(admin, bool):
                raise AuthConfigError(f"{where}.admin: must be true or false")
            workspaces = item.get("workspaces", [])
            if not isinstance(workspaces, list) or not all(isinstance(w, str) and w for w in workspaces):
                raise AuthConfigError(f"{where}.workspaces: must be a list of workspace ids")
            if not admin and not workspaces:
                raise AuthConfigError(f"{where}: a non-admin token needs at least one workspace")
            name = item.get("name", f"token-{n}")
            if not isinstance(name, str) or not name:
                raise AuthConfigError(f"{where}.name: must be a non-empty string")
            if key in table:
                raise AuthConfigError(f"{where}: duplicate token")
            table[key] = Principal(name=name, workspaces=frozenset(workspaces), admin=admin)
        if not table:
            raise AuthConfigError("tokens file: no tokens (remove the setting to run open on loopback)")
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
        return cls.from_dict(data)

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


def authorize(principal: Principal, workspace_id: str | None) -> None:
    """Raise AuthError (403) unless `principal` may read `workspace_id` (None: all workspaces, admin only)."""
    if workspace_id is None:
        if not principal.admin:
            raise AuthError("forbidden", "only an admin token may read across workspaces")
        return
    if not principal.may_read(workspace_id):
        raise AuthError("forbidden", f"token {principal.name!r} may not read workspace {workspace_id!r}")


def load_tokens(path: str | Path | None) -> TokenTable | None:
    """The token table named by settings, or None (open service) when no file is configured."""
    return None if path is None else TokenTable.load(path)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
