"""Where a client finds the memory service and who it is: `ClientSettings`, read from the environment.

    settings = ClientSettings.from_env()     # EPISODIC_URL, EPISODIC_TOKEN, EPISODIC_WORKSPACE_ID, ...
    MemoryClient.from_settings(settings)     # what `from_settings()` does without an argument

The names are the engine's (prefix `EPISODIC_`, case-insensitive), and so are the bounds: the engine's
`Settings` (`episodic.kernel.settings`) is this class plus the engine's own settings, so a variable means
the same on both sides and is declared once. Read here with pydantic alone (no pydantic-settings): a client
installs httpx, pydantic and tenacity, nothing more.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from episodic_client.models import Role

__all__ = ["ENV_PREFIX", "ClientSettings", "is_loopback"]

ENV_PREFIX = "EPISODIC_"


class ClientSettings(BaseModel):
    """The client's settings. Invalid values raise pydantic's `ValidationError` naming the field (the input
    is never echoed: it may be a token)."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    # The service's address: the service binds to it, and a client on the same host finds it there.
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)

    # Agent surfaces and client commands: where a client finds the service and who it is
    # (`MemoryClient.from_settings`, `episodic mcp`, `episodic recall` / `doctor`, the LangChain retriever).
    # Never taken from a tool argument.
    url: str | None = Field(default=None, description="the recall service's URL (EPISODIC_URL)")
    recall_url: str | None = Field(default=None, description="older name of EPISODIC_URL")
    token: SecretStr | None = Field(default=None, description="bearer token the client sends (EPISODIC_TOKEN)")
    workspace_id: str | None = Field(default=None, min_length=1, max_length=128)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)
    crew_id: str | None = Field(default=None, min_length=1, max_length=128)
    role: Role | None = Field(
        default=None, description="agent: recall scope own; lead: crew_shared (seed 001 ScopeForRole)"
    )
    client_timeout_s: float = Field(default=10.0, gt=0, le=600)
    client_retries: int = Field(default=3, ge=0, le=20, description="retries on 503 and connection errors")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """The settings from `environ` (default: the process environment): `EPISODIC_<FIELD>`, the name in any
        case, as the engine's settings read it; `overrides` win."""
        env = os.environ if environ is None else environ
        names = {f"{ENV_PREFIX}{name}".lower(): name for name in cls.model_fields}
        found = {names[key.lower()]: value for key, value in env.items() if key.lower() in names}
        return cls.model_validate({**found, **overrides})

    @property
    def service_url(self) -> str:
        """EPISODIC_URL, else EPISODIC_RECALL_URL, else http://<http_host>:<http_port> (a wildcard host: loopback)."""
        explicit = self.url or self.recall_url
        if explicit:
            return explicit.rstrip("/")
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "::", "") else self.http_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.http_port}"


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
