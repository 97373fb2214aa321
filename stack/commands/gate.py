"""`episodic gate`: the gate alone (distributed mode), until SIGINT/SIGTERM.

It runs a `streams.runner.GateRunner` with its own watchdog, and /metrics and /healthz on the HTTP port
(`episodic run gate` is the same role through the Stack, without the topic options). Every
`episodic gate` process with the same settings joins one consumer group
(`<EPISODIC_CONSUMER_GROUP_PREFIX>-gate`) and takes a share of the journal's partitions. Exit status: 0
after a clean stop, 1 when the gate crashes or cannot start, 3 when Kafka stays unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time

from episodic.bus.kafka import bootstrap_reachable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings, get_settings
from schemas import topics as T
from stack.ops_http import Health, OpsServer
from streams.gate import DEFAULT_BATCH_SIZE, DEFAULT_TRANSACTION_BATCHES, GateOptions, GateTopics
from streams.runner import GateRunner

BROKER_DEAD_AFTER_S = 30.0

log = logging.getLogger(__name__)


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


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
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=DEFAULT_BATCH_SIZE,
        help=f"records per fetched batch at most (the consumer's max_poll_records; default {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--transaction-batches",
        type=_positive,
        default=DEFAULT_TRANSACTION_BATCHES,
        help="under EPISODIC_GATE_EXACTLY_ONCE, fetched batches waiting for their partition's transaction at most "
        f"(default {DEFAULT_TRANSACTION_BATCHES})",
    )
    p.add_argument("--log-level", default="INFO")
    return p


async def run_gate(
    settings: Settings, *, topics: GateTopics, app_id: str | None, options: GateOptions, stop: asyncio.Event
) -> int:
    runner = GateRunner(settings, topics=topics, app_id=app_id, options=options)
    await runner.start()
    down_since: float | None = None

    def health() -> dict[str, object]:
        gate = "ok" if not runner.crashed else f"crashed: {runner.crash_reason}"
        kafka = "ok" if down_since is None else "degraded"
        ok = gate == "ok" and kafka == "ok" and not stop.is_set()
        return {"status": "ok" if ok else "degraded", "roles": {"gate": gate}, "kafka": kafka,
                "kafka_bootstrap": settings.bootstrap}  # fmt: skip

    server = serve_metrics(runner.metrics, settings, health)
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
        if server is not None:
            server.shutdown()


def serve_metrics(metrics: Metrics, settings: Settings, health: Health) -> OpsServer | None:
    """/metrics and /healthz on the HTTP port (`stack.ops_http`); a busy port (two gates on one host) only
    warns."""
    try:
        server = OpsServer(settings.http_host, settings.http_port, metrics.registry, health)
    except OSError as e:
        log.warning(
            "gate: no /metrics, /healthz on %s:%d (%s); set EPISODIC_HTTP_PORT",
            settings.http_host,
            settings.http_port,
            e,
        )
        return None
    log.info("gate: metrics http://%s:%d/metrics, health /healthz", settings.http_host, server.port)
    return server


def gate_config(args: argparse.Namespace) -> tuple[GateTopics, GateOptions]:
    """The gate's topics and options from the command line."""
    topics = GateTopics(entries=args.entries_topic, embeddable=args.embeddable_topic, dlq=args.dlq_topic)
    return topics, GateOptions(batch_size=args.batch_size, transaction_batches=args.transaction_batches)


def main(argv: list[str]) -> int:
    """`episodic gate`: the standalone gate role; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = get_settings()
    if settings.embedded_broker:
        log.info("gate: EPISODIC_KAFKA_BOOTSTRAP is unset, using %s (a running embedded broker)", settings.bootstrap)
    topics, options = gate_config(args)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await run_gate(settings, topics=topics, app_id=args.app_id, options=options, stop=stop)

    try:
        return asyncio.run(run())
    except Exception as e:
        log.error("gate failed: %s", e)
        return 1
