"""The embedded broker launcher: a real Apache Kafka (and the Tansu fallback), started, stopped, killed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from episodic.bus.kafka import make_producer
from infra.broker import BrokerError, KafkaBroker, TansuBroker, free_port, open_broker, port_open

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next(line for line in fh if line.startswith("State:"))
        return "Z" in state.split()[1]  # a zombie has exited (init reaps it later)
    except (FileNotFoundError, StopIteration):
        return True


def test_a_free_port_is_taken_below_the_range_of_outgoing_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port from the kernel's range for outgoing connections can become another process's connection before
    the broker binds it; free_port picks below that range, one that can be bound now, and falls back to the
    kernel's choice where the range leaves no room below it."""
    import socket

    from infra.broker import common

    low = common._ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1
    for port in ports:
        assert 15000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free indeed
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        monkeypatch.setattr(common, "_ephemeral_low", lambda: 15500)  # 500 ports below: no room
        assert free_port() >= low  # the kernel's choice
        busy = taken.getsockname()[1]
        monkeypatch.setattr(common, "_ephemeral_low", lambda: 60000)
        picks = iter([busy, busy, 20001])
        monkeypatch.setattr(common._PICK, "randrange", lambda a, b: next(picks))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 20001))
            except OSError:
                pytest.skip("port 20001 is in use here")
        assert free_port() == 20001  # the bound port was passed over
    finally:
        taken.close()


async def _produce(bootstrap: str, n: int, topic: str = "t") -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, f"m{i}".encode(), partition=0) for i in range(n)])
    finally:
        await producer.stop()


async def _end(bootstrap: str, topic: str = "t") -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


def test_kafka_formats_once_keeps_its_log_and_refuses_a_busy_port(tmp_path: Path) -> None:
    port = free_port()
    b = KafkaBroker(data_dir=tmp_path, port=port)
    b.start()
    try:
        assert b.alive() and port_open("127.0.0.1", port)
        assert (tmp_path / "data" / "meta.properties").exists() and (tmp_path / "cluster.id").exists()
        cluster = (tmp_path / "cluster.id").read_text()
        with pytest.raises(BrokerError, match="already in use"):
            KafkaBroker(data_dir=tmp_path / "other", port=port).start()
        asyncio.run(_produce(b.bootstrap, 25))
    finally:
        b.stop()
    assert not b.alive() and not port_open("127.0.0.1", port)
    again = KafkaBroker(data_dir=tmp_path, port=port)
    again.start()  # no second format: the same cluster, its records still there
    try:
        assert (tmp_path / "cluster.id").read_text() == cluster
        assert asyncio.run(_end(again.bootstrap)) == 25
    finally:
        again.stop()
    leftovers = [p for p in Path("/tmp").glob("hsperfdata_*/*") if p.name in {str(b.pid), str(again.pid)}]
    assert not leftovers, "the JVM wrote outside the data directory"


def test_a_broker_killed_mid_write_restarts_on_its_log_with_every_acknowledged_record(tmp_path: Path) -> None:
    port = free_port()
    b = KafkaBroker(data_dir=tmp_path, port=port)
    b.start()
    asyncio.run(_produce(b.bootstrap, 500))
    b.kill()  # SIGKILL: no clean shutdown, the lock file left behind
    again = KafkaBroker(data_dir=tmp_path, port=port)
    again.start()
    try:
        assert asyncio.run(_end(again.bootstrap)) == 500
    finally:
        again.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
@pytest.mark.parametrize("engine", ["kafka", "tansu"])
def test_the_broker_dies_with_a_parent_killed_by_sigkill(engine: str, tmp_path: Path) -> None:
    code = (
        "from pathlib import Path; import sys, time; from infra.broker import open_broker, free_port; "
        f"b, _ = open_broker(engine={engine!r}, data_dir=Path(sys.argv[1]), port=free_port()); b.start(); "
        "print(b.pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT)
    assert parent.stdout is not None
    broker_pid = int(parent.stdout.readline())
    assert not _gone(broker_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 30
    while not _gone(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(broker_pid), "the embedded broker outlived the process that started it"


def test_a_restart_waits_for_the_previous_broker_of_its_directory(tmp_path: Path) -> None:
    """The last `episodic up` was killed: its broker got SIGTERM and is still shutting down when the next one
    starts. The new one waits for Kafka's lock instead of failing on it."""
    first = KafkaBroker(data_dir=tmp_path, port=free_port())
    first.start()
    proc = first.nodes[0].child.proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)  # holding the lock, as a broker mid-shutdown does
    second = KafkaBroker(data_dir=tmp_path, port=free_port())
    try:
        with pytest.raises(BrokerError, match="locked by another broker"):
            second.start(timeout=1.5)
    finally:
        proc.send_signal(signal.SIGCONT)
        first.stop()
    second.start()
    second.stop()


def test_open_broker_falls_back_to_tansu_and_says_why(tmp_path: Path) -> None:
    missing = tmp_path / "no-jars"
    broker, why = open_broker(engine="auto", data_dir=tmp_path, libs=missing)
    assert isinstance(broker, TansuBroker) and not broker.durable
    assert why is not None and "make install" in why
    with pytest.raises(BrokerError, match="EPISODIC_BROKER=kafka"):
        open_broker(engine="kafka", data_dir=tmp_path, libs=missing)
    kafka, why = open_broker(engine="auto", data_dir=tmp_path)
    assert isinstance(kafka, KafkaBroker) and kafka.durable and why is None


def test_a_broker_started_from_a_thread_that_ends_stays_up(tmp_path: Path) -> None:
    """The stack starts its broker from a worker thread, the tests from a pool's; the parent-death signal is
    tied to the thread that forked, so a broker forked from one died with it (3 s later, on the previous
    launcher). It must die with the process only."""
    import threading

    b = KafkaBroker(data_dir=tmp_path, port=free_port())
    t = threading.Thread(target=b.start)
    t.start()
    t.join()
    try:
        time.sleep(4)
        assert b.alive() and port_open("127.0.0.1", b.port)
    finally:
        b.stop()


def test_a_relative_data_directory_is_the_one_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`EPISODIC_DATA_DIR=.episodic` (the default is relative too): the JVM runs in its node's directory, so the
    launcher hands it absolute paths (a relative one failed: NoSuchFileException for server.properties)."""
    monkeypatch.chdir(tmp_path)
    b = KafkaBroker(data_dir=Path("rel"), port=free_port())
    b.start()
    try:
        asyncio.run(_produce(b.bootstrap, 3))
        assert (tmp_path / "rel" / "data" / "meta.properties").exists()
    finally:
        b.stop()


def test_kafkas_own_compacted_topics_roll_small_segments_and_keep_markers_an_hour(tmp_path: Path) -> None:
    """__consumer_offsets and __transaction_state (created on first use, by a transaction that commits offsets)
    roll at 8 MiB, not Kafka's 100 MiB, and the cleaner keeps tombstones and transaction markers for an hour,
    not a day: without both, the offsets topic kept every transaction marker of the last day (a linear growth
    under the gate's transactions, `python -m bench.bench_internal_topics`)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from infra.broker.kafka import INTERNAL_SEGMENT_BYTES, MARKER_RETENTION_MS

    broker = KafkaBroker(data_dir=tmp_path / "kafka", port=free_port(), log_file=tmp_path / "kafka.log")
    broker.start(timeout=120)

    async def go() -> dict[str, dict[str, str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in ("out", "in")])
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="probe")
            await producer.start()
            try:
                async with producer.transaction():
                    await producer.send("out", b"x")
                    await producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "probe-group")
            finally:
                await producer.stop()
            found = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, t) for t in ("__consumer_offsets", "__transaction_state")]
            )
            return {
                name: {key: value for key, value, *_ in configs}
                for response in found
                for _, _, _, name, configs in response.resources
            }
        finally:
            await admin.close()

    try:
        configs = asyncio.run(go())
    finally:
        broker.stop()
    assert set(configs) == {"__consumer_offsets", "__transaction_state"}
    for conf in configs.values():
        assert conf["cleanup.policy"] == "compact"
        assert conf["segment.bytes"] == str(INTERNAL_SEGMENT_BYTES)
        assert conf["delete.retention.ms"] == str(MARKER_RETENTION_MS)
