"""The private names of Faust and aiokafka that the gate relies on (streams/internals.py) exist in the
installed versions, and no other private name is used: an upgrade that renames one fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import mode
import pytest
from aiokafka import AIOKafkaConsumer
from faust.transport.consumer import Fetcher as FaustFetcher
from faust.transport.drivers import aiokafka as faust_aiokafka

from episodic.kernel.settings import Settings
from streams import internals as I
from streams.app import GATHER_MIN_BYTES, create_app
from streams.transport import BatchConsumer, ShortFetchConsumerThread

STREAMS = Path(__file__).resolve().parents[2] / "streams"


def test_the_hooks_the_transport_overrides_exist_in_faust() -> None:
    for name in I.FAUST_CONSUMER_OVERRIDES:
        assert callable(getattr(faust_aiokafka.Consumer, name, None)), f"faust Consumer.{name} is gone"
        assert name in vars(BatchConsumer), f"BatchConsumer no longer overrides {name}"
    for name in I.FAUST_CONSUMER_THREAD_OVERRIDES:
        assert callable(getattr(faust_aiokafka.AIOKafkaConsumerThread, name, None)), name
        assert name in vars(ShortFetchConsumerThread), name
    for name in I.FAUST_CONSUMER_METHODS:
        assert callable(getattr(faust_aiokafka.Consumer, name, None)), f"faust Consumer.{name} is gone"


async def test_the_state_the_transport_reads_exists_on_a_faust_consumer() -> None:
    app = create_app(Settings(), app_id="internals-probe")
    consumer = app.consumer
    assert isinstance(consumer, BatchConsumer)
    for name in I.FAUST_CONSUMER_STATE:
        assert hasattr(consumer, name), f"faust Consumer has no {name}"
    assert isinstance(getattr(app.topics, I.FAUST_CONDUCTOR_TOPIC_INDEX), dict)
    assert I.channels_of(app, "no-such-topic") == []
    assert callable(getattr(type(app.producer), I.FAUST_PRODUCER_ENSURE, None))


async def test_the_faust_consumer_waits_for_data_as_long_as_the_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 ms on Kafka, embedded or not (it answers when data arrives), 50 ms where the stack runs the Tansu
    fallback (it answers a waiting fetch late: the stack sets it, `Stack.start`), or what
    EPISODIC_FETCH_MAX_WAIT_MS says."""
    monkeypatch.delenv("EPISODIC_FETCH_MAX_WAIT_MS", raising=False)
    kafka = "kafka-1:9092"
    for settings, wait in (
        (Settings(), 200),
        (Settings(kafka_bootstrap=kafka), 200),
        (Settings(broker="tansu"), 50),
        (Settings(kafka_bootstrap=kafka, fetch_max_wait_ms=120), 120),
    ):
        assert settings.fetch_wait_ms == wait
        app = create_app(settings, app_id="wait-probe")
        thread = app.consumer._new_consumer_thread()
        consumer = thread._create_worker_consumer(app.transport)
        assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_WAIT) == wait


async def test_an_agent_that_gathers_lets_the_broker_hold_its_fetches_for_the_gather_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settings.agent_gather_ms with a minimum no wait's records reach; 0, or an app that does not gather,
    keeps the pipeline's wait and a minimum of one byte."""
    monkeypatch.delenv("EPISODIC_FETCH_MAX_WAIT_MS", raising=False)
    for settings, gather, wait, minimum in (
        (Settings(), True, 1000, GATHER_MIN_BYTES),
        (Settings(agent_gather_ms=300), True, 300, GATHER_MIN_BYTES),
        (Settings(agent_gather_ms=0), True, 200, 1),
        (Settings(), False, 200, 1),
        (Settings(broker="tansu"), False, 50, 1),
        (Settings(kafka_bootstrap="kafka-1:9092"), False, 200, 1),
    ):
        app = create_app(settings, app_id="gather-probe", gather=gather)
        thread = app.consumer._new_consumer_thread()
        consumer = thread._create_worker_consumer(app.transport)
        assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_WAIT) == wait
        assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_MIN) == minimum
    assert create_app(Settings(), app_id="p").conf.consumer_max_fetch_size >= GATHER_MIN_BYTES


async def test_the_aiokafka_names_exist_and_are_read_where_we_expect() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
    assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_WAIT) == 500  # aiokafka's default
    assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_MIN) == 1
    I.set_fetch_max_wait(consumer, 50, 4096)
    assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_WAIT) == 50
    assert getattr(consumer, I.AIOKAFKA_CONSUMER_FETCH_MIN) == 4096
    # start() hands them to the Fetcher: setting them before start is what takes effect
    assert f"self.{I.AIOKAFKA_CONSUMER_FETCH_WAIT}" in inspect.getsource(AIOKafkaConsumer.start)
    assert f"self.{I.AIOKAFKA_CONSUMER_FETCH_MIN}" in inspect.getsource(AIOKafkaConsumer.start)
    # episodic.bus.offsets.partitions_of asks the consumer's client for every topic's metadata
    from episodic.bus.offsets import AIOKAFKA_CONSUMER_CLIENT

    client = getattr(consumer, AIOKAFKA_CONSUMER_CLIENT)
    assert inspect.iscoroutinefunction(client.fetch_all_metadata)
    # Faust's Fetcher is a mode Service: its stop event is the drain loop's exit condition
    assert issubclass(FaustFetcher, mode.Service)
    assert f"self.{I.MODE_SERVICE_STOPPED} = " in inspect.getsource(mode.Service.__init__)


async def test_the_names_the_gates_exactly_once_relies_on_exist() -> None:
    """Faust's transactional producers and their locks (streams/gate.py `Transactions` commits in them), its
    transactional ids (the commit path uses the same format), aiokafka's transaction state and isolation level."""
    from aiokafka import AIOKafkaProducer
    from faust.transport.consumer import TransactionManager

    assert isinstance(getattr(faust_aiokafka.Producer, I.FAUST_PRODUCER_TRANSACTION_PRODUCERS), dict)
    assert isinstance(getattr(faust_aiokafka.Producer, I.FAUST_PRODUCER_TRANSACTION_LOCKS), dict)
    assert TransactionManager.transactional_id_format == "{group_id}-{tpg.group}-{tpg.partition}"
    assert 'f"{group_id}-{group}-{tp.partition}"' in inspect.getsource(TransactionManager.commit)
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="probe")
    assert I.in_transaction(producer) is False
    assert I.transaction_failed_fatally(producer) is False and I.producer_death(producer) is None
    assert f"self.{I.AIOKAFKA_PRODUCER_SENDER} = Sender(" in inspect.getsource(AIOKafkaProducer.__init__)
    assert callable(getattr(faust_aiokafka.Producer, I.FAUST_PRODUCER_NEW, None))
    assert "transactional_id" in inspect.signature(getattr(faust_aiokafka.Producer, I.FAUST_PRODUCER_NEW)).parameters
    assert f"self.{I.AIOKAFKA_PRODUCER_TXN_MANAGER}" in inspect.getsource(AIOKafkaProducer.send_batch)
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
    assert getattr(consumer, I.AIOKAFKA_CONSUMER_ISOLATION) == "read_uncommitted"
    assert f"self.{I.AIOKAFKA_CONSUMER_ISOLATION}" in inspect.getsource(AIOKafkaConsumer.start)
    app = create_app(Settings(), app_id="txn-probe", exactly_once=True)
    assert app.in_transaction  # Faust's own switch, read when the consumer is made
    assert I.transaction_producer(app, "txn-probe-0-0") == (None, None)  # none before an assignment
    # each app's producer keeps its own (Faust's dicts are class attributes, shared by every app's producer)
    other = create_app(Settings(), app_id="txn-probe-2")
    for name in (I.FAUST_PRODUCER_TRANSACTION_PRODUCERS, I.FAUST_PRODUCER_TRANSACTION_LOCKS):
        assert getattr(app.producer, name) is not getattr(other.producer, name)
        assert getattr(app.producer, name) is not getattr(faust_aiokafka.Producer, name)
    thread = getattr(app.consumer, I.FAUST_CONSUMER_THREAD)
    assert isinstance(thread.tp_last_committed_at, dict)
    assert isinstance(getattr(app.consumer, I.FAUST_CONSUMER_COMMITTED_OFFSET), dict)


async def test_every_app_reads_committed_records_only_under_exactly_once() -> None:
    """The gate's app reads committed records (Faust's own, under exactly-once) and so do the agents that read
    the gate's output (the health agent on journal.embeddable); without it, Faust's read_uncommitted."""
    on = Settings(kafka_bootstrap="kafka-1:9092", gate_exactly_once=True)
    for settings, exactly_once, level in (
        (on, True, "read_committed"),
        (on, False, "read_committed"),
        (Settings(kafka_bootstrap="kafka-1:9092", gate_exactly_once=False), False, "read_uncommitted"),
        (Settings(broker="tansu", gate_exactly_once=True), False, "read_uncommitted"),
    ):
        app = create_app(settings, app_id="isolation-probe", exactly_once=exactly_once)
        assert app.in_transaction is exactly_once
        consumer = app.consumer._new_consumer_thread()._create_worker_consumer(app.transport)
        assert getattr(consumer, I.AIOKAFKA_CONSUMER_ISOLATION) == level


def test_no_other_private_name_of_faust_or_aiokafka_is_used() -> None:
    listed = {
        *I.FAUST_CONSUMER_OVERRIDES,
        *I.FAUST_CONSUMER_THREAD_OVERRIDES,
        *I.FAUST_CONSUMER_METHODS,
        *I.FAUST_CONSUMER_STATE,
    }
    transport = (STREAMS / "transport.py").read_text()
    own = set(re.findall(r"def (_[a-z_]+)\(", transport)) - listed  # BatchConsumer's own helpers
    used = set(re.findall(r"\bself\._([a-z][a-z_]*)", transport))
    foreign = {f"_{n}" for n in used} - own - listed
    assert not foreign, f"private names used but not listed in streams/internals.py: {sorted(foreign)}"
    for path in ("transport.py", "gate.py", "runner.py", "app.py"):
        src = (STREAMS / path).read_text()
        other = re.findall(r"\b(?!self\b)[a-z_]+\._[a-z][a-z_]*", src)
        assert not other, f"{path}: reach private names through streams/internals.py: {other}"


def test_the_fusion_follows_the_chunk_mode_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense weight and BM25's top-N leg were chosen over sentence pieces; over the windows their own
    tree is the default (eval/README.md, "Piece prior"). A value set in the environment wins either way."""
    from episodic.retrieval.engine import fusion_from_settings

    for var in ("EPISODIC_CHUNK_MODE", "EPISODIC_RRF_DENSE_WEIGHT", "EPISODIC_RRF_HEAD", "EPISODIC_RRF_LEXICAL_FULL"):
        monkeypatch.delenv(var, raising=False)
    pieces = fusion_from_settings(Settings())
    assert (pieces.dense_weight, pieces.head, pieces.lexical_full, pieces.lexical_floor) == (2.5, 0, 4.0, 0.25)
    windows = fusion_from_settings(Settings(chunk_mode="window"))
    assert (windows.dense_weight, windows.head, windows.lexical_full) == (1.0, 5, 0.0)  # not measured there
    assert windows.piece_penalty == pieces.piece_penalty > 0  # the prior helps over both (0.613 vs 0.606)
    monkeypatch.setenv("EPISODIC_CHUNK_MODE", "window")
    monkeypatch.setenv("EPISODIC_RRF_DENSE_WEIGHT", "2")
    monkeypatch.setenv("EPISODIC_RRF_HEAD", "0")
    monkeypatch.setenv("EPISODIC_RRF_LEXICAL_FULL", "3")
    chosen = fusion_from_settings(Settings())
    assert (chosen.dense_weight, chosen.head, chosen.lexical_full) == (2.0, 0, 3.0)
    monkeypatch.setenv("EPISODIC_RRF_HEAD", "-1")
    with pytest.raises(ValueError, match="rrf_head"):
        Settings()


def test_recall_ranks_with_the_fusion_of_the_active_generations_cut() -> None:
    """While a re-cut pass runs, the active generation is still the windows: recall fuses them with the
    windows' weights, and with the sentence pieces' once the switch is made. Set weights hold for both."""
    from types import SimpleNamespace

    from episodic.embedding.generations import Generation
    from episodic.kernel.ports import Fusion
    from episodic.retrieval.engine import RecallEngine
    from episodic.store.sparse import Bm25Encoder

    active = [Generation("dense", "m", 8, "window")]
    switch = SimpleNamespace(current=lambda queries=False: (active[0], None))

    def fusion(engine: RecallEngine) -> Fusion:
        return engine._query_model()[2]

    engine = RecallEngine.from_settings(Settings(), store=None, embedder=None, bm25=Bm25Encoder(), switch=switch)  # type: ignore[arg-type]
    assert (fusion(engine).dense_weight, fusion(engine).head) == (1.0, 5)
    active[0] = Generation("dense_1", "m", 8, "sentences:32:254:32")
    assert (fusion(engine).dense_weight, fusion(engine).head) == (2.5, 0)
    active[0] = Generation("dense_2", "m", 8, "whole")  # a cut of no known mode: the configured fusion
    assert fusion(engine) is engine.fusion
    fixed = Settings(rrf_dense_weight=2.0, rrf_head=0)
    engine = RecallEngine.from_settings(fixed, store=None, embedder=None, bm25=Bm25Encoder(), switch=switch)  # type: ignore[arg-type]
    active[0] = Generation("dense", "m", 8, "window")
    assert (fusion(engine).dense_weight, fusion(engine).head) == (2.0, 0)


def test_fusions_by_mode_follow_the_cut_unless_every_mode_dependent_weight_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from episodic.retrieval.engine import fusions_by_mode

    for var in ("EPISODIC_CHUNK_MODE", "EPISODIC_RRF_DENSE_WEIGHT", "EPISODIC_RRF_HEAD", "EPISODIC_RRF_LEXICAL_FULL"):
        monkeypatch.delenv(var, raising=False)
    by_mode = fusions_by_mode(Settings())
    assert (by_mode["sentences"].lexical_full, by_mode["window"].lexical_full) == (4.0, 0.0)
    pinned = fusions_by_mode(Settings(rrf_dense_weight=2.0, rrf_head=0))  # the lexical confidence still follows
    assert (pinned["sentences"].lexical_full, pinned["window"].lexical_full) == (4.0, 0.0)
    assert pinned["window"].dense_weight == 2.0
    assert fusions_by_mode(Settings(rrf_dense_weight=2.0, rrf_head=0, rrf_lexical_full=3.0)) == {}
