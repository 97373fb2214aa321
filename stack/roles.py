"""The roles a Stack can run, in one table: what each needs from the stack, how it starts and drains.

A role is one stage of the pipeline in this process: the gate (Faust, `streams/`), the embedding
consumer (aiokafka, `consumers/`), the recall HTTP service (FastAPI, `recall/`), the linker and the
importance agent with its nightly decay (Faust agents in `streams/`, each its own consumer group). The Stack opens the
shared resources once (producer, store, model) and hands them to every role as `Resources`; it starts
the roles together (each waits for its own consumer group) and drains them in waves by `drain_rank`, so
that the stage taking input stops first and the stages after it finish what is in flight.

Adding a role (the linker, importance, health and nudge agents) is one `Role` subclass here and one
entry in `ROLES`; the Stack does not change. Each role imports its package lazily in `start`, so a
process that runs only `serve` never imports Faust.

Size: over 400 lines because the table keeps every role in one place, each a short class.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from episodic.bus.kafka import send_all, send_forget
from episodic.embedding.cores import CoreBudget
from episodic.kernel.errors import BrokerUnavailable, EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from episodic_client.settings import is_loopback
from stack import heap
from stack.publisher import Publisher

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from consumers.embedding import EmbeddingConsumer
    from episodic.embedding.generations import ModelSwitch
    from episodic.kernel.ports import Embedder, MemoryStore, StateStore
    from episodic.maintenance.decay import DecayJob
    from episodic.maintenance.health_job import HealthJob
    from episodic.store.sparse import Bm25Encoder
    from schemas.events import ForgetRecord, NudgeEvent
    from streams.agents import AgentRunner
    from streams.runner import GateRunner

log = logging.getLogger("episodic")

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


GATE_DRAIN_S = 30.0  # the gate's batches in flight, their commit and leaving the group
GATE_DELIVER_S = 20.0  # of which delivering and committing the batches in flight (logged when hit)
CONSUMER_DRAIN_S = 60.0  # the embedding batch in flight: embed, upsert, memory.indexed, commit
HTTP_DRAIN_S = 30.0  # requests in flight
PUBLISH_DRAIN_S = 5.0  # memory.referenced events still buffered
HTTP_START_S = 15.0
AGENT_DRAIN_S = 30.0  # a maintenance agent's batch in flight; a decay run stops after its page


@dataclass(frozen=True)
class Resources:
    """What the Stack opens once and lends to its roles (IO handles, passed in explicitly)."""

    settings: Settings
    metrics: Metrics
    producer: AIOKafkaProducer | None  # started; None when Kafka was unreachable at start (see kafka_connect)
    status: Callable[[], dict[str, Any]]  # the Stack's view of Kafka, for /healthz
    fail: Callable[[int], None]  # stop the whole stack with this exit status (a role's own task died)
    kafka_connect: Callable[[], Awaitable[AIOKafkaProducer]] | None = None  # a started producer, or raises
    insecure: bool = False
    store: MemoryStore | None = None  # opened when a role in this process `needs_store`
    state: StateStore | None = None  # beside the store (episodic.kernel.ports.StateStore), opened with it
    embedder: Embedder | None = None  # None: sparse-only (no model, or EPISODIC_EMBED_MODEL=none)
    switch: ModelSwitch | None = None  # the active embedding generation and its model (episodic.embedding.generations)
    cores: CoreBudget | None = None  # the process's core budget: the gate and recall claim cores from bulk embedding
    bm25: Bm25Encoder | None = None
    clock: Callable[[], datetime] = utc_now  # what the stages call "now" (controllable in tests)

    def need_producer(self, role: str) -> AIOKafkaProducer:
        if self.producer is None:
            raise EpisodicError(f"role {role!r} needs Kafka, and the stack has no producer")
        return self.producer

    def need_store(self, role: str) -> tuple[MemoryStore, Bm25Encoder]:
        if self.store is None or self.bm25 is None:
            raise EpisodicError(f"role {role!r} needs the store, and the stack did not open it")
        return self.store, self.bm25

    def need_state(self, role: str) -> tuple[MemoryStore, StateStore]:
        if self.store is None or self.state is None:
            raise EpisodicError(f"role {role!r} needs the store and its state store, and the stack did not open them")
        return self.store, self.state


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
    needs_kafka: ClassVar[bool] = True  # cannot work without Kafka: the stack stops when it stays unreachable
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

        self.runner = GateRunner(settings=res.settings, metrics=res.metrics, cores=res.cores)
        await self.runner.start()

    async def drain(self) -> None:
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.runner.stop(drain_timeout=GATE_DELIVER_S), GATE_DRAIN_S)

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
        from episodic.indexing.indexer import Indexer
        from episodic.lifecycle.forget import Forgetter

        store, bm25 = res.need_store(self.name)
        if res.state is None:
            raise EpisodicError("the embedder needs the state store (forget tombstones), and the stack did not open it")
        self._model = getattr(res.embedder, "model_id", "none")
        self._mode = "vector" if res.embedder is not None else "sparse-only"
        indexer = Indexer(
            store=store,
            embedder=res.embedder,
            bm25=bm25,
            clock=res.clock,
            alias_limit=res.settings.alias_limit,
            switch=res.switch,
            context=res.settings.context,
            state=res.state,
        )
        self.consumer = EmbeddingConsumer(
            settings=res.settings,
            indexer=indexer,
            producer=res.need_producer(self.name),
            metrics=res.metrics,
            forgetter=Forgetter(store=store, state=res.state, bm25=bm25),
            cores=res.cores,
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


class HttpRole(Role):
    """The recall HTTP service (the FastAPI app in `recall/`) under uvicorn, on an event loop of its own in a
    thread of its own.

    Why its own loop: the stack's loop carries every Faust agent, the embedding consumer and their Kafka
    clients, whose callbacks (a fetched batch decoded, a commit, an agent's step) run between a recall's
    hand-offs to and from its worker thread; under the load right after a backfill those hand-offs waited
    ~50 ms at the p99 each (docs/benchmarks.md, "what the tail waits on"). Here a recall's loop runs only
    requests. Measured against the shared loop (bench.bench_recall_tail, three runs): the p99 within the
    noise (0.87-1.19x), so what it buys is isolation: an agent holding the stack's loop (a slow callback, a
    stalled Kafka client) no longer holds a recall. What the app awaits of Kafka (a forget's
    acknowledgement, `POST /v1/journal`'s) runs on the stack's loop, where the producer lives (`on_loop`);
    memory.referenced events go to the publisher's buffer from any thread (`Publisher.__call__`)."""

    name = "http"
    drain_rank = 2
    needs_store = True
    needs_kafka = False  # answers recalls while Kafka is away; memory.referenced events wait in a buffer
    answers_queries = True
    serves_http = True

    def __init__(self) -> None:
        self.server: Any = None  # uvicorn.Server
        self.publisher: Publisher | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None  # what ended the service's thread, if not a drain
        # sends to Kafka the service awaits (forgets, journal batches) not done yet: a forget answered "unknown"
        # still settles its status when its send ends, on the service's loop, so the loop waits for them
        self._sends: set[concurrent.futures.Future[Any]] = set()
        self._host = ""

    async def start(self, res: Resources) -> None:
        import uvicorn

        from recall.app import create_app

        store, bm25 = res.need_store(self.name)
        s = res.settings
        loop = asyncio.get_running_loop()
        self.publisher = Publisher(
            metrics=res.metrics,
            limit=s.referenced_buffer,
            loop=loop,
            producer=res.producer,
            connect=res.kafka_connect,
        )
        self.publisher.start()
        health, nudges = _state_hooks(res)
        app = create_app(
            settings=s,
            store=store,
            embedder=res.embedder,
            bm25=bm25,
            publish=self.publisher,
            state=res.state,
            forget_sink=on_loop(loop, functools.partial(_send_forget, self.publisher), self._sends),
            produce=on_loop(loop, functools.partial(_send_all, self.publisher), self._sends),
            status=res.status,
            metrics=res.metrics,
            jobs=admin_jobs(res, self.publisher.connected),
            clock=res.clock,
            nudges=nudges,
            health=health,
            insecure=res.insecure,
            switch=res.switch,
            cores=res.cores,
            # no tokens and a loopback bind: a DNS-rebinding page's requests (another Host) are refused
            loopback_names_only=is_loopback(s.http_host),
        )
        config = uvicorn.Config(
            app, host=s.http_host, port=s.http_port, log_level="warning", access_log=False, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # the Stack owns SIGINT/SIGTERM
        self._host = s.http_host
        self._thread = threading.Thread(target=self._serve, name="recall-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + HTTP_START_S
        while not self.server.started and time.monotonic() < deadline and self._thread.is_alive():
            await asyncio.sleep(0.05)
        if not self.server.started:
            raise EpisodicError(f"recall service did not start on {s.http_host}:{s.http_port}")
        sockets = [sock for srv in (self.server.servers or []) for sock in srv.sockets]
        self.http_port = sockets[0].getsockname()[1] if sockets else s.http_port
        # The recall service starts last (stack.runtime): what the process holds now lives as long as it, and
        # the collector's full passes over it would stall every recall in flight (stack.heap).
        heap.settle()

    def _serve(self) -> None:
        """The service's thread: its own loop until uvicorn stops (`drain`)."""
        try:
            asyncio.run(self.server.serve())
        except SystemExit as e:
            # uvicorn exits when it cannot bind (its own ERROR line says why); here that only fails this
            # role's start, and the Stack stops with "cannot start" and status 2.
            log.debug("uvicorn exited with %s", e.code)
        except BaseException as e:  # reported by `crash`, which the Stack's watchdog polls
            self._error = e
            log.exception("recall service: its loop failed")

    async def drain(self) -> None:
        sends = [asyncio.wrap_future(f) for f in list(self._sends)]
        if sends:  # before the service's loop stops: the settling of a late forget runs there
            await asyncio.wait(sends, timeout=HTTP_DRAIN_S)
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, HTTP_DRAIN_S)
            if self._thread.is_alive():  # requests still in flight after the drain's time: closed now
                self.server.force_exit = True
                await asyncio.to_thread(self._thread.join, HTTP_DRAIN_S)
        if self.publisher is not None:  # the events of the last requests, while the producer is up
            await self.publisher.close(PUBLISH_DRAIN_S)

    def crash(self) -> str | None:
        """The service's thread ended while it was serving (not drained)."""
        if self.server is None or not self.server.started or self.server.should_exit:
            return None
        if self._thread is not None and not self._thread.is_alive():
            return f"the recall service stopped: {self._error!r}" if self._error else "the recall service stopped"
        return None

    def describe(self) -> str | None:
        if self.server is None or self.http_port is None:
            return None
        return f"recall service: http://{self._host}:{self.http_port}  (OpenAPI: /docs, metrics: /metrics)"


def on_loop(
    loop: asyncio.AbstractEventLoop,
    fn: Callable[..., Coroutine[Any, Any, T]],
    in_flight: set[concurrent.futures.Future[Any]] | None = None,
) -> Callable[..., Awaitable[T]]:
    """`fn`'s coroutines run on `loop` (the stack's, where the producer lives), awaited from whichever loop
    calls (the recall service's); a caller's cancellation (its timeout) cancels them there too, and one
    cancelled there (the stack's loop stopping) is BrokerUnavailable to the caller (a 503, not a dropped
    connection). Each call is in `in_flight` until it is done (`HttpRole.drain` waits for them)."""

    async def call(*args: Any) -> T:
        done = asyncio.run_coroutine_threadsafe(fn(*args), loop)
        if in_flight is not None:
            in_flight.add(done)
            done.add_done_callback(in_flight.discard)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the caller's own cancellation (its timeout)
            # cancelled over there (the stack's loop stopping): for the caller, Kafka is not there
            raise BrokerUnavailable("the stack is stopping; the send was cancelled") from None

    return call


async def _send_forget(publisher: Publisher, record: ForgetRecord) -> None:
    """The recall service's forget sink: through the producer the service's events use (connected now when
    the stack started without Kafka; raises while Kafka is unreachable, and the forget is 503)."""
    await send_forget(await publisher.connected(), record)


async def _send_all(publisher: Publisher, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
    """`POST /v1/journal`'s sink: the same producer, acknowledged by the broker (acks=all) before the 202;
    raises while Kafka is unreachable, and the batch is 503 with nothing claimed."""
    await send_all(await publisher.connected(), topic, records)


def admin_jobs(res: Resources, kafka: Callable[[], Awaitable[Any]]) -> dict[str, Callable[[], dict[str, Any]]]:
    """The jobs `POST /v1/admin/run/{name}` may run in this process (`kafka`: a started producer, for the
    archive of retention)."""
    if res.store is None or res.state is None:
        return {}
    from stack.maintenance import decay_job

    job = decay_job(
        res.settings,
        store=res.store,
        state=res.state,
        kafka=kafka,
        loop=asyncio.get_running_loop(),
        metrics=res.metrics,
        clock=res.clock,
    )
    return {"decay": lambda: job.run().as_dict()}


def _state_hooks(res: Resources) -> tuple[HealthJob | None, Callable[[str, str | None, str], str | None] | None]:
    """The recall service's views of the state store: the health snapshots and the pending nudges."""
    if res.store is None or res.state is None:
        return None, None
    from episodic.maintenance.health_job import HealthConfig, HealthJob
    from episodic.maintenance.nudge import take_pending_nudge

    state = res.state
    health = HealthJob(res.store, state, HealthConfig.from_settings(res.settings), clock=res.clock)

    def nudges(workspace_id: str, agent_id: str | None, run_id: str) -> str | None:
        return take_pending_nudge(state, workspace_id, agent_id, run_id)

    return health, nudges


class AgentRole(Role):
    """A maintenance agent (`streams.agents.AgentRunner`): crashes when its Faust app does."""

    drain_rank = 3  # after the stages whose output it consumes
    needs_store = True

    def __init__(self) -> None:
        self.runner: AgentRunner | None = None
        self._line = ""

    async def _stop_runner(self) -> None:
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.runner.stop(), AGENT_DRAIN_S)

    async def drain(self) -> None:
        await self._stop_runner()

    def crash(self) -> str | None:
        if self.runner is not None and self.runner.crashed:
            return str(self.runner.crash_reason)
        return None

    def describe(self) -> str | None:
        return self._line or None


class LinkerRole(AgentRole):
    """memory.indexed -> similar edges (the linker agent in `streams/`, its own consumer group); drained
    after the embedder, so that it links what the embedder indexed before stopping."""

    name = "linker"

    async def start(self, res: Resources) -> None:
        from episodic.domain.folding import FoldRule
        from episodic.domain.supersession import SupersedeRule
        from episodic.maintenance.linker import Linker
        from streams.linker import linker_runner

        store, _ = res.need_store(self.name)
        s = res.settings
        linker = Linker(
            store=store,
            threshold=s.similar_threshold,
            top_k=s.similar_top_k,
            min_mean_cosine=s.similar_min_mean,
            clock=res.clock,
            cores=res.cores,  # waits while bulk embedding runs in this process (edges may lag, vectors not)
            fold_rule=FoldRule(
                cosine=s.fold_cosine, additions=s.fold_additions, swaps=s.fold_swaps, enabled=s.fold_enabled
            ),
            supersede_rule=SupersedeRule(
                cosine=s.supersede_cosine, jaccard=s.supersede_jaccard, enabled=s.supersede_enabled
            ),
            state=res.state,  # tombstones: an edge to a memory forgotten while the batch was linked is cut again
        )
        self.runner = linker_runner(s, linker=linker, metrics=res.metrics)
        await self.runner.start()
        top, above = s.similar_top_k, s.similar_threshold
        fold = f"folds near duplicates at cosine {s.fold_cosine}" if s.fold_enabled else "no folding"
        self._line = f"linker: similar edges, top {top} above cosine {above}, {fold} (group {self.runner.app_id})"


class ImportanceRole(AgentRole):
    """memory.referenced -> reference counts and memory.reviewed -> review state (the importance agent in
    `streams/`), and the nightly
    DecayAndReinforce (with retention when on) on its UTC schedule, resumed after a crash. Drained after
    the recall service, which publishes memory.referenced."""

    name = "importance"

    def __init__(self) -> None:
        super().__init__()
        self.job: DecayJob | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, res: Resources) -> None:
        from episodic.maintenance.decay import JobBusy
        from episodic.maintenance.schedule import Schedule, run_on_schedule
        from stack.maintenance import decay_job, reference_counter, review_applier
        from streams.importance import importance_runner, review_dead_letters

        store, state = res.need_state(self.name)
        s = res.settings
        producer = res.need_producer(self.name)
        counter = reference_counter(s, store, state, res.clock)
        reviews = review_applier(s, store, state, res.clock)
        dead_letter = review_dead_letters(producer, res.metrics)
        self.runner = importance_runner(
            s, counter=counter, reviews=reviews, dead_letter=dead_letter, metrics=res.metrics
        )
        await self.runner.start()
        loop = asyncio.get_running_loop()

        async def kafka() -> AIOKafkaProducer:
            return producer

        job = self.job = decay_job(
            s, store=store, state=state, kafka=kafka, loop=loop, metrics=res.metrics, clock=res.clock
        )
        schedule = Schedule(s.decay_schedule)

        async def due(now: datetime) -> bool:
            return await asyncio.to_thread(job.due, schedule.last_due(now))

        async def run() -> None:
            try:
                await asyncio.to_thread(job.run)
            except JobBusy as e:
                log.info("decay: not run here: %s", e)

        self._task = asyncio.create_task(
            run_on_schedule(run, due, clock=res.clock, stop=self._stop, name="decay"), name="decay-schedule"
        )
        retention = (
            f"retention after {s.retention_floor_days} days at the floor" if s.retention_enabled else "no retention"
        )
        self._line = (
            f"importance: reference counts and reviews (ranking {s.review_ranking}; group {self.runner.app_id}); "
            f"decay at '{s.decay_schedule}' UTC, {retention}"
        )

    async def drain(self) -> None:
        self._stop.set()
        if self.job is not None:
            self.job.request_stop()  # a run in progress stops after its page; the next run resumes it
        await finish(self._task, AGENT_DRAIN_S)
        await self._stop_runner()


class HealthRole(AgentRole):
    """journal.embeddable + memory.referenced -> the health inputs; daily snapshots -> the state store,
    memory.health and the gauges (the health agent in `streams/health.py`). Reads stored vectors only: no
    model. Drained after the recall service, which publishes memory.referenced."""

    name = "health"

    def __init__(self) -> None:
        super().__init__()
        self.publisher: Publisher | None = None

    async def start(self, res: Resources) -> None:
        from episodic.maintenance.health_inputs import Ledger, RecallTally
        from episodic.maintenance.health_job import HealthConfig, HealthJob, announce
        from streams.agents import AgentRunner
        from streams.health import HealthTopics, install_health

        store, state = res.need_state(self.name)
        s = res.settings
        job = HealthJob(store, state, HealthConfig.from_settings(s), clock=res.clock)
        res.metrics.set_health(await asyncio.to_thread(job.latest_of_workspaces), s.health_gauge_workspaces)
        publisher = self.publisher = Publisher(
            metrics=res.metrics,
            limit=s.referenced_buffer,
            loop=asyncio.get_running_loop(),
            producer=res.need_producer(self.name),
        )
        publisher.start()

        def on_snapshots(snaps: list[Any]) -> None:
            announce(snaps, publish=publisher, metrics=res.metrics, gauge_workspaces=s.health_gauge_workspaces)

        ledger, tally = Ledger(state), RecallTally(state, store)
        topics = HealthTopics()
        self.runner = AgentRunner(
            s,
            name=self.name,
            topics=(topics.embeddable, topics.referenced),
            create_topics=topics.all(),
            metrics=res.metrics,
            gather=True,
            install=lambda app: install_health(
                app,
                ledger=ledger,
                tally=tally,
                job=job,
                metrics=res.metrics,
                on_snapshots=on_snapshots,
                tick_s=s.health_tick_s,
                topics=topics,
            ),
        )
        await self.runner.start()
        self._line = (
            f"health agent: daily snapshots at {s.health_daily_at} UTC (EPISODIC_HEALTH_DAILY_AT), "
            f"group {self.runner.app_id}"
        )

    async def drain(self) -> None:
        await self._stop_runner()
        if self.publisher is not None:  # the last snapshots' memory.health events
            await self.publisher.close(PUBLISH_DRAIN_S)


class NudgeRole(AgentRole):
    """journal.entries -> per-run counters -> memory.nudges (the nudge agent in `streams/nudge.py`). Needs
    the state store only: no model."""

    name = "nudge"
    drain_rank = 0  # takes journal input, like the gate

    async def start(self, res: Resources) -> None:
        from episodic.maintenance.nudge import NudgeBook
        from streams.agents import AgentRunner
        from streams.nudge import NudgeTopics, install_nudge, recover

        _store, state = res.need_state(self.name)
        s = res.settings
        topics = NudgeTopics()
        book = NudgeBook(state, threshold=s.nudge_threshold, idle_s=s.nudge_run_idle_s)
        producer = res.need_producer(self.name)

        async def publish(event: NudgeEvent) -> None:
            await (await producer.send(topics.nudges, key=event.workspace_id.encode(), value=event.to_json()))

        await recover(
            book=book,
            bootstrap=s.bootstrap,
            topic=topics.nudges,
            publish=publish,
            metrics=res.metrics,
            options=kafka_options(s),
            exact=not s.broker_is_tansu,
        )
        self.runner = AgentRunner(
            s,
            name=self.name,
            topics=(topics.entries,),
            create_topics=topics.all(),
            metrics=res.metrics,
            gather=True,
            install=lambda app: install_nudge(
                app,
                book=book,
                publish=publish,
                metrics=res.metrics,
                clock=res.clock,
                sweep_every_s=max(0.5, min(3600.0, s.nudge_run_idle_s / 10)),
                topics=topics,
            ),
        )
        await self.runner.start()
        self._line = (
            f"nudge agent: a run is nudged once at {s.nudge_threshold} entries since its memory.updated; "
            f"runs idle {s.nudge_run_idle_s:.0f}s are forgotten (group {self.runner.app_id})"
        )


# The role table: start order is this order (the consumer is ready before the gate forwards to it; the
# recall service comes up last, when the stack can answer). `episodic up` runs them all.
ROLES: dict[str, type[Role]] = {
    role.name: role for role in (EmbedderRole, GateRole, LinkerRole, ImportanceRole, HealthRole, NudgeRole, HttpRole)
}
ALL_ROLES: tuple[str, ...] = ("gate", "embedder", "http", "linker", "importance", "health", "nudge")
