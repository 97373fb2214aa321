"""Which broker the stack talks to, and its embedded one: Apache Kafka, or the announced Tansu fallback.

`episodic up` without EPISODIC_KAFKA_BOOTSTRAP starts its own broker (`open_embedded`): Apache Kafka (KRaft)
where Java 17 and the jars `make install` fetched are there, its log under `EPISODIC_DATA_DIR/kafka`; else
Tansu with memory storage, said in a WARN at boot, in /healthz (`"journal": "volatile"`) and by `episodic
doctor`, the way a missing model is announced as sparse-only (SPEC §5).

Tansu differs from Kafka where it matters to the clients (no idempotent producers, end offsets misreported by
ListOffsets), so every command that talks to the broker first settles which it is (`resolved`): the same
answer the stack reached, as long as both run on the same machine with the same settings.
"""

from __future__ import annotations

import logging

from episodic.kernel.settings import Settings
from infra.broker import EmbeddedBroker, open_broker, unavailable

log = logging.getLogger("episodic")

VOLATILE_WARNING = (
    "the embedded broker is Tansu with MEMORY storage (%s): the journal is VOLATILE. Entries not yet indexed, "
    "dead letters and their ledger, forgets in flight and committed offsets are lost when it stops, and "
    "nothing is ever deleted. Fix: install OpenJDK 17 or newer and run `make install` (Maven fetches Apache "
    "Kafka), or set EPISODIC_KAFKA_BOOTSTRAP to a Kafka."
)


def resolved(settings: Settings) -> Settings:
    """`settings` with `broker` naming what the broker is ("kafka" or "tansu", never "auto"). Under "auto", the
    embedded broker is Kafka where it can run here, else Tansu (what `open_embedded` picks); an external one
    (EPISODIC_KAFKA_BOOTSTRAP) is Kafka."""
    if settings.broker != "auto":
        return settings
    kafka = bool(settings.kafka_bootstrap) or unavailable(settings.broker_libs) is None
    return settings.model_copy(update={"broker": "kafka" if kafka else "tansu"})


def open_embedded(settings: Settings) -> tuple[EmbeddedBroker, Settings]:
    """The embedded broker (not started) and the settings that say which it is. Raises BrokerError where
    EPISODIC_BROKER=kafka and Kafka cannot run, or the host is beyond loopback without
    EPISODIC_BROKER_INSECURE."""
    s = settings
    broker, why = open_broker(
        engine=s.broker,
        data_dir=s.data_dir / "kafka",
        host=s.broker_host,
        port=s.broker_port,
        log_file=s.data_dir / "broker.log",
        allow_remote=s.broker_insecure,  # beyond loopback it refuses to start without it (issue 29)
        heap_mb=s.broker_heap_mb,
        libs=s.broker_libs,
        retention_check_ms=int(s.broker_retention_check_s * 1000),
    )
    if broker.engine == "tansu":
        log.warning(VOLATILE_WARNING, why or "EPISODIC_BROKER=tansu")
    return broker, s.model_copy(update={"broker": broker.engine})
