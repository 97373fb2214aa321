"""Typed HTTP clients of the memory service (SPEC §7, §11): `MemoryClient` and `AsyncMemoryClient`.

    from episodic.client import MemoryClient

    with MemoryClient.from_settings() as memory:   # EPISODIC_URL, EPISODIC_TOKEN, EPISODIC_WORKSPACE_ID, ...
        block = memory.render("what went wrong in checkout last time?", run_id=run).text
        ...                                        # the agent works, with `block` in its prompt
        memory.remember("Raised the checkout heap to 4 GiB; the OOMs stopped", run_id=run)

- Requests and answers are the API's pydantic models (`schemas.api`); bad arguments raise pydantic's
  `ValidationError` (it names the field) before anything is sent.
- Identity (workspace, agent, crew, role -> scope) comes from `Identity` (configuration), or from the token
  with `identify()` (`GET /v1/whoami`); keyword arguments override it per call.
- Timeouts per request; retries with exponential backoff and jitter (tenacity; the service's Retry-After
  when it gives one) on 503 and connection errors only, never on a 4xx. Writes are safe to retry: an
  entry is idempotent by (workspace_id, id).
- Errors are the core's own (`episodic.client_calls`): `ServiceUnreachable`, and `RequestRefused` with
  one subclass per status (`InvalidRequest`, `Unauthorized`, `Forbidden`, `NotFound`, `PayloadTooLarge`,
  `ServiceUnavailable`, `EntriesRejected`), carrying the service's `error` message.
- `remember_many` splits a batch to the service's bounds (entries and bytes) and merges the answers.

The two clients differ only in how they send; each public method is one line over `Calls`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import SecretStr
from tenacity import AsyncRetrying, Retrying

from episodic.client_calls import (
    DEFAULT_TIMEOUT_S,
    Call,
    Calls,
    ClientConfigError,
    ClientError,
    EntriesRejected,
    Forbidden,
    Identity,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RecallClientError,
    RecallRefused,
    RequestRefused,
    RetryPolicy,
    ServiceUnavailable,
    ServiceUnreachable,
    Unauthorized,
    UnexpectedAnswer,
    complete_entry,
    decode,
    journal_batches,
    merge_accepted,
    new_entry,
)
from episodic.settings import Settings
from schemas.api import (
    JournalAccepted,
    RecallRequest,
    RecallResponse,
    RenderRequest,
    RenderResponse,
    StatsResponse,
    WhoAmI,
)
from schemas.topics import JOURNAL_ENTRIES

T = TypeVar("T")

__all__ = [
    "AsyncMemoryClient", "ClientConfigError", "ClientError", "EntriesRejected", "Forbidden", "Identity",
    "InvalidRequest", "MemoryClient", "NotFound", "PayloadTooLarge", "RecallClientError", "RecallRefused",
    "RequestRefused", "RetryPolicy", "ServiceUnavailable", "ServiceUnreachable", "Unauthorized",
    "UnexpectedAnswer", "default_url",
]  # fmt: skip


def default_url() -> str:
    """EPISODIC_URL, else EPISODIC_RECALL_URL, else http://<EPISODIC_HTTP_HOST>:<EPISODIC_HTTP_PORT>."""
    return Settings().service_url


def _rejected(e: EntriesRejected) -> JournalAccepted:
    return JournalAccepted(accepted=0, ids=[], rejected=len(e.errors), errors=e.errors, topic=JOURNAL_ENTRIES)


class _Base:
    """Configuration shared by both clients."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | SecretStr | None = None,
        identity: Identity | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = (url or default_url()).rstrip("/")
        self.identity = identity or Identity()
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._set_token(token)
        self._owns_http = True

    def _set_token(self, token: str | SecretStr | None) -> None:
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        self._headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    @staticmethod
    def settings_kwargs(settings: Settings | None) -> dict[str, Any]:
        s = settings or Settings()
        return {
            "url": s.service_url,
            "token": s.token,
            "identity": Identity(workspace_id=s.workspace_id, agent_id=s.agent_id, crew_id=s.crew_id, role=s.role),
            "timeout": s.client_timeout_s,
            "retry": RetryPolicy(retries=s.client_retries),
        }

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: Any) -> Self:
        """A client configured by `Settings` (EPISODIC_URL, EPISODIC_TOKEN, EPISODIC_WORKSPACE_ID, ...)."""
        return cls(**{**cls.settings_kwargs(settings), **overrides})

    @property
    def calls(self) -> Calls:
        return Calls(self.identity)

    def _view(self, identity: Identity | None, token: str | SecretStr | None) -> Self:
        """A client over the same connection pool with another identity and/or token (not closing the pool)."""
        view = copy.copy(self)
        view._owns_http = False
        if identity is not None:
            view.identity = identity
        if token is not None:
            view._set_token(token)
        return view

    def _entry(self, summary: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        entry = new_entry(self.identity, summary, **fields)
        if "workspace_id" not in entry:
            self.identity.workspace()  # raises ClientConfigError naming the setting
        return entry

    def _entries(self, entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [complete_entry(self.identity, e) for e in entries]


class MemoryClient(_Base):
    """The synchronous client over one connection pool; use it as a context manager or call `close()`."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | SecretStr | None = None,
        identity: Identity | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token=token, identity=identity, timeout=timeout, retry=retry)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    def _send(self, call: Call[T]) -> T:
        for attempt in Retrying(**self.retry.tenacity_kwargs()):
            with attempt:
                try:
                    r = self._http.request(
                        call.method, call.path, json=call.json, params=call.params, headers=self._headers
                    )
                except httpx.TransportError as e:
                    raise ServiceUnreachable(self.url, e) from e
                return decode(call, r)
        raise AssertionError("unreachable")  # pragma: no cover - reraise=True

    def recall(self, query: str | RecallRequest, **fields: Any) -> RecallResponse:
        """`POST /v1/recall`: ranked hits for `query`, as this client's identity (fields override it)."""
        return self._send(self.calls.recall(query, fields))

    def render(self, query: str | RenderRequest, **fields: Any) -> RenderResponse:
        """`POST /v1/recall/render`: the `<recalled-memory>` block (`text`) and a pending `nudge` for `run_id`."""
        return self._send(self.calls.render(query, fields))

    def remember(self, summary: str, **fields: Any) -> str:
        """Write one journal entry (`POST /v1/journal`) as this identity; returns its id. Raises
        `EntriesRejected` (naming the field) when the service refuses it."""
        entry = self._entry(summary, fields)
        self._send(self.calls.journal([entry]))
        return str(entry["id"])

    def remember_many(self, entries: Iterable[Mapping[str, Any]]) -> JournalAccepted:
        """Write journal entries (ids, ts and identity filled in where missing); invalid ones come back in
        `errors` with their index; raises on 401/403/413/503 (after retries)."""
        parts: list[tuple[int, JournalAccepted]] = []
        for offset, batch in journal_batches(self._entries(entries)):
            try:
                parts.append((offset, self._send(self.calls.journal(batch))))
            except EntriesRejected as e:
                parts.append((offset, _rejected(e)))
        return merge_accepted(parts)

    def stats(self, workspace_id: str | None = None, *, all_workspaces: bool = False) -> StatsResponse:
        return self._send(self.calls.stats(workspace_id, all_workspaces))

    def health(self, workspace_id: str | None = None, crew_id: str | None = None) -> dict[str, Any]:
        """The latest memory-health snapshot; `NotFound` when none has been stored yet."""
        return self._send(self.calls.health(workspace_id, crew_id))

    def whoami(self) -> WhoAmI:
        return self._send(self.calls.whoami())

    def identify(self) -> MemoryClient:
        """A client whose identity has its gaps filled from the token (`GET /v1/whoami`)."""
        return self._view(self.identity.fill_from(self.whoami()), None)

    def acting_as(self, *, identity: Identity | None = None, token: str | SecretStr | None = None) -> MemoryClient:
        """The same pool, another identity or token (one MCP server serving many callers)."""
        return self._view(identity, token)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncMemoryClient(_Base):
    """The asyncio client: the same methods as `MemoryClient`, awaited; `async with` or `await aclose()`."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | SecretStr | None = None,
        identity: Identity | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token=token, identity=identity, timeout=timeout, retry=retry)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport)

    async def _send(self, call: Call[T]) -> T:
        async for attempt in AsyncRetrying(**self.retry.tenacity_kwargs()):
            with attempt:
                try:
                    r = await self._http.request(
                        call.method, call.path, json=call.json, params=call.params, headers=self._headers
                    )
                except httpx.TransportError as e:
                    raise ServiceUnreachable(self.url, e) from e
                return decode(call, r)
        raise AssertionError("unreachable")  # pragma: no cover - reraise=True

    async def recall(self, query: str | RecallRequest, **fields: Any) -> RecallResponse:
        return await self._send(self.calls.recall(query, fields))

    async def render(self, query: str | RenderRequest, **fields: Any) -> RenderResponse:
        return await self._send(self.calls.render(query, fields))

    async def remember(self, summary: str, **fields: Any) -> str:
        entry = self._entry(summary, fields)
        await self._send(self.calls.journal([entry]))
        return str(entry["id"])

    async def remember_many(self, entries: Iterable[Mapping[str, Any]]) -> JournalAccepted:
        parts: list[tuple[int, JournalAccepted]] = []
        for offset, batch in journal_batches(self._entries(entries)):
            try:
                parts.append((offset, await self._send(self.calls.journal(batch))))
            except EntriesRejected as e:
                parts.append((offset, _rejected(e)))
        return merge_accepted(parts)

    async def stats(self, workspace_id: str | None = None, *, all_workspaces: bool = False) -> StatsResponse:
        return await self._send(self.calls.stats(workspace_id, all_workspaces))

    async def health(self, workspace_id: str | None = None, crew_id: str | None = None) -> dict[str, Any]:
        return await self._send(self.calls.health(workspace_id, crew_id))

    async def whoami(self) -> WhoAmI:
        return await self._send(self.calls.whoami())

    async def identify(self) -> AsyncMemoryClient:
        return self._view(self.identity.fill_from(await self.whoami()), None)

    def acting_as(self, *, identity: Identity | None = None, token: str | SecretStr | None = None) -> AsyncMemoryClient:
        return self._view(identity, token)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
