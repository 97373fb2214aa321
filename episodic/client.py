"""HTTP client of the recall service (SPEC §7), for agents and for `episodic recall`.

    with RecallClient(token=os.environ.get("EPISODIC_TOKEN")) as client:   # URL: default_url()
        hits = client.recall({"workspace_id": "acme", "agent_id": "planner", "query": "checkout OOM"})["hits"]
        block = client.render({"workspace_id": "acme", "agent_id": "planner", "query": "deploy"})["text"]

The body is sent as given: the service validates it, and a 422 names the field. Errors are the core's
own: `ServiceUnreachable` (no answer at the URL), `RecallRefused` (a 4xx/5xx, or an answer that is not a
JSON object), with the service's `error` message. Imports httpx and the core's errors only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from episodic.errors import EpisodicError

DEFAULT_TIMEOUT_S = 10.0


class RecallClientError(EpisodicError):
    """Base class of the client's errors."""


class ServiceUnreachable(RecallClientError):
    """No answer from the recall service at `url`."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url


class RecallRefused(RecallClientError):
    """The service answered with an error status (or with something that is not a JSON object)."""

    def __init__(self, status_code: int, message: object) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


def default_url() -> str:
    """EPISODIC_RECALL_URL, else http://<EPISODIC_HTTP_HOST>:<EPISODIC_HTTP_PORT> (a wildcard host: loopback)."""
    env = os.environ.get("EPISODIC_RECALL_URL")
    if env:
        return env.rstrip("/")
    host = os.environ.get("EPISODIC_HTTP_HOST", "127.0.0.1")
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    port = os.environ.get("EPISODIC_HTTP_PORT", "8080")
    return f"http://{host}:{port}"


class RecallClient:
    """A synchronous client over one connection pool; use it as a context manager or call `close()`."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or default_url()).rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers, transport=transport)

    def recall(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /v1/recall`: ranked hits (`hits`, `degraded`, ...)."""
        return self._post("/v1/recall", body)

    def render(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /v1/recall/render`: the prompt-ready `<recalled-memory>` block in `text`."""
        return self._post("/v1/recall/render", body)

    def health(self, workspace_id: str, crew_id: str | None = None, *, days: int | None = None) -> dict[str, Any]:
        """`GET /v1/memory/health`: the latest stored snapshot (with `days`, its daily history too)."""
        params: dict[str, Any] = {"workspace_id": workspace_id}
        if crew_id is not None:
            params["crew_id"] = crew_id
        if days is not None:
            params["days"] = days
        return self._send("GET", "/v1/memory/health", params=params)

    def run_health(self, workspace_id: str | None = None) -> dict[str, Any]:
        """`POST /v1/admin/run/health`: compute and store snapshots now (an admin token when auth is on)."""
        params = {"workspace_id": workspace_id} if workspace_id is not None else {}
        return self._send("POST", "/v1/admin/run/health", params=params)

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._send("POST", path, json=dict(body))

    def _send(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ServiceUnreachable(self.url, e) from e
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code >= 400:
            message = data.get("error") if isinstance(data, dict) else None
            raise RecallRefused(r.status_code, message or (r.text[:500] if data is None else data))
        if not isinstance(data, dict):
            raise RecallRefused(r.status_code, f"not a JSON object: {r.text[:500]}")
        return data

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RecallClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
