"""The tests' brokers: Apache Kafka on loopback, each in a scratch directory of its own (or the one given)."""

from __future__ import annotations

import shutil
import tempfile
import warnings
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
        # a broker on a port of its own choosing is started again on another (up to 3 times) where it did not
        # come up: a port found free can be taken by another worker's server before this one binds it
        tries = 3 if port is None and data_dir is None else 1
        for attempt in range(tries):
            self.dir = Path(tempfile.mkdtemp(prefix="episodic-test-kafka-")) if data_dir is None else data_dir
            self.broker = KafkaBroker(
                data_dir=self.dir, port=port or free_port(), heap_mb=TEST_HEAP_MB, retention_check_ms=1000
            )
            try:
                self.broker.start()
                return
            except BrokerError as e:
                if self._scratch:
                    shutil.rmtree(self.dir, ignore_errors=True)
                if attempt == tries - 1:
                    raise
                warnings.warn(f"the test broker did not start ({e}); trying another port", stacklevel=2)

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
