"""The Faust application factory: one `faust.App` per process, configured for the project's brokers.

Agents live in their own modules (`streams/gate.py`) and are installed on an app by the runner.
"""

from __future__ import annotations

import faust
from faust.auth import SASLCredentials, SSLCredentials
from faust.types import TransportT
from faust.types.auth import CredentialsT

from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from streams.transport import BatchTransport

# Producer batch size: a fetched input batch (~1000 records) yields a few hundred output records per
# output partition, which then go out as one produce batch each (streams/gate.py batch_publisher), well
# under the 1 MiB max request size.
PRODUCE_BATCH_BYTES = 512 * 1024

GATE_APP_SUFFIX = "gate"

# A gathering app's fetch minimum (Settings.agent_gather_ms): more than a wait's records of the agents that
# gather, so the broker holds each fetch for the whole wait (Kafka and Tansu both honour it), and at most
# `consumer_max_fetch_size` below.
GATHER_MIN_BYTES = 1024 * 1024


class EpisodicApp(faust.App):
    """faust.App with the batch-delivering Kafka transport (see streams/transport.py)."""

    fetch_max_wait_ms: int | None = None  # how long its consumer lets the broker hold an empty fetch
    idempotent: bool = True  # its producer asks for idempotence (streams.transport.IdempotentProducer)
    fetch_min_bytes: int = 1  # what the broker waits for, up to fetch_max_wait_ms (GATHER_MIN_BYTES: the whole wait)
    isolation_level: str = "read_uncommitted"  # read_committed under the gate's exactly-once (Settings.isolation_level)

    def _new_transport(self) -> TransportT:
        return BatchTransport(self.conf.broker_consumer, self)


def broker_credentials(settings: Settings) -> CredentialsT | None:
    """Faust's `broker_credentials` from the same options every aiokafka client gets
    (`episodic.kernel.transport_security.kafka_options`): Faust hands them to its consumer, producer and admin
    client."""
    opts = kafka_options(settings)
    protocol = opts["security_protocol"]
    if protocol.startswith("SASL"):
        return SASLCredentials(
            username=opts["sasl_plain_username"],
            password=opts["sasl_plain_password"],
            mechanism=opts["sasl_mechanism"],
            ssl_context=opts.get("ssl_context"),  # SASL_SSL when set, SASL_PLAINTEXT otherwise
        )
    if protocol == "SSL":
        return SSLCredentials(opts["ssl_context"])
    return None


def create_app(
    settings: Settings,
    *,
    app_id: str | None = None,
    max_poll_records: int = 2000,
    gather: bool = False,
    exactly_once: bool = False,
) -> faust.App:
    """A Faust app for `settings.bootstrap`, raw bytes in and out, no web server, no tables.

    - app id (= consumer group): `<consumer_group_prefix>-gate` unless `app_id` is given;
    - session timeout from settings (~10 s: Tansu's group join takes half of it);
    - at most `max_poll_records` records per fetch (the gate's batches are fetched partition batches);
    - offsets reset to earliest, so that entries written before the first start are not skipped;
    - with `gather` (agents that may lag) and `settings.agent_gather_ms`, each fetch is held for that long
      (a fetch minimum the wait's records do not reach): one batch per wait;
    - no leader topic and no tables: the gate keeps no state (and the Tansu fallback misreports end offsets,
      so changelog recovery would be wrong on it);
    - with `exactly_once` (the gate under `Settings.exactly_once`), Faust's exactly-once guarantee: its
      transaction manager keeps one transactional producer per assigned partition and its consumer reads
      committed records only (streams/gate.py, `Transactions`); every app reads committed records only under
      `Settings.exactly_once` (the agents that read the gate's output).
    """
    app_id = app_id or f"{settings.consumer_group_prefix}-{GATE_APP_SUFFIX}"
    session_s = settings.session_timeout_ms / 1000.0
    app = EpisodicApp(
        app_id,
        broker=";".join(f"kafka://{server.strip()}" for server in settings.bootstrap.split(",")),
        broker_credentials=broker_credentials(settings),
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        datadir=str(settings.data_dir / "faust" / app_id),
        autodiscover=False,
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        topic_disable_leader=True,
        broker_session_timeout=session_s,
        broker_heartbeat_interval=max(0.5, session_s / 10),
        broker_rebalance_timeout=max(2 * session_s, 20.0),
        broker_commit_interval=1.0,
        broker_max_poll_records=max_poll_records,  # the gate's batch size (GateOptions.batch_size)
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=4 * 1024 * 1024,
        stream_buffer_maxsize=4,  # items are whole fetched batches (streams/transport.py)
        stream_wait_empty=False,
        stream_recovery_delay=0.0,
        producer_acks=-1,
        producer_linger_ms=5,
        producer_max_batch_size=PRODUCE_BATCH_BYTES,  # one produce batch per output partition per input batch
        producer_max_request_size=1024 * 1024,
        processing_guarantee="exactly_once" if exactly_once else "at_least_once",
    )
    if exactly_once:
        # Faust turns its transactions on only in a worker (`App.in_transaction`), read when the consumer is
        # made: the runner starts the app in its own loop, not through faust.Worker.
        app.in_worker = True
    app.isolation_level = settings.isolation_level
    app.fetch_max_wait_ms = settings.fetch_wait_ms  # Faust has no setting for it (streams/transport.py)
    app.idempotent = not settings.broker_is_tansu
    if gather and settings.agent_gather_ms:
        app.fetch_max_wait_ms, app.fetch_min_bytes = settings.agent_gather_ms, GATHER_MIN_BYTES
    return app
