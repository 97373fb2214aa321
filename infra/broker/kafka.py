"""The embedded broker: Apache Kafka in KRaft mode (broker and controller in one JVM), a child of `episodic up`.

Its jars come from Maven Central through the pinned pom `infra/kafka/pom.xml` (`make install` copies them
into `.venv/kafka/libs`); it needs Java 17 or newer. Where either is missing, `open_broker` falls back to
Tansu and says why (`infra.broker.tansu`, "volatile").

What it keeps, and where (nothing outside the data directory, `EPISODIC_DATA_DIR/kafka/`):
- `data/`: the log directory: every topic's segments and the KRaft metadata log, formatted on the first start
  (`kafka-storage format`, a cluster id of its own kept in `cluster.id`);
- `server.properties` and `log4j2.properties`, written at each start from the arguments below;
- `tmp/`: the JVM's temporary directory (snappy and zstd unpack their native code there), and a crash's
  `hs_err` file. No `hsperfdata` under /tmp (-XX:-UsePerfData).

Durability: every write is acknowledged by the broker (acks=all) once it is in the log, in the page cache.
A kill -9 of the stack and its broker loses nothing acknowledged; a power loss can lose what the kernel had
not written yet, as on any single Kafka broker (production replicates instead: docs/distributed.md).

Memory: a bounded heap (`heap_mb`, default 256 MiB), the serial collector, a log cleaner dedupe buffer of
16 MiB instead of Kafka's 128 MiB (it is allocated on the heap at start), 10 partitions for the offsets and
transaction topics instead of 50. Start: a class-data-sharing archive made by `make install` (`python -m
infra.broker cds`) halves the JVM's start (docs/configuration.md, "The embedded broker", has the figures).

`nodes` > 1 runs a KRaft cluster on loopback, each node a broker and a voter (the distributed benchmark and
its end-to-end test: replication factor 3, min.insync.replicas 2).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from infra.broker.common import BrokerError, Child, free_port, log, port_in_use, port_open, refuse_remote
from infra.broker.install import cds_archive, default_libs, find_java, kafka_version, unavailable

KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_LINE = "Kafka Server started"  # kafka.server.KafkaRaftServer, at INFO (log4j2.properties below)
DEFAULT_HEAP_MB = 256
# Kafka's own compacted topics (__consumer_offsets, __transaction_state) roll a segment at this size, not at
# Kafka's 100 MiB: only a rolled segment is compacted, so each of their 20 partitions here kept every offset
# commit and transaction state on disk until it reached 100 MiB. And the cleaner keeps the commit markers of
# transactions (one per transaction in __consumer_offsets: the gate commits its offsets in its transactions)
# for 1 hour after it cleaned their segment, not Kafka's 24 hours: with 24 the offsets topic grew by every
# marker of the last day, linearly with the gate's transactions (measured: `python -m
# bench.bench_internal_topics`, docs/configuration.md "The embedded broker").
INTERNAL_SEGMENT_BYTES = 8 * 1024 * 1024
MARKER_RETENTION_MS = 3_600_000
RETENTION_CHECK_MS = 300_000  # Kafka's own default: how often segments past their topic's retention are deleted
STOP_TIMEOUT_S = 30.0

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.ready.name = kafka.server.KafkaRaftServer
logger.ready.level = INFO
"""


@dataclass(frozen=True, slots=True)
class Security:
    """A SASL_SSL client listener (SCRAM-SHA-512 and -256) instead of PLAINTEXT, for the transport test.

    `pem`: the broker's private key and certificate chain in one PEM file; `users`: SCRAM users (name ->
    password), written into the metadata log when the node is formatted. Brokers talk to each other over the
    same listener as the user `broker`.
    """

    pem: Path
    users: dict[str, str]
    broker_password: str = field(default_factory=lambda: uuid.uuid4().hex)


class _Node:
    def __init__(self, node_id: int, root: Path, host: str, port: int, log_file: Path | None) -> None:
        self.id = node_id
        self.dir = root
        self.host = host
        self.port = port
        self.controller_port = 0  # chosen at each start (a static quorum: its voters are read from the config)
        self.child = Child(f"kafka-{node_id}", log_file)
        self.child.expect(READY_LINE)

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def formatted(self) -> bool:
        return (self.data / "meta.properties").exists()

    def lock_free(self) -> bool:
        """No other broker holds this log directory (Kafka's lock: `data/.lock`, an fcntl lock)."""
        lock = self.data / ".lock"
        if not lock.exists():
            return True
        with lock.open("a") as fh:
            try:
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            fcntl.lockf(fh, fcntl.LOCK_UN)
        return True


class KafkaBroker:
    """Apache Kafka (KRaft) on loopback: one combined broker and controller, or a cluster of `nodes`."""

    engine = "kafka"
    durable = True

    def __init__(
        self,
        *,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 9092,
        nodes: int = 1,
        heap_mb: int = DEFAULT_HEAP_MB,
        log_file: Path | None = None,
        allow_remote: bool = False,
        libs: Path | None = None,
        java_home: str | None = None,
        retention_check_ms: int = RETENTION_CHECK_MS,
        min_insync: int | None = None,
        security: Security | None = None,
        jvm_opts: tuple[str, ...] = (),
        internal_segment_bytes: int | None = INTERNAL_SEGMENT_BYTES,
    ) -> None:
        refuse_remote(host, allow_remote)
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        self.root = Path(data_dir).absolute()  # the JVM runs in a node's directory: a relative path would miss
        self.host = host
        self.port = port
        self.heap_mb = heap_mb
        self.libs = libs or default_libs()
        self.java_home = java_home
        self.retention_check_ms = retention_check_ms
        self.min_insync = min_insync if min_insync is not None else min(2, nodes)
        self.security = security
        self.jvm_opts = jvm_opts
        self.internal_segment_bytes = internal_segment_bytes  # None: Kafka's defaults (100 MiB, markers kept 24 h)
        self.replicas = min(3, nodes)
        single = nodes == 1
        self.nodes = [
            _Node(
                i,
                self.root if single else self.root / f"node-{i}",
                host,
                port if i == 1 else free_port(host),
                log_file if single or log_file is None else log_file.with_name(f"{log_file.stem}-{i}{log_file.suffix}"),
            )
            for i in range(1, nodes + 1)
        ]

    # -- what the stack reads ----------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{n.port}" for n in self.nodes)

    @property
    def pid(self) -> int | None:
        return self.nodes[0].child.pid

    def describe(self) -> str:
        where = self.root.resolve()
        return f"Apache Kafka {kafka_version(self.libs)} (KRaft, {len(self.nodes)} node(s)), log in {where}"

    def alive(self) -> bool:
        return all(n.child.alive() for n in self.nodes)

    def last_output(self) -> str:
        return " || ".join(f"[{n.id}] {n.child.last_output()}" for n in self.nodes if n.child.last_output())

    # -- start ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> None:
        """Format the log directories on the first start, start every node, and return once each serves."""
        why = unavailable(self.libs, self.java_home)
        if why is not None:
            raise BrokerError(f"cannot run Apache Kafka: {why}")
        java = find_java(self.java_home)
        assert java is not None
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            self._wait_for_lock(node, deadline)
            if port_open(self.host, node.port):
                raise port_in_use(self.host, node.port)
        for node in self.nodes:
            node.controller_port = free_port(self.host)
        self._format(java.path)
        for node in self.nodes:
            self._spawn(node, java.path)
        try:
            for node in self.nodes:
                self._wait_ready(node, deadline)
        except BrokerError:
            self.stop()
            raise
        log.info("embedded broker: %s, listening on %s", self.describe(), self.bootstrap)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Start one node of a cluster again (after `kill_node`); returns once it serves."""
        node = self.nodes[node_id - 1]
        java = find_java(self.java_home)
        assert java is not None
        deadline = time.monotonic() + timeout
        self._wait_for_lock(node, deadline)
        self._spawn(node, java.path)
        self._wait_ready(node, deadline)

    def _wait_for_lock(self, node: _Node, deadline: float) -> None:
        """A broker of this data directory still shutting down (the last `episodic up` was killed, and its
        broker got SIGTERM): wait for it, rather than fail on Kafka's lock."""
        said = False
        while not node.lock_free():
            if not said:
                log.info("waiting for the previous broker of %s to stop", node.data)
                said = True
            if time.monotonic() > deadline:
                raise BrokerError(f"{node.data} is locked by another broker (another `episodic up` on it?)")
            time.sleep(0.2)

    def _format(self, java: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        id_file = self.root / "cluster.id"
        if not id_file.exists():
            tmp = id_file.with_suffix(".tmp")
            tmp.write_text(_cluster_id() + "\n")
            os.replace(tmp, id_file)
        cluster_id = id_file.read_text().strip()
        for node in self.nodes:
            if node.formatted():
                continue
            props = self._write_config(node)
            tool = [java, *self._jvm(node, heap_mb=64, cds=False), STORAGE_TOOL]
            cmd = [*tool, "format", f"--cluster-id={cluster_id}", f"--config={props}"]  # an id may start with "-"
            if self.security is not None:
                users = {**self.security.users, "broker": self.security.broker_password}
                for name, password in users.items():
                    for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                        cmd += ["--add-scram", f"{mech}=[name={name},password={password}]"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise BrokerError(f"formatting {node.data} failed: {done.stdout[-800:]} {done.stderr[-800:]}")
            log.info("formatted the Kafka log directory %s (cluster %s)", node.data, cluster_id)

    def _spawn(self, node: _Node, java: str) -> None:
        props = self._write_config(node)
        node.child.spawn([java, *self._jvm(node, heap_mb=self.heap_mb), KAFKA_MAIN, str(props)], cwd=node.dir)

    def _wait_ready(self, node: _Node, deadline: float) -> None:
        def serving() -> bool:
            return node.child.printed(READY_LINE) and port_open(self.host, node.port)

        node.child.wait_until(serving, timeout=max(0.0, deadline - time.monotonic()), what="serving")

    # -- configuration ------------------------------------------------------------------------------
    def _jvm(self, node: _Node, *, heap_mb: int, cds: bool = True) -> list[str]:
        tmp = node.dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        (node.dir / "log4j2.properties").write_text(LOG4J2)
        opts = [
            f"-Xms{min(64, heap_mb)}m",
            f"-Xmx{heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:-UsePerfData",
            f"-XX:ErrorFile={tmp}/hs_err_pid%p.log",
            f"-Djava.io.tmpdir={tmp}",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}",
        ]
        archive = cds_archive(self.libs)
        if cds and archive.exists():
            opts += [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        return [*opts, *self.jvm_opts, "-cp", str(self.libs / "*")]

    def config(self, node: _Node) -> dict[str, str]:
        """One node's server.properties."""
        voters = ",".join(f"{n.id}@{self.host}:{n.controller_port}" for n in self.nodes)
        client = "CLIENT"
        protocol = "SASL_SSL" if self.security is not None else "PLAINTEXT"
        conf = {
            "process.roles": "broker,controller",
            "node.id": str(node.id),
            "controller.quorum.voters": voters,
            "listeners": f"{client}://{self.host}:{node.port},CONTROLLER://{self.host}:{node.controller_port}",
            "advertised.listeners": f"{client}://{self.host}:{node.port}",
            "listener.security.protocol.map": f"{client}:{protocol},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": client,
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.data),
            "num.partitions": "1",
            "default.replication.factor": str(self.replicas),
            "min.insync.replicas": str(self.min_insync),
            "offsets.topic.replication.factor": str(self.replicas),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(self.replicas),
            "transaction.state.log.min.isr": str(min(self.min_insync, self.replicas)),
            "transaction.state.log.num.partitions": "10",
            "group.initial.rebalance.delay.ms": "0",  # one process joins its own groups: no reason to wait 3 s
            # A broker that stopped heartbeating is fenced after this long (Kafka: 9 s). It is also how long a
            # broker restarted after a kill -9 waits for its old registration to lapse before it serves, and
            # how long a cluster's partitions led by a killed node stay unavailable: loopback needs no 9 s.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            "log.retention.check.interval.ms": str(self.retention_check_ms),
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "2",
            "unclean.leader.election.enable": "false",
            "auto.create.topics.enable": "true",
        }
        if self.internal_segment_bytes is not None:  # read when the topic is created (on first use)
            conf["offsets.topic.segment.bytes"] = str(self.internal_segment_bytes)
            conf["transaction.state.log.segment.bytes"] = str(self.internal_segment_bytes)
            # every compacted topic's tombstones and markers (no delete-policy topic has any)
            conf["log.cleaner.delete.retention.ms"] = str(MARKER_RETENTION_MS)
        if self.security is not None:
            mech = "SCRAM-SHA-512"
            jaas = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="broker" password="{self.security.broker_password}";'
            )
            conf.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol": mech,
                "listener.name.client.scram-sha-512.sasl.jaas.config": jaas,  # one per mechanism the listener takes
                "listener.name.client.scram-sha-256.sasl.jaas.config": jaas,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.security.pem),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.security.pem),
                "ssl.endpoint.identification.algorithm": "",
            })  # fmt: skip
        return conf

    def _write_config(self, node: _Node) -> Path:
        node.dir.mkdir(parents=True, exist_ok=True)
        path = node.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.config(node).items()))
        return path

    # -- stop ------------------------------------------------------------------------------------------
    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every node (a controlled shutdown: the log flushed, the lock released), SIGKILL after
        `timeout`."""
        running = [n for n in self.nodes if n.child.alive()]
        for node in running:
            if node.child.proc is not None:
                node.child.proc.terminate()
        for node in running:
            node.child.stop(timeout)
        if running:
            log.info("embedded broker stopped")

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would (tests, the distributed benchmark)."""
        self.nodes[node_id - 1].child.kill()

    def kill(self) -> None:
        for node in self.nodes:
            node.child.kill()

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (what `kafka-storage random-uuid`
    prints), without the JVM start that command costs."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
