"""The Stack: some or all of the roles (`stack.roles`) in one process, over resources opened once.

`episodic up` runs every role: the embedded broker started here unless EPISODIC_KAFKA_BOOTSTRAP names a Kafka
(Apache Kafka, its log under the data directory; the Tansu fallback, announced as volatile, where Kafka cannot
run: `stack.engine`), Qdrant Edge under the data directory, the bundled
all-MiniLM-L6-v2, the gate, the embedding consumer, the recall service, the linker and the importance
agent (with the nightly decay; EPISODIC_LINKER_ENABLED=false leaves the linker out) on one asyncio loop
(the recall service on a loop of its own, in a thread: `stack.roles.HttpRole`). The distributed roles
(`episodic run ROLE`, `stack.commands.run`) run one role each against a shared Kafka, each with /metrics
and /healthz on its HTTP port (`stack.ops_http` where the role is not the recall service).

SIGINT/SIGTERM drain: the gate stops taking journal records and delivers and commits its batches in
flight, the consumer finishes and commits its batch in flight, then the HTTP service, the producer, the
store and the broker stop. A dead broker (30 s unreachable, or the embedded one exits) or a crashed role
stops the stack with a non-zero status, except a stack of roles that do without Kafka (`episodic serve`):
it starts and keeps answering while Kafka is away, with /healthz saying kafka "degraded".

Size: a little over 400 lines: the stack's whole lifecycle (open, start the roles, watch, drain, stop) reads
top to bottom here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka.errors import KafkaError

from episodic.bus.kafka import bootstrap_reachable, ensure_topics, start_producer, topic_configs
from episodic.embedding.cores import CoreBudget
from episodic.kernel.errors import BrokerUnavailable, EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from schemas.topics import ALL_TOPICS, JOURNAL_DLQ_REPLAYS
from stack.roles import ALL_ROLES, ROLES, Resources, Role, utc_now

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from episodic.embedding.generations import ModelSwitch
    from episodic.kernel.ports import Embedder, MemoryStore, StateStore
    from episodic.store.sparse import Bm25Encoder
    from infra.broker import EmbeddedBroker
    from stack.embedding import ReembedRunner

log = logging.getLogger("episodic")

DEFAULT_DIM = 384  # all-MiniLM-L6-v2; the collection's dense size when starting sparse-only
BROKER_DEAD_AFTER_S = 30.0
WATCH_EVERY_S = 2.0

R = TypeVar("R", bound=Role)


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("aiokafka", "faust", "mode", "kafka", "httpx", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@dataclass
class KafkaStatus:
    bootstrap: str
    ok: bool = True
    down_since: float | None = None
    # "volatile": the embedded broker is the Tansu fallback (memory storage); "durable": Kafka's log on disk
    # (the embedded one, or an operator's)
    journal: str = "durable"

    def snapshot(self) -> dict[str, Any]:
        return {"kafka": "ok" if self.ok else "degraded", "kafka_bootstrap": self.bootstrap, "journal": self.journal}


class Stack:
    """The embedded stack (or a subset of its roles for distributed mode)."""

    def __init__(
        self,
        settings: Settings,
        *,
        roles: tuple[str, ...] = ALL_ROLES,
        insecure: bool = False,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        unknown = [r for r in roles if r not in ROLES]
        if unknown or not roles:
            raise ValueError(f"unknown role(s) {unknown or roles}: the roles are {', '.join(ROLES)}")
        self.settings = settings
        self.roles = roles
        self.insecure = insecure
        self.clock = clock  # "now" for every role (a controllable clock in tests)
        self.metrics = Metrics()
        self.broker: EmbeddedBroker | None = None
        self.producer: AIOKafkaProducer | None = None
        self.store: MemoryStore | None = None
        self.state: StateStore | None = None  # beside the store: the agents' and the lifecycle's state
        self.embedder: Embedder | None = None
        self.switch: ModelSwitch | None = None  # the active embedding generation (stack.embedding)
        self.reembed: ReembedRunner | None = None
        # Shared by the model (bulk embedding) and the stages that claim a core back (the gate, recall).
        self.cores = CoreBudget(fixed=settings.embed_threads)
        self.bm25: Bm25Encoder | None = None
        self.status = KafkaStatus(settings.bootstrap)
        self.running: dict[str, Role] = {}  # name -> role, in start order
        self.exit_code = 0
        self.http_port: int | None = None
        self._kinds = [kind for name, kind in ROLES.items() if name in roles]  # the table's order
        self._stop = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        self._metrics_server: Any = None

    def role(self, kind: type[R]) -> R | None:
        """The running role of this class, if this stack runs it."""
        found = self.running.get(kind.name)
        return found if isinstance(found, kind) else None

    # -- start -------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        if s.embedded_broker:
            from stack.engine import open_embedded

            # Kafka, or the Tansu fallback (announced): the settings say which from here on
            self.broker, s = open_embedded(s)
            self.settings = s
            self.status.journal = "durable" if self.broker.durable else "volatile"
            await asyncio.to_thread(self.broker.start)
        else:
            log.info("using Kafka at %s", s.bootstrap)
        try:
            self.producer = await self._connect_kafka()
        except (BrokerUnavailable, KafkaError, OSError) as e:
            if self.kafka_required:
                raise BrokerUnavailable(f"cannot reach Kafka at {s.bootstrap}: {e}") from e
            # Only roles that do without Kafka (the recall service): serve, and connect later.
            self.status.ok, self.status.down_since = False, time.monotonic()
            log.warning(
                "Kafka at %s is unreachable (%s): serving anyway; /healthz says kafka degraded and "
                "memory.referenced events wait in a buffer of %d until it is back",
                s.bootstrap,
                e,
                s.referenced_buffer,
            )
        if any(kind.needs_store for kind in self._kinds):
            await self._open_store_and_model()
        res = Resources(
            settings=s,
            metrics=self.metrics,
            producer=self.producer,
            status=self.status.snapshot,
            fail=self.fail,
            kafka_connect=self._connect_kafka,
            insecure=self.insecure,
            store=self.store,
            state=self.state,
            embedder=self.embedder,
            switch=self.switch,
            cores=self.cores,
            bm25=self.bm25,
            clock=self.clock,
        )
        # Registered first (stop() drains a half-started role); the pipeline's roles start together (each Faust
        # agent mostly waits for its group's assignment), the recall service after them (/healthz means up).
        for kind in self._kinds:
            self.running[kind.name] = kind()
        for wave in (False, True):
            roles = [self.running[k.name] for k in self._kinds if k.serves_http == wave]
            started = await asyncio.gather(*(role.start(res) for role in roles), return_exceptions=True)
            failed = [e for e in started if isinstance(e, BaseException)]
            if failed:
                raise failed[0]
        self.http_port = next((r.http_port for r in self.running.values() if r.http_port is not None), None)
        if not any(kind.serves_http for kind in self._kinds):
            self._start_metrics_server()
        self._watchdog = asyncio.create_task(self._watch(), name="watchdog")
        self._log_where()

    @property
    def kafka_required(self) -> bool:
        """Whether the stack stops without Kafka: its own broker, or a role that cannot work without it."""
        return self.broker is not None or any(kind.needs_kafka for kind in self._kinds)

    async def _connect_kafka(self) -> AIOKafkaProducer:
        """Create the missing topics and start a producer; raises when Kafka cannot be reached."""
        s = self.settings
        options = kafka_options(s)
        created = await ensure_topics(
            s.bootstrap,
            partitions=s.topic_partitions,
            replication=s.topic_replication,
            options=options,
            topics=(*ALL_TOPICS, JOURNAL_DLQ_REPLAYS),  # the ledger too: made with its retention and compaction
            configs=topic_configs(s),
            reconcile=self.broker is not None,  # the embedded broker's topics are the stack's own
        )
        if created:
            log.info("created topics: %s", ", ".join(created))
        return await start_producer(s.bootstrap, enable_idempotence=not s.broker_is_tansu, **options)

    async def _open_store_and_model(self) -> None:
        from episodic.embedding.embedder import load_embedder
        from episodic.store.facade import QdrantStore
        from episodic.store.sparse import Bm25Encoder
        from stack.embedding import ReembedRunner, open_switch
        from stack.stores import open_state, open_store

        s = self.settings
        embedder = None
        # Ingestion batches get every core only when the document embedder has the process to itself.
        shared = not (len(self._kinds) == 1 and self._kinds[0].embeds_documents)
        queries = any(kind.answers_queries for kind in self._kinds)
        if any(kind.embeds_documents or kind.answers_queries for kind in self._kinds):
            embedder = await asyncio.to_thread(
                lambda: load_embedder(s, shared_process=shared, queries=queries, cores=self.cores)
            )
            if embedder is not None:
                embedder.bind_metrics(self.metrics)
            self.metrics.sparse_only.set(0 if embedder is not None else 1)
        else:  # the agents read stored vectors only (an existing collection keeps its own size)
            log.info("no model loaded: roles %s embed nothing", ", ".join(self.roles))
        self.embedder = embedder
        dim = embedder.dim if embedder is not None else DEFAULT_DIM
        self.store = store = await asyncio.to_thread(open_store, s, dim=dim, background_index=True)
        if isinstance(store, QdrantStore):  # the write discipline's conflicts, counted per writer
            store.on_conflict = lambda writer, n: self.metrics.write_conflicts.labels(writer=writer).inc(n)
        self.state = state = await asyncio.to_thread(open_state, store)
        self.bm25 = Bm25Encoder()
        if isinstance(store, QdrantStore):
            # Where documents are embedded (`up`, the embedder role): the store is reconciled, the pass runs.
            documents = any(k.embeds_documents for k in self._kinds)
            opened = {"shared_process": shared, "queries": queries, "documents": documents}
            switch = await asyncio.to_thread(
                lambda: open_switch(s, store=store, state=state, embedder=embedder, metrics=self.metrics, **opened)
            )
            self.switch = switch
            if embedder is not None and documents and ReembedRunner.wanted(switch, embedder):
                self.reembed = ReembedRunner(
                    store=store,
                    state=state,
                    embedder=embedder,
                    switch=switch,
                    metrics=self.metrics,
                    max_failed=s.reembed_max_failed,
                )
                self.reembed.start()

    def _start_metrics_server(self) -> None:
        """Roles without the recall service still serve /metrics and /healthz on the HTTP port."""
        from stack.ops_http import OpsServer

        s = self.settings
        self._metrics_server = server = OpsServer(s.http_host, s.http_port, self.metrics.registry, self.health)
        self.http_port = server.port
        log.info("metrics: http://%s:%d/metrics, health: /healthz", s.http_host, self.http_port)

    def health(self) -> dict[str, Any]:
        """/healthz of a stack without the recall service: each role's state, Kafka's and the store's."""
        roles = {
            name: ("ok" if role.crash() is None else f"crashed: {role.crash()}") for name, role in self.running.items()
        }
        body: dict[str, Any] = {"roles": roles, **self.status.snapshot()}
        ok = all(v == "ok" for v in roles.values()) and self.status.ok and not self._stop.is_set()
        if self.store is not None:
            body["qdrant"] = "ok" if self.store.ping() else "down"
            ok = ok and body["qdrant"] == "ok"
        if self._stop.is_set():
            body["draining"] = True
        return {"status": "ok" if ok else "degraded", **body}

    def _log_where(self) -> None:
        s = self.settings
        where = f"embedded {self.broker.describe()}" if self.broker is not None else "external"
        log.info("kafka: %s (%s)", s.bootstrap, where)
        if self.store is not None:
            where = s.qdrant_url or str((s.data_dir / "qdrant-edge" / s.collection).resolve())
            log.info("store: %s (%s)", where, "Qdrant server" if s.qdrant_url else "Qdrant Edge, embedded")
        for role in self.running.values():
            line = role.describe()
            if line:
                log.info("%s", line)
        log.info("ready: roles %s; Ctrl-C to stop", ", ".join(self.roles))

    # -- supervision ---------------------------------------------------------------------------------
    async def _watch(self) -> None:
        while not self._stop.is_set():
            ok = await asyncio.to_thread(bootstrap_reachable, self.settings.bootstrap)
            if self.switch is not None:  # roles that never embed (the linker) follow a model switch too
                try:
                    await asyncio.to_thread(self.switch.refresh)
                except EpisodicError as e:
                    log.warning("embedding: cannot follow the active generation (retried): %s", e)
            for name, role in self.running.items():
                reason = role.crash()
                if reason is not None:
                    log.error("the %s crashed (%s); stopping the stack", name, reason)
                    self.fail(role.crash_exit)
                    return
            if self.broker is not None and not self.broker.alive():
                log.error("the embedded broker died (%s); stopping the stack", self.broker.last_output()[-500:])
                self.status.ok = False
                self.fail(3)
                return
            now = time.monotonic()
            if ok:
                self.status.ok, self.status.down_since = True, None
            else:
                self.status.ok = False
                self.status.down_since = self.status.down_since or now
                # A stack of roles that do without Kafka (the recall service) keeps serving, degraded.
                if self.kafka_required and now - self.status.down_since > BROKER_DEAD_AFTER_S:
                    log.error(
                        "Kafka at %s unreachable for %.0fs; stopping the stack",
                        self.settings.bootstrap,
                        now - self.status.down_since,
                    )
                    self.fail(3)
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), WATCH_EVERY_S)

    def _drain_waves(self) -> list[list[str]]:
        """One wave per `drain_rank`, its roles drained together (they do not feed each other). With Kafka
        gone (exit 3) there is nothing to hand on and each Faust consumer waits out its shutdown timeout
        against the dead broker: every role drains at once, one timeout instead of one per role."""
        if self.exit_code == 3:
            return [sorted(self.running)]
        ranks = sorted({role.drain_rank for role in self.running.values()})
        return [sorted(n for n, role in self.running.items() if role.drain_rank == r) for r in ranks]

    async def _drain_one(self, name: str) -> None:
        try:
            await self.running[name].drain()
        except Exception as e:  # one role's failure to drain must not keep the others running
            log.warning("%s: error while draining: %r", name, e)

    def fail(self, code: int) -> None:
        self.exit_code = self.exit_code or code
        self._stop.set()

    def request_stop(self) -> None:
        self._stop.set()

    async def wait(self) -> None:
        await self._stop.wait()

    # -- stop ------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        self._stop.set()
        if self.reembed is not None:  # its page in flight finishes and its cursor is saved; the next start resumes
            await asyncio.to_thread(self.reembed.stop)
        log.info("draining: stop taking journal records, finish the batch in flight, commit")
        for names in self._drain_waves():
            await asyncio.gather(*(self._drain_one(name) for name in names))
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.producer.stop(), 10)
        if self.state is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.state.close)
        if self.store is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.close)
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)
        log.info("stopped")


async def run_stack(settings: Settings, roles: tuple[str, ...], *, insecure: bool = False) -> int:
    """Start the stack, run until SIGINT/SIGTERM or a failure, drain; returns the exit status."""
    stack = Stack(settings, roles=roles, insecure=insecure)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stack.request_stop)
    try:
        await stack.start()
        await stack.wait()
    except (BrokerUnavailable, EpisodicError, OSError) as e:
        log.error("cannot start: %s", e)
        stack.exit_code = stack.exit_code or 2
    except Exception as e:  # a refused bind, a bad tokens file, a broken store: say it, exit non-zero
        log.error("cannot start: %s: %s", type(e).__name__, e)
        stack.exit_code = stack.exit_code or 2
    finally:
        await stack.stop()
    return stack.exit_code
