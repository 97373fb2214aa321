"""Run the gate: `GateRunner` inside an already-running asyncio loop (`episodic up`), and `gate_main` for
the standalone distributed role (`episodic gate`), which stops cleanly on SIGINT/SIGTERM.

    runner = GateRunner(settings, metrics=metrics)
    await runner.start()          # creates missing topics, starts the Faust app in this loop
    ...
    await runner.stop()           # stops taking records, finishes the batch in flight, commits, leaves

Scale-out: every `episodic gate` process with the same settings joins one consumer group
(`<EPISODIC_CONSUMER_GROUP_PREFIX>-gate`) and takes a share of the journal's partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import Any

import faust

from episodic.bus import bootstrap_reachable, ensure_topics
from episodic.metrics import Metrics
from episodic.settings import Settings, get_settings
from schemas import topics as T
from streams.app import create_app
from streams.gate import DEFAULT_BATCH_SIZE, GateOptions, GateTopics, install_gate

BROKER_DEAD_AFTER_S = 30.0

log = logging.getLogger(__name__)


class GateRunner:
    """Owns one Faust app with the gate agent, started and stopped inside the caller's event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        topics: GateTopics = GateTopics(),
        app_id: str | None = None,
        options: GateOptions = GateOptions(),
        create_topics: bool = True,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        self.topics = topics
        self.app_id = app_id
        self.options = options
        self.create_topics = create_topics
        self.app: faust.App | None = None

    async def start(self, *, wait_assigned: float | None = None) -> None:
        """Start the gate in the running loop. With `wait_assigned`, also wait (seconds) for partitions."""
        if self.app is not None:
            raise RuntimeError("gate already started")
        if self.create_topics:
            await ensure_topics(
                self.settings.bootstrap,
                partitions=self.settings.topic_partitions,
                replication=self.settings.topic_replication,
                topics=self.topics.all(),
            )
        app = create_app(self.settings, app_id=self.app_id)
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        install_gate(app, topics=self.topics, metrics=self.metrics, options=self.options)
        self.app = app
        await app.start()
        log.info(
            "gate: %s -> %s | %s (group %s, bootstrap %s)",
            self.topics.entries,
            self.topics.embeddable,
            self.topics.dlq,
            app.conf.id,
            self.settings.bootstrap,
        )
        if wait_assigned is not None:
            await self.wait_assigned(wait_assigned)

    def assignment(self) -> set[Any]:
        """The partitions of the journal topic this process holds now."""
        if self.app is None or not self.app.started:
            return set()
        try:
            return {tp for tp in self.app.consumer.assignment() if tp.topic == self.topics.entries}
        except Exception:
            return set()

    async def wait_assigned(self, timeout: float) -> bool:
        """Wait until the group gave this process at least one journal partition."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.assignment():
                return True
            if self.crashed:
                return False
            await asyncio.sleep(0.05)
        return bool(self.assignment())

    @property
    def running(self) -> bool:
        return self.app is not None and self.app.started and not self.app.should_stop and not self.crashed

    @property
    def crashed(self) -> bool:
        return self.app is not None and bool(self.app.crashed)

    @property
    def crash_reason(self) -> BaseException | None:
        return self.app.crash_reason if self.app is not None else None

    async def stop(self) -> None:
        """Stop consuming, let the batch in flight finish (acked batches are committed), leave the group."""
        app, self.app = self.app, None
        if app is None:
            return
        try:
            await app.stop()
        except Exception as e:  # stopping must not fail the caller's shutdown
            log.warning("gate: error while stopping: %r", e)
        log.info("gate stopped")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="episodic gate",
        description="Run only the gate (distributed mode): journal.entries -> journal.embeddable | journal.dlq. "
        "Start several with the same settings to share the partitions in one consumer group.",
    )
    p.add_argument("--entries-topic", default=T.JOURNAL_ENTRIES)
    p.add_argument("--embeddable-topic", default=T.JOURNAL_EMBEDDABLE)
    p.add_argument("--dlq-topic", default=T.JOURNAL_DLQ)
    p.add_argument("--app-id", default=None, help="consumer group (default: <consumer_group_prefix>-gate)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--log-level", default="INFO")
    return p


async def run_gate(
    settings: Settings, *, topics: GateTopics, app_id: str | None, options: GateOptions, stop: asyncio.Event
) -> int:
    runner = GateRunner(settings, topics=topics, app_id=app_id, options=options)
    await runner.start()
    serve_metrics(runner.metrics, settings)
    down_since: float | None = None
    try:
        while not stop.is_set():
            if runner.crashed:
                log.error("gate crashed: %r", runner.crash_reason)
                return 1
            # A dead broker stops the role instead of leaving it hanging on failed commits.
            if await asyncio.to_thread(bootstrap_reachable, settings.bootstrap):
                down_since = None
            else:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > BROKER_DEAD_AFTER_S:
                    log.error(
                        "Kafka at %s unreachable for %.0fs; stopping the gate", settings.bootstrap, BROKER_DEAD_AFTER_S
                    )
                    return 3
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass
        return 0
    finally:
        await runner.stop()


def serve_metrics(metrics: Metrics, settings: Settings) -> None:
    """/metrics for Prometheus on the HTTP port; a busy port (two gates on one host) only warns."""
    from prometheus_client import start_http_server

    try:
        start_http_server(settings.http_port, addr=settings.http_host, registry=metrics.registry)
        log.info("gate metrics: http://%s:%d/metrics", settings.http_host, settings.http_port)
    except OSError as e:
        log.warning(
            "gate: no /metrics on %s:%d (%s); set EPISODIC_HTTP_PORT", settings.http_host, settings.http_port, e
        )


def gate_main(argv: list[str]) -> int:
    """`episodic gate`: the standalone gate role; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = get_settings()
    if settings.embedded_broker:
        log.info("gate: EPISODIC_KAFKA_BOOTSTRAP is unset, using %s (a running embedded broker)", settings.bootstrap)
    topics = GateTopics(entries=args.entries_topic, embeddable=args.embeddable_topic, dlq=args.dlq_topic)
    options = GateOptions(batch_size=args.batch_size)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await run_gate(settings, topics=topics, app_id=args.app_id, options=options, stop=stop)

    try:
        return asyncio.run(main())
    except Exception as e:
        log.error("gate failed: %s", e)
        return 1


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(gate_main(sys.argv[1:]))
