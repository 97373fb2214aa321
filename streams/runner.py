"""Run the gate: `GateRunner` owns one Faust app with the gate agent inside the caller's asyncio loop (the
Stack's gate role in `episodic up`, and the standalone `episodic gate` in `stack.commands.gate`).

    runner = GateRunner(settings, metrics=metrics)
    await runner.start()          # creates missing topics, starts the Faust app in this loop
    ...
    await runner.stop()           # stops taking records, finishes the batch in flight, commits, leaves

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

from episodic.bus import ensure_topics
from episodic.metrics import Metrics
from episodic.settings import Settings
from streams.agents import AppHolder
from streams.app import create_app
from streams.gate import GateOptions, GateTopics, install_gate

log = logging.getLogger(__name__)


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
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        self.topics = topics
        self.app_id = app_id
        self.options = options
        self.create_topics = create_topics
        self.app: faust.App | None = None
        self.label = "gate"

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
