"""The tests' brokers: Apache Kafka on loopback, each in a scratch directory of its own (or the one given)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from infra.broker import BrokerError, KafkaBroker, free_port, unavailable

TEST_HEAP_MB = 192


class TestBroker:
    """A started Kafka of the tests' own: on `port` (a free one by default), its log in `data_dir` (a scratch
    directory by default, removed by `close`). Retention is checked every second, so that a test that sets a
    short retention sees it bite."""

    __test__ = False  # not a test class

    def __init__(self, *, port: int | None = None, data_dir: Path | None = None) -> None:
        why = unavailable()
        if why is not None:
            raise BrokerError(f"the tests run against Apache Kafka, which cannot run here: {why}")
        self._scratch = data_dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="episodic-test-kafka-")) if data_dir is None else data_dir
        self.broker = KafkaBroker(
            data_dir=self.dir, port=port or free_port(), heap_mb=TEST_HEAP_MB, retention_check_ms=1000
        )
        self.broker.start()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def port(self) -> int:
        return self.broker.port

    def close(self) -> None:
        try:
            self.broker.stop()
        finally:
            if self._scratch:
                shutil.rmtree(self.dir, ignore_errors=True)
