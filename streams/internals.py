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

import asyncio
import time
from collections.abc import Callable
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
# aiokafka: the consumer's isolation level (Faust hard-codes read_uncommitted outside exactly-once; the agents
# that read the gate's output read committed records only under Settings.exactly_once). Read by start().
AIOKAFKA_CONSUMER_ISOLATION = "_isolation_level"
READ_COMMITTED = "read_committed"

# Faust's exactly-once (streams/gate.py, `Transactions`): the producer wrapper's transactional producers, one
# per assigned partition (started by Faust's TransactionManager on assignment, stopped on revocation), and
# their locks; aiokafka's transaction state of a producer (no public accessor); the Faust consumer's thread
# (its record of when each partition last committed, which Faust's stall detector reads).
FAUST_PRODUCER_TRANSACTION_PRODUCERS = "_transaction_producers"
FAUST_PRODUCER_TRANSACTION_LOCKS = "_trn_locks"
FAUST_PRODUCER_NEW = "_new_producer"  # the producer wrapper's factory of aiokafka producers (its settings)
AIOKAFKA_PRODUCER_TXN_MANAGER = "_txn_manager"
AIOKAFKA_PRODUCER_SENDER = "_sender"  # its Sender, whose task ends with what killed a dead producer
FAUST_CONSUMER_THREAD = "_thread"
FAUST_CONSUMER_COMMITTED_OFFSET = "_committed_offset"  # one of FAUST_CONSUMER_STATE

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


def set_isolation_level(consumer: Any, level: str) -> None:
    """Set an aiokafka consumer's isolation level before it starts."""
    setattr(consumer, AIOKAFKA_CONSUMER_ISOLATION, level)


def transaction_producer(app: Any, transactional_id: str) -> tuple[Any, Any]:
    """(lock, aiokafka producer) of one of Faust's transactional producers; (None, None) while there is none
    (not yet started on assignment, or stopped on revocation)."""
    producer = app.producer
    lock = getattr(producer, FAUST_PRODUCER_TRANSACTION_LOCKS).get(transactional_id)
    txn = getattr(producer, FAUST_PRODUCER_TRANSACTION_PRODUCERS).get(transactional_id)
    return (lock, txn) if lock is not None and txn is not None else (None, None)


async def renew_transaction_producer(
    app: Any, transactional_id: str, dead: Any, *, still: Callable[[], bool], timeout: float
) -> bool:
    """Replace `dead`, one of Faust's transactional producers, with a new one of the same transactional id
    (Faust's settings; started, so that the broker gives it the next epoch and aborts what the old one left
    open), and stop the old one. The new one is kept only if, once started, `dead` is still the producer
    Faust holds for the id and `still()` is true; else it is stopped and False returned. A start that takes
    longer than `timeout` raises (the new producer stopped). The caller holds the transaction's lock."""
    producers = getattr(app.producer, FAUST_PRODUCER_TRANSACTION_PRODUCERS)
    new = getattr(app.producer, FAUST_PRODUCER_NEW)(transactional_id=transactional_id)
    try:
        await asyncio.wait_for(new.start(), timeout)
    except BaseException:
        await new.stop()
        raise
    if producers.get(transactional_id) is not dead or not still():
        await new.stop()
        return False
    producers[transactional_id] = new
    await dead.stop()  # a dead producer's stop returns: its sender's task has ended
    return True


def producer_death(producer: Any) -> BaseException | None:
    """What stopped an aiokafka producer's sender (None while it runs, or when it is not known)."""
    task = getattr(getattr(producer, AIOKAFKA_PRODUCER_SENDER, None), "sender_task", None)
    if task is None or not task.done() or task.cancelled():
        return None
    return task.exception()


def own_transaction_producers(producer: Any) -> None:
    """Give a Faust producer dicts of its own for its transactional producers and their locks (Faust's are
    class attributes: one producer's stop would stop and forget every app's)."""
    setattr(producer, FAUST_PRODUCER_TRANSACTION_PRODUCERS, {})
    setattr(producer, FAUST_PRODUCER_TRANSACTION_LOCKS, {})


def in_transaction(producer: Any) -> bool:
    """Whether an aiokafka transactional producer has a transaction open (begun, not committing)."""
    return bool(getattr(producer, AIOKAFKA_PRODUCER_TXN_MANAGER).is_in_transaction())


def transaction_failed_fatally(producer: Any) -> bool:
    """Whether an aiokafka transactional producer is dead: its sender stopped on an error it cannot recover
    from (fenced by a newer epoch of its transactional id, or its transaction timed out on the broker).
    Every later begin_transaction raises; only a new producer goes on."""
    return bool(getattr(producer, AIOKAFKA_PRODUCER_TXN_MANAGER).is_fatal_error())


def note_committed(app: Any, offsets: dict[Any, int]) -> None:
    """Tell Faust's consumer that `offsets` were committed (in a transaction of the gate's), as its own
    commit does: its committed offsets, the monitor, and the stall detector's last commit times."""
    consumer = app.consumer
    getattr(consumer, FAUST_CONSUMER_COMMITTED_OFFSET).update(offsets)
    app.monitor.on_tp_commit(offsets)
    thread = getattr(consumer, FAUST_CONSUMER_THREAD, None)
    if thread is not None:
        now = time.monotonic()
        thread.tp_last_committed_at.update({tp: now for tp in offsets})


def fetcher_stopped(fetcher: Any) -> bool:
    """Whether Faust's Fetcher service (a mode Service) was told to stop."""
    return bool(getattr(fetcher, MODE_SERVICE_STOPPED).is_set())
