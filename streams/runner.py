"""Run the gate: `GateRunner` owns one Faust app with the gate agent inside the caller's asyncio loop (the
Stack's gate role in `episodic up`, and the standalone `episodic gate` in `stack.commands.gate`).

    runner = GateRunner(settings, metrics=metrics)
    await runner.start()          # creates missing topics, starts the Faust app in this loop
    ...
    await runner.stop()           # stops taking records, delivers and commits the batches in flight
                                  # (bounded by a timeout, logged when hit), then leaves the group

The group's lag is measured on its own timer from fetch high watermarks (`episodic.bus.LagProbe`) into
`episodic_consumer_lag_records{group=<app id>}`, so it keeps rising while the gate is stuck.

Scale-out: every `episodic gate` process with the same settings joins one consumer group
(`<EPISODIC_CONSUMER_GROUP_PREFIX>-gate`) and takes a share of the journal's partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import faust

from episodic.bus import ensure_topics, group_lag_probe
from episodic.metrics import Metrics
from episodic.settings import Settings
from streams.app import create_app
from streams.gate import GateDrain, GateOptions, GateTopics, install_gate

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 20.0  # the batches in flight: their delivery and the commit


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
        self._drain = GateDrain()
        self._lag: asyncio.Task[None] | None = None

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
        app = create_app(self.settings, app_id=self.app_id, max_poll_records=self.options.batch_size)
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        self._drain = GateDrain()
        install_gate(app, topics=self.topics, metrics=self.metrics, options=self.options, drain=self._drain)
        self.app = app
        await app.start()
        group = str(app.conf.id)
        probe = group_lag_probe(self.settings, self.metrics, group=group, topic=self.topics.entries)
        self._lag = asyncio.create_task(probe.run(), name=f"lag-{group}")
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

    async def stop(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> bool:
        """Stop routing, deliver and commit the batches in flight (within `drain_timeout`, logged when hit),
        then leave the group. True when the drain finished in time."""
        app, self.app = self.app, None
        lag, self._lag = self._lag, None
        if lag is not None:
            lag.cancel()
            await asyncio.gather(lag, return_exceptions=True)
        if app is None:
            return True
        drained = False
        try:
            if app.started and not app.crashed:
                drained = await self._drain.drain(app, drain_timeout)
        finally:
            try:
                await app.stop()
            except Exception as e:  # stopping must not fail the caller's shutdown
                log.warning("gate: error while stopping: %r", e)
        log.info("gate stopped%s", "" if drained else " (not drained)")
        return drained
