"""The roles a Stack can run, in one table: what each needs from the stack, how it starts and drains.

A role is one stage of the pipeline in this process: the gate (Faust, `streams/`), the embedding
consumer (aiokafka, `consumers/`), the recall HTTP service (FastAPI, `recall/`). The Stack opens the
shared resources once (producer, store, model) and hands them to every role as `Resources`; it starts
the roles in the table's order and drains them by `drain_rank`, so that the stage taking input stops
first and the stages after it finish what is in flight.

Adding a role (the linker, importance, health and nudge agents) is one `Role` subclass here and one
entry in `ROLES`; the Stack does not change. Each role imports its package lazily in `start`, so a
process that runs only `serve` never imports Faust.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from episodic.bus import dumps, send_forget
from episodic.errors import EpisodicError
from episodic.metrics import Metrics
from episodic.settings import Settings

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from consumers.embedding import EmbeddingConsumer
    from episodic.ports import Embedder, MemoryStore, StateStore
    from episodic.sparse import Bm25Encoder
    from streams.runner import GateRunner

log = logging.getLogger("episodic")

GATE_DRAIN_S = 30.0  # the gate's batch in flight, its commit and leaving the group
CONSUMER_DRAIN_S = 60.0  # the embedding batch in flight: embed, upsert, memory.indexed, commit
HTTP_DRAIN_S = 30.0  # requests in flight
HTTP_START_S = 15.0


@dataclass(frozen=True)
class Resources:
    """What the Stack opens once and lends to its roles (IO handles, passed in explicitly)."""

    settings: Settings
    metrics: Metrics
    producer: AIOKafkaProducer
    status: Callable[[], dict[str, Any]]  # the Stack's view of Kafka, for /healthz
    fail: Callable[[int], None]  # stop the whole stack with this exit status (a role's own task died)
    insecure: bool = False
    store: MemoryStore | None = None  # opened when a role in this process `needs_store`
    state: StateStore | None = None  # beside the store (episodic.ports.StateStore), opened with it
    embedder: Embedder | None = None  # None: sparse-only (no model, or EPISODIC_EMBED_MODEL=none)
    bm25: Bm25Encoder | None = None

    def need_store(self, role: str) -> tuple[MemoryStore, Bm25Encoder]:
        if self.store is None or self.bm25 is None:
            raise EpisodicError(f"role {role!r} needs the store, and the stack did not open it")
        return self.store, self.bm25


async def finish(task: asyncio.Task[Any] | None, timeout: float) -> None:
    """Let a role's task end by itself within `timeout` seconds, then cancel it; never raises."""
    if task is None:
        return
    _done, pending = await asyncio.wait([task], timeout=timeout)
    for t in pending:
        t.cancel()
    await asyncio.gather(task, return_exceptions=True)


class Role(ABC):
    """One stage of the pipeline run by the Stack. Subclasses set the class attributes and implement
    `start` and `drain`; `crash` and `describe` are optional."""

    name: ClassVar[str]
    drain_rank: ClassVar[int]  # lower drains first: the stage that takes input before those after it
    needs_store: ClassVar[bool] = False  # the Stack opens the store, the model and BM25 for it
    embeds_documents: ClassVar[bool] = False  # runs the model over journal entries (ingestion threads)
    answers_queries: ClassVar[bool] = False  # runs the model over recall queries (the ONNX query encoder)
    serves_http: ClassVar[bool] = False  # serves /metrics itself; otherwise the Stack starts a bare one
    crash_exit: ClassVar[int] = 1  # exit status when `crash()` reports a failure

    http_port: int | None = None  # the port it bound, for roles that serve HTTP

    @abstractmethod
    async def start(self, res: Resources) -> None:
        """Start in the running loop; raise (an EpisodicError, say) when it cannot."""

    @abstractmethod
    async def drain(self) -> None:
        """Stop taking input, finish and commit what is in flight. Must tolerate a half-finished start."""

    def crash(self) -> str | None:
        """Why the role died, polled by the Stack's watchdog; None while it is healthy."""
        return None

    def describe(self) -> str | None:
        """A line for the start-up summary, or None."""
        return None


class GateRole(Role):
    """journal.entries -> journal.embeddable | journal.dlq (the Faust gate in `streams/`)."""

    name = "gate"
    drain_rank = 0
    crash_exit = 4

    def __init__(self) -> None:
        self.runner: GateRunner | None = None

    async def start(self, res: Resources) -> None:
        from streams.runner import GateRunner

        self.runner = GateRunner(settings=res.settings, metrics=res.metrics)
        await self.runner.start()

    async def drain(self) -> None:
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.runner.stop(), GATE_DRAIN_S)

    def crash(self) -> str | None:
        if self.runner is not None and self.runner.crashed:
            return str(self.runner.crash_reason)
        return None


class EmbedderRole(Role):
    """journal.embeddable -> model -> store -> memory.indexed (the consumer in `consumers/`); it also adds
    the dense vectors that are missing (deferred ones, and the backfill after sparse-only mode)."""

    name = "embedder"
    drain_rank = 1
    needs_store = True
    embeds_documents = True

    def __init__(self) -> None:
        self.consumer: EmbeddingConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._model = "none"
        self._mode = "sparse-only"

    async def start(self, res: Resources) -> None:
        from consumers.embedding import EmbeddingConsumer
        from episodic.forget import Forgetter
        from episodic.indexer import Indexer

        store, bm25 = res.need_store(self.name)
        if res.state is None:
            raise EpisodicError("the embedder needs the state store (forget tombstones), and the stack did not open it")
        self._model = getattr(res.embedder, "model_id", "none")
        self._mode = "vector" if res.embedder is not None else "sparse-only"
        indexer = Indexer(store=store, embedder=res.embedder, bm25=bm25, context=res.settings.context)
        self.consumer = EmbeddingConsumer(
            settings=res.settings,
            indexer=indexer,
            producer=res.producer,
            metrics=res.metrics,
            forgetter=Forgetter(store=store, state=res.state, bm25=bm25),
        )
        self._task = asyncio.create_task(self._run(self.consumer, res.fail), name="embedding-consumer")

    @staticmethod
    async def _run(consumer: EmbeddingConsumer, fail: Callable[[int], None]) -> None:
        try:
            await consumer.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("embedding consumer failed: %s", e)
            fail(1)

    async def drain(self) -> None:
        if self.consumer is not None:
            self.consumer.request_stop()
        await finish(self._task, CONSUMER_DRAIN_S)

    def describe(self) -> str | None:
        return f"embedder: {self._model} ({self._mode})" if self.consumer is not None else None


class Publisher:
    """Fire-and-forget JSON publishing from any thread (the HTTP handlers run in a thread pool)."""

    def __init__(self, producer: Any, loop: asyncio.AbstractEventLoop, metrics: Metrics) -> None:
        self._producer = producer
        self._loop = loop
        self._metrics = metrics
        self._in_flight: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    def __call__(self, topic: str, key: str | None, value: dict[str, Any]) -> None:
        coro = self._send(topic, key, value)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            task = self._loop.create_task(coro)
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        else:
            asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _send(self, topic: str, key: str | None, value: dict[str, Any]) -> None:
        try:
            await self._producer.send(topic, key=key.encode() if key else None, value=dumps(value))
        except Exception as e:
            self._metrics.consumer_errors.labels(stage="publish").inc()
            log.warning("could not publish to %s: %s", topic, e)


class HttpRole(Role):
    """The recall HTTP service (the FastAPI app in `recall/`) under uvicorn, in this loop."""

    name = "http"
    drain_rank = 2
    needs_store = True
    answers_queries = True
    serves_http = True

    def __init__(self) -> None:
        self.server: Any = None  # uvicorn.Server
        self._task: asyncio.Task[None] | None = None
        self._host = ""

    async def start(self, res: Resources) -> None:
        import uvicorn

        from recall.app import create_app

        store, bm25 = res.need_store(self.name)
        s = res.settings
        app = create_app(
            settings=s,
            store=store,
            embedder=res.embedder,
            bm25=bm25,
            publish=Publisher(res.producer, asyncio.get_running_loop(), res.metrics),
            state=res.state,
            forget_sink=functools.partial(send_forget, res.producer),
            status=res.status,
            metrics=res.metrics,
            insecure=res.insecure,
        )
        config = uvicorn.Config(
            app, host=s.http_host, port=s.http_port, log_level="warning", access_log=False, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # the Stack owns SIGINT/SIGTERM
        self._host = s.http_host
        self._task = asyncio.create_task(self._serve(), name="http")
        deadline = time.monotonic() + HTTP_START_S
        while not self.server.started and time.monotonic() < deadline and not self._task.done():
            await asyncio.sleep(0.05)
        if not self.server.started:
            raise EpisodicError(f"recall service did not start on {s.http_host}:{s.http_port}")
        sockets = [sock for srv in (self.server.servers or []) for sock in srv.sockets]
        self.http_port = sockets[0].getsockname()[1] if sockets else s.http_port

    async def _serve(self) -> None:
        try:
            await self.server.serve()
        except SystemExit as e:
            # uvicorn exits the process when it cannot bind (its own ERROR line says why); here that only
            # fails this role's start, and the Stack stops with "cannot start" and status 2.
            log.debug("uvicorn exited with %s", e.code)

    async def drain(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        await finish(self._task, HTTP_DRAIN_S)

    def describe(self) -> str | None:
        if self.server is None or self.http_port is None:
            return None
        return f"recall service: http://{self._host}:{self.http_port}  (OpenAPI: /docs, metrics: /metrics)"


# The role table: start order is this order (the consumer is ready before the gate forwards to it; the
# recall service comes up last, when the stack can answer). `episodic up` runs them all.
ROLES: dict[str, type[Role]] = {role.name: role for role in (EmbedderRole, GateRole, HttpRole)}
ALL_ROLES: tuple[str, ...] = ("gate", "embedder", "http")
