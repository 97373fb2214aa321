"""`create_app`: the recall HTTP service (SPEC §7) over injected IO handles.

Wiring (see stack/roles.py): `publish(topic, key, value)` must not block and may be called from the
event-loop thread; `status()` returns at least {"kafka": "ok"|..., "kafka_bootstrap": "host:port"};
`metrics` is the process's `Metrics` (its registry is what /metrics exposes). The tokens file named by
`settings.tokens_file` is loaded here (a bad file fails start-up). When `settings.http_host` is beyond
loopback and no tokens file is configured, `create_app` refuses (InsecureBind) unless `insecure=True`.

Error bodies: every 4xx/5xx answer is JSON with `error`, a one-line message naming the field when
there is one (validation: 422 {"detail": [...], "error": "<field>: <message>"}); store failures are
503, authentication 401 (with `WWW-Authenticate: Bearer`), authorization 403. Bodies above
`MAX_BODY_BYTES` are refused with 413 before they are read.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from episodic.auth import AuthError, is_loopback, load_tokens
from episodic.errors import EpisodicError
from episodic.health_job import HealthJob
from episodic.metrics import Metrics
from episodic.ports import Embedder, MemoryStore
from episodic.recall import RecallEngine
from episodic.settings import Settings
from episodic.sparse import Bm25Encoder
from recall.deps import NudgeLookup, Publish, Services, Status
from recall.health import router as health_router
from recall.routes import router

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20


class InsecureBind(EpisodicError):
    """Refusing to serve beyond loopback without bearer tokens."""


def check_bind(host: str, *, tokens_configured: bool, insecure: bool) -> None:
    """Raise InsecureBind when serving beyond loopback without tokens and without --insecure."""
    if tokens_configured or insecure or is_loopback(host):
        return
    raise InsecureBind(
        f"refusing to serve recall on {host!r} without bearer tokens: anyone who can reach it could read "
        "every workspace. Set EPISODIC_TOKENS_FILE (see episodic/auth.py for the format), bind to "
        "127.0.0.1, or pass --insecure if the network is trusted."
    )


def _field(err: dict[str, Any]) -> str:
    """The field an error is about: its location without the leading "body"/"query"/... part."""
    loc = list(err.get("loc") or ())
    if err.get("type") == "json_invalid":
        return "body"
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]
    return ".".join(str(p) for p in loc) or "body"


def _message(err: dict[str, Any]) -> str:
    if err.get("type") == "json_invalid":
        return "not valid JSON" + (f" ({err['ctx']['error']})" if isinstance(err.get("ctx"), dict) else "")
    msg = str(err.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    detail = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    first = exc.errors()[0] if exc.errors() else {}
    error = f"{_field(first)}: {_message(first)}" if first else "invalid request"
    return JSONResponse(status_code=422, content={"detail": detail, "error": error})


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message}, headers=headers)


class BodyLimit:
    """Refuse request bodies larger than `limit` bytes (by Content-Length) with 413, before reading them."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for k, v in scope.get("headers", ()):
                if k == b"content-length":
                    try:
                        too_big = int(v) > self.limit
                    except ValueError:
                        too_big = False
                    if too_big:
                        resp = _error(413, f"body: larger than {self.limit} bytes")
                        await resp(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)


def create_app(
    *,
    settings: Settings,
    store: MemoryStore,
    embedder: Embedder | None,
    bm25: Bm25Encoder,
    publish: Publish,
    status: Status,
    metrics: Metrics,
    nudges: NudgeLookup | None = None,
    health: HealthJob | None = None,
    insecure: bool = False,
) -> FastAPI:
    """The recall service. Raises AuthConfigError for a bad tokens file, InsecureBind (see module doc)."""
    tokens = load_tokens(settings.tokens_file)
    check_bind(settings.http_host, tokens_configured=tokens is not None, insecure=insecure)
    if tokens is None:
        log.info("recall service: no tokens file, open to every caller that can reach %s", settings.http_host)
    engine = RecallEngine.from_settings(settings, store=store, embedder=embedder, bm25=bm25)

    app = FastAPI(
        title="episodic recall",
        version="1",
        description=(
            "Recall over the episodic memory of an agent fleet (SPEC §7). Authenticate with "
            "`Authorization: Bearer <token>` when the service has a tokens file; /healthz, /metrics and "
            "this document are open."
        ),
    )
    app.state.services = Services(
        settings=settings,
        store=store,
        engine=engine,
        publish=publish,
        status=status,
        metrics=metrics,
        tokens=tokens,
        nudges=nudges,
        health=health,
    )

    async def auth_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AuthError)
        metrics.auth_failures.labels(reason=exc.reason).inc()
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.message, headers)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store failure on %s: %s", request.url.path, exc)
        return _error(503, f"memory store unavailable: {exc}")

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(AuthError, auth_error)
    app.add_exception_handler(EpisodicError, store_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.include_router(router)
    app.include_router(health_router)
    app.add_middleware(BodyLimit)
    return app
