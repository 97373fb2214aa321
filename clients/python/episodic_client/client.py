"""Typed HTTP clients of the memory service (SPEC §7, §11): `MemoryClient` and `AsyncMemoryClient`.

    from episodic_client import MemoryClient

    with MemoryClient.from_settings() as memory:   # EPISODIC_URL, EPISODIC_TOKEN, EPISODIC_WORKSPACE_ID, ...
        block = memory.render("what went wrong in checkout last time?", run_id=run).text
        ...                                        # the agent works, with `block` in its prompt
        memory.remember("Raised the checkout heap to 4 GiB; the OOMs stopped", run_id=run)

- Requests and answers are the API's pydantic models (`episodic_client.models`); bad arguments raise pydantic's
  `ValidationError` (it names the field) before anything is sent.
- Identity (workspace, agent, crew, role -> scope) comes from `Identity` (configuration), or from the token
  with `identify()` (`GET /v1/whoami`); keyword arguments override it per call.
- Timeouts per request; retries with exponential backoff and jitter (tenacity; the service's Retry-After
  when it gives one) on 503 and connection errors only, never on a 4xx. Writes are safe to retry: an
  entry is idempotent by (workspace_id, id).
- The memory lifecycle: `forget` (a selection), `delete` (one id), `forget_status`, `get` (one memory
  with its counters and relations) and `list` (every memory of a selection, newest first, following the
  pages' cursors; `list_page` for one page). A forget's HTTP timeout is its `wait` plus a margin.
- Errors are the client's own (`episodic_client.errors`): `ServiceUnreachable`, and `RequestRefused` with
  one subclass per status (`InvalidRequest`, `Unauthorized`, `Forbidden`, `NotFound`, `PayloadTooLarge`,
  `ServiceUnavailable`, `EntriesRejected`), carrying the service's `error` message.
- `remember_many` splits a batch to the service's bounds (entries and bytes) and merges the answers.

The two clients differ only in how they send; each public method is one line over `Calls`.
Size: over 400 lines because the two clients sit side by side, method for method, so they cannot drift.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import SecretStr
from tenacity import AsyncRetrying, Retrying

from episodic_client.calls import (
    DEFAULT_TIMEOUT_S,
    Call,
    Calls,
    Identity,
    RetryPolicy,
    Reviews,
    complete_entry,
    decode,
    journal_batches,
    merge_accepted,
    new_entry,
)
from episodic_client.errors import (
    EntriesRejected,
    ServiceUnreachable,
)
from episodic_client.models import (
    DEFAULT_FORGET_WAIT_S,
    DEFAULT_PAGE,
    JOURNAL_TOPIC,
    ForgetResponse,
    JournalAccepted,
    MemoryDetail,
    MemoryItem,
    MemoryPage,
    RecallRequest,
    RecallResponse,
    RenderRequest,
    RenderResponse,
    ReviewAccepted,
    StatsResponse,
    WhoAmI,
)
from episodic_client.settings import ClientSettings

T = TypeVar("T")

__all__ = ["AsyncMemoryClient", "MemoryClient", "default_url"]  # the package re-exports them, and the errors


def default_url() -> str:
    """EPISODIC_URL, else EPISODIC_RECALL_URL, else http://<EPISODIC_HTTP_HOST>:<EPISODIC_HTTP_PORT>."""
    return ClientSettings.from_env().service_url


def _rejected(e: EntriesRejected) -> JournalAccepted:
    return JournalAccepted(accepted=0, ids=[], rejected=len(e.errors), errors=e.errors, topic=JOURNAL_TOPIC)


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
    def settings_kwargs(settings: ClientSettings | None) -> dict[str, Any]:
        s = settings or ClientSettings.from_env()
        return {
            "url": s.service_url,
            "token": s.token,
            "identity": Identity(workspace_id=s.workspace_id, agent_id=s.agent_id, crew_id=s.crew_id, role=s.role),
            "timeout": s.client_timeout_s,
            "retry": RetryPolicy(retries=s.client_retries),
        }

    @classmethod
    def from_settings(cls, settings: ClientSettings | None = None, **overrides: Any) -> Self:
        """A client configured by `settings` (default: `ClientSettings.from_env()`: EPISODIC_URL, EPISODIC_TOKEN,
        EPISODIC_WORKSPACE_ID, ...; the engine's `Settings` is one too)."""
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

    def _listing(
        self,
        agent_id: str | None,
        run_id: str | None,
        crew_id: str | None,
        entry_types: Iterable[str] | None,
        workspace_id: str | None,
        page_size: int,
    ) -> tuple[dict[str, Any], Call[MemoryPage]]:
        """A listing's selection and its first page's call (built at once: bad arguments raise before any
        page is asked for)."""
        selection = {"agent_id": agent_id, "run_id": run_id, "crew_id": crew_id, "workspace_id": workspace_id,
                     "entry_types": builtins.list(entry_types or ())}  # fmt: skip
        return selection, self.calls.memories(selection, None, page_size)

    @staticmethod
    def _selector(
        entry_ids: Iterable[str] | None, agent_id: str | None, run_id: str | None, all: bool
    ) -> dict[str, Any]:
        """A forget's selection (`episodic_client.models.ForgetRequest` checks it: one of entry_ids, agent_id, run_id,
        all; agent_id may narrow entry_ids or run_id)."""
        ids = None if entry_ids is None else [entry_ids] if isinstance(entry_ids, str) else builtins.list(entry_ids)
        fields = {"entry_ids": ids, "agent_id": agent_id, "run_id": run_id, "all": all}
        return {k: v for k, v in fields.items() if v is not None and v is not False}


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
                        call.method, call.path, json=call.json, params=call.params, headers=self._headers,
                        timeout=call.timeout_s(self.timeout),
                    )  # fmt: skip
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

    def health(
        self, workspace_id: str | None = None, crew_id: str | None = None, *, days: int | None = None
    ) -> dict[str, Any]:
        """`GET /v1/memory/health`: the latest stored snapshot (with `days`, its daily history too); `NotFound`
        when none has been stored yet."""
        return self._send(self.calls.health(workspace_id, crew_id, days))

    def run_health(self, workspace_id: str | None = None) -> dict[str, Any]:
        """`POST /v1/admin/run/health`: compute and store snapshots now (an admin token when auth is on)."""
        return self._send(self.calls.run_health(workspace_id))

    def whoami(self) -> WhoAmI:
        return self._send(self.calls.whoami())

    def identify(self) -> MemoryClient:
        """A client whose identity has its gaps filled from the token (`GET /v1/whoami`)."""
        return self._view(self.identity.fill_from(self.whoami()), None)

    def acting_as(self, *, identity: Identity | None = None, token: str | SecretStr | None = None) -> MemoryClient:
        """The same pool, another identity or token (one MCP server serving many callers)."""
        return self._view(identity, token)

    # -- the memory lifecycle (SPEC §11) ---------------------------------------------------------------------
    def forget(
        self,
        entry_ids: Iterable[str] | None = None,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        all: bool = False,
        workspace_id: str | None = None,
        wait: float = DEFAULT_FORGET_WAIT_S,
    ) -> ForgetResponse:
        """`POST /v1/memory/forget`: forget `entry_ids` (an alias takes its whole memory), every memory of
        `agent_id` or of `run_id` (`agent_id` with either: only that agent's among them), or `all=True` (the
        workspace). Waits up to `wait` seconds for it to be applied: `status` is `applied` (with `removed`)
        or `pending` (poll `forget_status`)."""
        selector = self._selector(entry_ids, agent_id, run_id, all)
        return self._send(self.calls.forget(selector, workspace_id, wait))

    def delete(
        self, entry_id: str, *, workspace_id: str | None = None, wait: float = DEFAULT_FORGET_WAIT_S
    ) -> ForgetResponse:
        """`DELETE /v1/memory/{entry_id}`: forget one memory, as `forget([entry_id])`."""
        return self._send(self.calls.delete(entry_id, workspace_id, wait))

    def forget_status(self, forget_id: str, *, workspace_id: str | None = None) -> ForgetResponse:
        """Where a forget stands (`pending`, `applied` with what it removed, `failed`)."""
        return self._send(self.calls.forget_status(forget_id, workspace_id))

    def get(self, entry_id: str, *, workspace_id: str | None = None) -> MemoryDetail:
        """One memory (an alias id resolves to it) with its counters, aliases and relations; `NotFound`
        when there is none, or it was forgotten (the message names the forget)."""
        return self._send(self.calls.get(entry_id, workspace_id))

    def review(self, reviews: Reviews, *, run_id: str | None = None, workspace_id: str | None = None) -> ReviewAccepted:
        """`POST /v1/memory/review`: say how the memories you were given served, as the configured agent:
        `{entry_id: rating}` (or (entry_id, rating) pairs), rating `again` (no help, or misleading), `hard`,
        `good` or `easy`; up to 100. Returns once the broker has them (`ignored`: ids of no memory you may see);
        `NotFound` when none is. With EPISODIC_REVIEW_RANKING on, they drive ranking (docs/maintenance.md)."""
        return self._send(self.calls.review(reviews, workspace_id, run_id))

    def list_page(self, *, cursor: str | None = None, limit: int = DEFAULT_PAGE, **selection: Any) -> MemoryPage:
        """One page of `list` (pass the previous page's `next_cursor`)."""
        return self._send(self.calls.memories(selection, cursor, limit))

    def list(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        crew_id: str | None = None,
        entry_types: Iterable[str] | None = None,
        workspace_id: str | None = None,
        page_size: int = DEFAULT_PAGE,
    ) -> Iterator[MemoryItem]:
        """Every memory of the selection, newest first, a page of `page_size` per request (a bound token
        sees its agent's, a lead's its crew's). Bad arguments raise here, before the first page."""
        selection, first = self._listing(agent_id, run_id, crew_id, entry_types, workspace_id, page_size)

        def pages() -> Iterator[MemoryItem]:
            page = self._send(first)
            while True:
                yield from page.memories
                if page.next_cursor is None:
                    return
                page = self._send(self.calls.memories(selection, page.next_cursor, page_size))

        return pages()

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
                        call.method, call.path, json=call.json, params=call.params, headers=self._headers,
                        timeout=call.timeout_s(self.timeout),
                    )  # fmt: skip
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

    async def health(
        self, workspace_id: str | None = None, crew_id: str | None = None, *, days: int | None = None
    ) -> dict[str, Any]:
        return await self._send(self.calls.health(workspace_id, crew_id, days))

    async def run_health(self, workspace_id: str | None = None) -> dict[str, Any]:
        return await self._send(self.calls.run_health(workspace_id))

    async def whoami(self) -> WhoAmI:
        return await self._send(self.calls.whoami())

    async def identify(self) -> AsyncMemoryClient:
        return self._view(self.identity.fill_from(await self.whoami()), None)

    def acting_as(self, *, identity: Identity | None = None, token: str | SecretStr | None = None) -> AsyncMemoryClient:
        return self._view(identity, token)

    async def forget(
        self,
        entry_ids: Iterable[str] | None = None,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        all: bool = False,
        workspace_id: str | None = None,
        wait: float = DEFAULT_FORGET_WAIT_S,
    ) -> ForgetResponse:
        selector = self._selector(entry_ids, agent_id, run_id, all)
        return await self._send(self.calls.forget(selector, workspace_id, wait))

    async def delete(
        self, entry_id: str, *, workspace_id: str | None = None, wait: float = DEFAULT_FORGET_WAIT_S
    ) -> ForgetResponse:
        return await self._send(self.calls.delete(entry_id, workspace_id, wait))

    async def forget_status(self, forget_id: str, *, workspace_id: str | None = None) -> ForgetResponse:
        return await self._send(self.calls.forget_status(forget_id, workspace_id))

    async def get(self, entry_id: str, *, workspace_id: str | None = None) -> MemoryDetail:
        return await self._send(self.calls.get(entry_id, workspace_id))

    async def review(
        self, reviews: Reviews, *, run_id: str | None = None, workspace_id: str | None = None
    ) -> ReviewAccepted:
        return await self._send(self.calls.review(reviews, workspace_id, run_id))

    async def list_page(self, *, cursor: str | None = None, limit: int = DEFAULT_PAGE, **selection: Any) -> MemoryPage:
        return await self._send(self.calls.memories(selection, cursor, limit))

    def list(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        crew_id: str | None = None,
        entry_types: Iterable[str] | None = None,
        workspace_id: str | None = None,
        page_size: int = DEFAULT_PAGE,
    ) -> AsyncIterator[MemoryItem]:
        """`async for memory in client.list(...)`: as `MemoryClient.list`."""
        selection, first = self._listing(agent_id, run_id, crew_id, entry_types, workspace_id, page_size)

        async def pages() -> AsyncIterator[MemoryItem]:
            page = await self._send(first)
            while True:
                for item in page.memories:
                    yield item
                if page.next_cursor is None:
                    return
                page = await self._send(self.calls.memories(selection, page.next_cursor, page_size))

        return pages()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
