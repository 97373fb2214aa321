"""The memory clients' errors (`episodic_client` re-exports them): `ServiceUnreachable`, and `RequestRefused`
with one subclass per status, carrying the service's `error` message (it names the field)."""

from __future__ import annotations

from typing import Any

from episodic_client.models import EntryError


class ClientError(Exception):
    """Base class of the memory client's errors. Its own base, not the engine's `EpisodicError`: the client
    installs without the engine, and no engine handler catches a client's error."""


class ClientConfigError(ClientError, ValueError):
    """The client lacks something it needs (a workspace, say) and cannot get it from its token."""


class ServiceUnreachable(ClientError):
    """No answer from the service at `url` (connection refused, DNS, timeout) after the retries."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url


class RequestRefused(ClientError):
    """The service answered with an error status; `message` is its `error` (it names the field)."""

    def __init__(self, status_code: int, message: object, body: Any = None, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.body = body
        self.retry_after = retry_after


class InvalidRequest(RequestRefused):
    """400/422: the request (or every entry of a journal batch) is invalid."""


class Unauthorized(RequestRefused):
    """401: missing, malformed or unknown token."""


class Forbidden(RequestRefused):
    """403: the token may not do this (another workspace, agent, crew or a wider scope)."""


class NotFound(RequestRefused):
    """404: nothing there (no health snapshot yet, an unknown memory)."""


class PayloadTooLarge(RequestRefused):
    """413: the body is over the service's bound."""


class ServiceUnavailable(RequestRefused):
    """503 after the retries: the store or the broker is down; nothing was claimed."""


class EntriesRejected(InvalidRequest):
    """422 from `POST /v1/journal`: no entry was valid. `errors` say which field of which entry."""

    def __init__(self, status_code: int, message: object, body: Any = None, retry_after: float | None = None) -> None:
        super().__init__(status_code, message, body, retry_after)
        raw = body.get("errors") if isinstance(body, dict) else None
        self.errors = [EntryError.model_validate(e) for e in raw or []]


class UnexpectedAnswer(ClientError):
    """A 2xx whose body is not what the API promises (a proxy's page, another service)."""


BY_STATUS: dict[int, type[RequestRefused]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 413: PayloadTooLarge,
    422: InvalidRequest, 503: ServiceUnavailable,
}  # fmt: skip

# the names of the first client (kept for callers of `RecallClient`'s errors)
RecallClientError = ClientError
RecallRefused = RequestRefused
