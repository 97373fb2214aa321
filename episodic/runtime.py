"""`episodic up`: the whole embedded stack in one process, and the single-stage roles.

Embedded default: the Tansu broker (memory storage) started here, Qdrant Edge under the data directory,
the bundled all-MiniLM-L6-v2, the gate, the embedding consumer and the recall service on one asyncio
loop. SIGINT/SIGTERM drain: the gate stops taking journal records, the consumer finishes and commits its
batch in flight, then the HTTP service, the producer, the store and the broker stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from episodic.bus import bootstrap_reachable, dumps, ensure_topics, make_producer
from episodic.errors import BrokerUnavailable, EpisodicError
from episodic.metrics import Metrics
from episodic.settings import Settings

log = logging.getLogger("episodic")

DEFAULT_DIM = 384  # all-MiniLM-L6-v2; the collection's dense size when starting sparse-only
BROKER_DEAD_AFTER_S = 30.0


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("aiokafka", "faust", "mode", "kafka", "httpx", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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


@dataclass
class KafkaStatus:
    bootstrap: str
    ok: bool = True
    down_since: float | None = None

    def snapshot(self) -> dict[str, Any]:
        return {"kafka": "ok" if self.ok else "down", "kafka_bootstrap": self.bootstrap}


class Stack:
    """The embedded stack (or a subset of its roles for distributed mode)."""

    def __init__(
        self, settings: Settings, *, roles: tuple[str, ...] = ("gate", "embedder", "http"), insecure: bool = False
    ) -> None:
        self.settings = settings
        self.roles = roles
        self.insecure = insecure
        self.metrics = Metrics()
        self.broker: Any = None
        self.store: Any = None
        self.embedder: Any = None
        self.producer: Any = None
        self.consumer: Any = None
        self.gate: Any = None
        self.http: Any = None
        self.status = KafkaStatus(settings.bootstrap)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self.exit_code = 0
        self.http_port: int | None = None

    # -- start -------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        if s.embedded_broker:
            from infra.broker import EmbeddedBroker

            self.broker = EmbeddedBroker(host=s.broker_host, port=s.broker_port, log_file=s.data_dir / "broker.log")
            await asyncio.to_thread(self.broker.start)
            log.warning(
                "embedded broker at %s keeps topics and offsets IN MEMORY: entries not yet indexed are lost "
                "when it stops. Set EPISODIC_KAFKA_BOOTSTRAP to a real Kafka for durability.",
                self.broker.bootstrap,
            )
        else:
            log.info("using Kafka at %s", s.bootstrap)
        created = await ensure_topics(s.bootstrap, partitions=s.topic_partitions, replication=s.topic_replication)
        if created:
            log.info("created topics: %s", ", ".join(created))

        self.producer = make_producer(s.bootstrap)
        await self.producer.start()

        needs_store = "embedder" in self.roles or "http" in self.roles
        if needs_store:
            await self._open_store_and_model()
        if "embedder" in self.roles:
            await self._start_consumer()
        if "gate" in self.roles:
            await self._start_gate()
        if "http" in self.roles:
            await self._start_http()
        else:
            self._start_metrics_server()
        self._tasks.append(asyncio.create_task(self._watchdog(), name="watchdog"))
        self._log_where()

    async def _open_store_and_model(self) -> None:
        from episodic.embedder import load_embedder
        from episodic.sparse import Bm25Encoder
        from stack.stores import open_store

        s = self.settings
        shared = self.roles != ("embedder",)  # other stages share this process's cores
        self.embedder = await asyncio.to_thread(
            lambda: load_embedder(s, shared_process=shared, queries="http" in self.roles)
        )
        self.metrics.sparse_only.set(0 if self.embedder is not None else 1)
        dim = self.embedder.dim if self.embedder is not None else DEFAULT_DIM
        self.store = await asyncio.to_thread(open_store, s, dim=dim)
        self.bm25 = Bm25Encoder()

    async def _start_consumer(self) -> None:
        from consumers.embedding import EmbeddingConsumer
        from episodic.indexer import Indexer

        self.indexer = Indexer(store=self.store, embedder=self.embedder, bm25=self.bm25)
        self.consumer = EmbeddingConsumer(
            settings=self.settings, indexer=self.indexer, producer=self.producer, metrics=self.metrics
        )
        # The consumer also adds missing dense vectors (deferred ones, and the backfill after sparse-only mode).
        self._tasks.append(asyncio.create_task(self._run_consumer(), name="embedding-consumer"))

    async def _run_consumer(self) -> None:
        assert self.consumer is not None
        try:
            await self.consumer.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("embedding consumer failed: %s", e)
            self.fail(1)

    async def _start_gate(self) -> None:
        from streams.runner import GateRunner

        self.gate = GateRunner(settings=self.settings, metrics=self.metrics)
        await self.gate.start()

    async def _start_http(self) -> None:
        import uvicorn

        from recall.app import create_app

        publish = Publisher(self.producer, asyncio.get_running_loop(), self.metrics)
        app = create_app(
            settings=self.settings,
            store=self.store,
            embedder=self.embedder,
            bm25=self.bm25,
            publish=publish,
            status=self.status.snapshot,
            metrics=self.metrics,
            insecure=self.insecure,
        )
        config = uvicorn.Config(
            app,
            host=self.settings.http_host,
            port=self.settings.http_port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        self.http = uvicorn.Server(config)
        self.http.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._tasks.append(asyncio.create_task(self.http.serve(), name="http"))
        deadline = time.monotonic() + 15
        while not self.http.started and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not self.http.started:
            raise EpisodicError(f"recall service did not start on {self.settings.http_host}:{self.settings.http_port}")
        sockets = [sock for srv in (self.http.servers or []) for sock in srv.sockets]
        self.http_port = sockets[0].getsockname()[1] if sockets else self.settings.http_port

    def _start_metrics_server(self) -> None:
        """Roles without the recall service still serve /metrics (Prometheus) on the HTTP port."""
        from prometheus_client import start_http_server

        s = self.settings
        server, _thread = start_http_server(s.http_port, addr=s.http_host, registry=self.metrics.registry)
        self._metrics_server = server
        self.http_port = int(server.server_address[1])
        log.info("metrics: http://%s:%d/metrics", s.http_host, self.http_port)

    def _log_where(self) -> None:
        s = self.settings
        mode = "vector" if self.embedder is not None else "sparse-only"
        log.info("kafka: %s (%s)", s.bootstrap, "embedded Tansu, memory storage" if self.broker else "external")
        if self.store is not None:
            where = s.qdrant_url or str((s.data_dir / "qdrant-edge" / s.collection).resolve())
            log.info("store: %s (%s)", where, "Qdrant server" if s.qdrant_url else "Qdrant Edge, embedded")
        if "embedder" in self.roles:
            log.info("embedder: %s (%s)", getattr(self.embedder, "model_id", "none"), mode)
        if self.http is not None and self.http_port is not None:
            log.info("recall service: http://%s:%d  (OpenAPI: /docs, metrics: /metrics)", s.http_host, self.http_port)
        log.info("ready: roles %s; Ctrl-C to stop", ", ".join(self.roles))

    # -- supervision ---------------------------------------------------------------------------------
    async def _watchdog(self) -> None:
        while not self._stop.is_set():
            ok = await asyncio.to_thread(bootstrap_reachable, self.settings.bootstrap)
            if self.gate is not None and getattr(self.gate, "crashed", False):
                log.error("the gate crashed (%s); stopping the stack", getattr(self.gate, "crash_reason", "?"))
                self.fail(4)
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
                if now - self.status.down_since > BROKER_DEAD_AFTER_S:
                    log.error(
                        "Kafka at %s unreachable for %.0fs; stopping the stack",
                        self.settings.bootstrap,
                        now - self.status.down_since,
                    )
                    self.fail(3)
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 2.0)

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
        log.info("draining: stop taking journal records, finish the batch in flight, commit")
        if self.gate is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.gate.stop(), 30)
        if self.consumer is not None:
            self.consumer.request_stop()
        consumer_tasks = [t for t in self._tasks if t.get_name() == "embedding-consumer"]
        if consumer_tasks:
            _done, pending = await asyncio.wait(consumer_tasks, timeout=60)
            for t in pending:
                t.cancel()
        if self.http is not None:
            self.http.should_exit = True
        if getattr(self, "_metrics_server", None) is not None:
            self._metrics_server.shutdown()
        for t in self._tasks:
            if t.get_name() != "http":
                t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.producer.stop(), 10)
        if self.store is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.close)
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)
        log.info("stopped")


async def run_stack(settings: Settings, roles: tuple[str, ...], *, insecure: bool = False) -> int:
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


def _parse(prog: str, argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--data-dir", type=Path, help="overrides EPISODIC_DATA_DIR")
    ap.add_argument("--http-port", type=int, help="overrides EPISODIC_HTTP_PORT")
    ap.add_argument(
        "--insecure", action="store_true", help="allow the recall service beyond loopback without a tokens file"
    )
    return ap.parse_args(argv)


def _settings(args: argparse.Namespace) -> Settings:
    over: dict[str, Any] = {}
    if args.data_dir is not None:
        over["data_dir"] = args.data_dir
    if args.http_port is not None:
        over["http_port"] = args.http_port
    return Settings(**over)


def up_main(argv: list[str]) -> int:
    args = _parse("episodic up", argv)
    setup_logging(args.log_level)
    return asyncio.run(run_stack(_settings(args), ("gate", "embedder", "http"), insecure=args.insecure))


def run_role(role: str, argv: list[str]) -> int:
    """One stage alone, against an external Kafka (distributed mode)."""
    args = _parse(f"episodic {role}", argv)
    setup_logging(args.log_level)
    settings = _settings(args)
    if settings.embedded_broker:
        log.error("`episodic %s` runs one stage against a shared Kafka: set EPISODIC_KAFKA_BOOTSTRAP", role)
        return 2
    return asyncio.run(run_stack(settings, (role,), insecure=args.insecure))
