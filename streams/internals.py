"""Every private name of Faust and aiokafka that the gate relies on, in one place.

The gate's batch transport (`streams/transport.py`) subclasses Faust's aiokafka consumer and replaces its
per-record delivery, so it overrides private hooks and reads the consumer's offset bookkeeping; the gate
(`streams/gate.py`) writes output through the aiokafka producer under Faust's. Where a public API does
the job it is used instead: batches are built with aiokafka's public `create_batch` / `send_batch`, the
output partition comes from aiokafka's public `DefaultPartitioner` over `partitions_for`, the drain uses
Faust's `pause_partitions` and `commit`.

What is left has no public equivalent. It is named here, reached through the accessors below where the
object is someone else's, and `tests/unit/test_internals.py` checks every name against the installed
versions (pinned in pyproject.toml): an upgrade that renames one fails that test instead of silently
falling back to Faust's per-record path or breaking at-least-once delivery.
"""

from __future__ import annotations

from typing import Any

# Hooks of faust.transport.drivers.aiokafka.Consumer (and its base) that BatchConsumer overrides: if one is
# renamed, the override is never called and the gate silently runs Faust's own code.
FAUST_CONSUMER_OVERRIDES = ("_new_consumer_thread", "_drain_messages")
# ... and of faust.transport.drivers.aiokafka.AIOKafkaConsumerThread (ShortFetchConsumerThread).
FAUST_CONSUMER_THREAD_OVERRIDES = ("_create_worker_consumer", "on_thread_stop")

# Methods of the Faust consumer that BatchConsumer calls.
FAUST_CONSUMER_METHODS = ("_add_gap", "_to_message", "_wait_next_records")

# Attributes of a Faust consumer instance that BatchConsumer reads or writes: the offset bookkeeping that
# `ack` keeps (acked offsets, committed offsets, unacked messages) and the read positions.
FAUST_CONSUMER_STATE = (
    "_acked",
    "_acked_index",
    "_n_acked",
    "_committed_offset",
    "_unacked_messages",
    "_read_offset",
    "_buffered_partitions",
    "_stopped",
)

# Elsewhere in Faust: the conductor's topic -> channels index (where a batch event is delivered) and the
# producer wrapper's accessor for its aiokafka producer.
FAUST_CONDUCTOR_TOPIC_INDEX = "_topic_name_index"
FAUST_PRODUCER_ENSURE = "_ensure_producer"

# aiokafka: the consumer's fetch wait (Faust hard-codes 1500 ms; read by AIOKafkaConsumer.start for its
# Fetcher).
AIOKAFKA_CONSUMER_FETCH_WAIT = "_fetch_max_wait_ms"
AIOKAFKA_CONSUMER_FETCH_MIN = "_fetch_min_bytes"
# mode (Faust's service library): a Service's stop event, the drain loop's exit condition for Faust's
# Fetcher service (as in Faust's own `_drain_messages`).
MODE_SERVICE_STOPPED = "_stopped"


def producer_of(app: Any) -> Any:
    """The aiokafka producer under a Faust app's producer (started by Faust)."""
    return getattr(app.producer, FAUST_PRODUCER_ENSURE)()


def channels_of(app: Any, topic: str) -> list[Any]:
    """The channels (agents' streams) subscribed to `topic` in a Faust app."""
    return list(getattr(app.topics, FAUST_CONDUCTOR_TOPIC_INDEX).get(topic, ()))


def set_fetch_max_wait(consumer: Any, ms: int, min_bytes: int = 1) -> None:
    """Set an aiokafka consumer's fetch wait and fetch minimum before it starts."""
    setattr(consumer, AIOKAFKA_CONSUMER_FETCH_WAIT, ms)
    setattr(consumer, AIOKAFKA_CONSUMER_FETCH_MIN, min_bytes)


def fetcher_stopped(fetcher: Any) -> bool:
    """Whether Faust's Fetcher service (a mode Service) was told to stop."""
    return bool(getattr(fetcher, MODE_SERVICE_STOPPED).is_set())
