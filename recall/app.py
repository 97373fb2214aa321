"""`create_app`: the recall HTTP service (SPEC §7) over injected IO handles.

Wiring (see stack/roles.py): `publish(topic, key, value)` must not block and may be called from the
event-loop thread; `status()` returns at least {"kafka": "ok"|..., "kafka_bootstrap": "host:port"};
`metrics` is the process's `Metrics` (its registry is what /metrics exposes); `state` (the state store)
and `forget_sink` (produces a forget, acks=all) serve the memory lifecycle (recall/memories.py; without
them a forget is 503); `produce(topic, records)` (optional) sends records and completes once the broker
acknowledged them all (`POST /v1/journal`). The tokens file named by `settings.tokens_file` is loaded here
(a bad file fails start-up). When `settings.http_host` is beyond loopback and no tokens file is
configured, `create_app` refuses (InsecureBind) unless `insecure=True`.

Error bodies: every 4xx/5xx answer is JSON with `error`, a one-line message naming the field when
there is one (validation: 422 {"detail": [...], "error": "<field>: <message>"}); store failures are
503 with a generic message and a reference (the error itself is logged, never echoed), authentication
401 (with `WWW-Authenticate: Bearer`), authorization 403. Bodies above `MAX_BODY_BYTES` are refused with
413: by Content-Length before they are read, and chunked ones as soon as they pass the limit.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from episodic.embedding.cores import CoreBudget
from episodic.embedding.generations import ModelSwitch
from episodic.kernel.auth import AuthError, load_tokens
from episodic.kernel.errors import EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import Embedder, MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.health_job import HealthJob
from episodic.retrieval.engine import RecallEngine
from episodic.store.sparse import Bm25Encoder
from episodic_client.settings import is_loopback
from recall import journal, memories, reviews, whoami
from recall.admin import router as admin_router
from recall.deps import ForgetSink, Job, NudgeLookup, Produce, Publish, Services, Status
from recall.health import router as health_router
from recall.routes import router
from recall.ui import install as install_ui

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
        "every workspace. Set EPISODIC_TOKENS_FILE (see episodic/kernel/auth.py for the format), bind to "
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
    if not isinstance(exc, RequestValidationError):  # registered for that class only
        raise exc
    detail = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    first = exc.errors()[0] if exc.errors() else {}
    error = f"{_field(first)}: {_message(first)}" if first else "invalid request"
    if request.url.path == reviews.PATH:  # refused reviews are counted by reason (recall/reviews.py)
        services = getattr(request.app.state, "services", None)
        if services is not None:
            services.metrics.reviews_refused.labels(reason="invalid").inc()
    return JSONResponse(status_code=422, content={"detail": detail, "error": error})


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message}, headers=headers)


def _too_large(limit: int, path: str) -> str:
    # A batch endpoint's caller can do something about it: say what.
    hint = "; split the batch" if path.endswith("/journal") else ""
    return f"body: larger than {limit} bytes{hint}"


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, path: str = "") -> None:
        super().__init__(status_code=413, detail=_too_large(limit, path))


class Foreground:
    """Holds the core budget's foreground claim while a recall request runs: bulk embedding in this process
    gives a core back until it is answered (episodic.embedding.cores)."""

    def __init__(self, app: ASGIApp, cores: CoreBudget) -> None:
        self.app = app
        self.cores = cores

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(("/v1/recall", "/ui/search")):
            with self.cores.foreground():
                await self.app(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def host_name(host: str) -> str:
    """The name in a Host header, without its port: 'localhost:8080' -> 'localhost', '[::1]:80' -> '::1'."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.split(":", 1)[0]


class LoopbackNamesOnly:
    """Answer only requests addressed to a loopback name (Host: localhost, 127.x.y.z, [::1]) with 421.

    Without a tokens file every caller is admin and the service binds loopback only, so what keeps another
    tenant of the machine's browser out is the bind; a web page can still reach it through DNS rebinding (its
    own name resolved to 127.0.0.1), and such a request carries the page's name in Host. The stack installs
    this when it serves without tokens on loopback; with tokens, a token decides and a rebinding page has
    none (the explorer's cookie belongs to the loopback name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
            if not is_loopback(host_name(host)):
                shown = host[:64].encode("ascii", "replace").decode()
                resp = _error(
                    421,
                    f"Host {shown!r} is not a loopback name: without a tokens file this service answers "
                    "requests to localhost, 127.0.0.1 or [::1] only",
                )
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies larger than `limit` bytes with 413: by Content-Length before reading them, and
    for a body without one (chunked transfer encoding) as soon as the bytes read pass the limit."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    resp = _error(413, _too_large(self.limit, scope.get("path", "")))
                    await resp(scope, receive, send)
                    return
                break
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # Raised inside the app's body read: FastAPI passes its HTTPException through to the
                    # app's handler (any other exception there would become a 400).
                    raise BodyTooLarge(self.limit, scope.get("path", ""))
            return message

        await self.app(scope, counted, send)


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
    state: StateStore | None = None,
    forget_sink: ForgetSink | None = None,
    jobs: Mapping[str, Job] | None = None,
    clock: Callable[[], datetime] | None = None,
    produce: Produce | None = None,
    health: HealthJob | None = None,
    insecure: bool = False,
    switch: ModelSwitch | None = None,
    cores: CoreBudget | None = None,
    loopback_names_only: bool = False,
) -> FastAPI:
    """The recall service. Raises AuthConfigError for a bad tokens file, InsecureBind (see module doc).
    `loopback_names_only` (the stack sets it when it serves on loopback without tokens): requests addressed to
    another name are refused (LoopbackNamesOnly)."""
    tokens = load_tokens(settings.tokens_file)
    check_bind(settings.http_host, tokens_configured=tokens is not None, insecure=insecure)
    if tokens is None:
        log.info("recall service: no tokens file, open to every caller that can reach %s", settings.http_host)
    engine = RecallEngine.from_settings(settings, store=store, embedder=embedder, bm25=bm25, switch=switch)
    if clock is not None:  # a controllable clock (tests): ages and memory.referenced `at`
        engine.clock = clock

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
        state=state,
        forget_sink=forget_sink,
        jobs=dict(jobs or {}),
        produce=produce,
        health=health,
        recall_slots=asyncio.Semaphore(settings.recall_concurrency) if settings.recall_concurrency else None,
    )

    async def auth_error(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, AuthError):  # registered for that class only
            raise exc
        metrics.auth_failures.labels(reason=exc.reason).inc()
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.message, headers)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        # The detail stays in the log (it may name hosts, paths or stored data); the body carries a
        # reference to find it there.
        ref = uuid.uuid4().hex[:12]
        log.warning("store failure %s on %s: %s: %s", ref, request.url.path, type(exc).__name__, exc)
        return _error(503, f"memory store unavailable (ref {ref}: see the service log)")

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, StarletteHTTPException):  # registered for that class only
            raise exc
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(AuthError, auth_error)
    app.add_exception_handler(EpisodicError, store_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.include_router(router)
    app.include_router(admin_router)
    app.include_router(journal.router)
    app.include_router(whoami.router)
    app.include_router(health_router)
    app.include_router(reviews.router)
    app.include_router(memories.router)  # after /v1/memory/stats and /health: it takes any other id below
    install_ui(app, tokens)  # the memory explorer at /ui (recall/ui), behind the same tokens
    app.add_middleware(BodyLimit)
    if loopback_names_only and tokens is None:
        app.add_middleware(LoopbackNamesOnly)
    if cores is not None:  # a recall in flight claims a core back from bulk embedding (episodic.embedding.cores)
        app.add_middleware(Foreground, cores=cores)
    return app
