"""Run the gate: `GateRunner` owns one Faust app with the gate agent inside the caller's asyncio loop (the
Stack's gate role in `episodic up`, and the standalone `episodic gate` in `stack.commands.gate`).

    runner = GateRunner(settings, metrics=metrics)
    await runner.start()          # creates missing topics, starts the Faust app in this loop
    ...
    await runner.stop()           # stops taking records, delivers and commits the batches in flight
                                  # (bounded by a timeout, logged when hit), then leaves the group

The group's lag is measured on its own timer from fetch high watermarks (`episodic.bus.kafka.LagProbe`) into
`episodic_consumer_lag_records{group=<app id>}`, so it keeps rising while the gate is stuck.

Scale-out: every `episodic gate` process with the same settings joins one consumer group
(`<EPISODIC_CONSUMER_GROUP_PREFIX>-gate`) and takes a share of the journal's partitions.
"""

from __future__ import annotations

import logging
from pathlib import Path

import faust

from episodic.bus.kafka import ensure_topics
from episodic.embedding.cores import CoreBudget
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from streams.agents import AppHolder
from streams.app import create_app
from streams.gate import GateDrain, GateOptions, GateTopics, install_gate

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 20.0  # the batches in flight: their delivery and the commit


class GateRunner(AppHolder):
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
        cores: CoreBudget | None = None,
    ) -> None:
        self.settings = settings
        self.cores = cores  # the process's core budget: a late gate claims a core from bulk embedding
        self.metrics = metrics if metrics is not None else Metrics()
        self.topics = topics
        self.app_id = app_id
        self.options = options
        self.create_topics = create_topics
        self.app: faust.App | None = None
        self._drain = GateDrain()
        self._drain_timeout = DRAIN_TIMEOUT_S
        self._probes = []
        self.label = "gate"
        self.input_topics = (topics.entries,)

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
                options=kafka_options(self.settings),
            )
        if self.settings.gate_exactly_once and not self.settings.exactly_once:
            log.warning("gate: EPISODIC_GATE_EXACTLY_ONCE is ignored on Tansu, which has no transactions")
        app = create_app(
            self.settings,
            app_id=self.app_id,
            max_poll_records=self.options.batch_size,
            exactly_once=self.settings.exactly_once,
        )
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        self._drain = GateDrain()
        install_gate(
            app, topics=self.topics, metrics=self.metrics, options=self.options, drain=self._drain, cores=self.cores
        )
        self.app = app
        await app.start()
        self._probe_lag(self.settings, self.metrics, str(app.conf.id), self.input_topics)
        log.info(
            "gate: %s -> %s | %s (group %s, bootstrap %s, %s)",
            self.topics.entries,
            self.topics.embeddable,
            self.topics.dlq,
            app.conf.id,
            self.settings.bootstrap,
            "exactly-once" if self.settings.exactly_once else "at-least-once",
        )
        if wait_assigned is not None:
            await self.wait_assigned(wait_assigned)

    @property
    def running(self) -> bool:
        return self.app is not None and self.app.started and not self.app.should_stop and not self.crashed

    async def _drain_app(self, app: faust.App) -> bool:
        return await self._drain.drain(app, self._drain_timeout)

    async def stop(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> bool:
        """Stop routing, deliver and commit the batches in flight (within `drain_timeout`, logged when hit),
        then leave the group. True when the drain finished in time."""
        self._drain_timeout = drain_timeout
        return await super().stop()
