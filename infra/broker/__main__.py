"""`python -m infra.broker`: run the embedded broker in the foreground (crash tests, demos), or make the
class-data-sharing archive that halves Kafka's start (`python -m infra.broker cds`, run by `make install`).

The launcher imports nothing of ours (the `launcher` import contract), so not episodic.kernel.settings: it
reads the same variables itself (EPISODIC_BROKER, EPISODIC_BROKER_PORT, EPISODIC_DATA_DIR,
EPISODIC_BROKER_HEAP_MB).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from infra.broker import BrokerError, KafkaBroker, free_port, open_broker
from infra.broker.install import cds_archive, default_libs, unavailable


def make_cds(libs: Path) -> int:
    """Start Kafka once on a scratch log directory with -XX:ArchiveClassesAtExit, stop it: the JVM writes
    the classes it loaded into `kafka.jsa` beside the jars, which every later start maps instead of loading
    and verifying them again."""
    why = unavailable(libs)
    if why is not None:
        print(f"infra.broker cds: skipped: {why}")
        return 0
    archive = cds_archive(libs)
    partial = archive.with_suffix(".jsa.tmp")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="episodic-cds-") as scratch:
        broker = KafkaBroker(
            data_dir=Path(scratch), port=free_port(), libs=libs, jvm_opts=(f"-XX:ArchiveClassesAtExit={partial}",)
        )
        archive.unlink(missing_ok=True)  # a stale archive is not mapped while the new one is dumped
        t0 = time.monotonic()
        broker.start()
        broker.stop()
    if not partial.exists():
        print("infra.broker cds: the JVM wrote no archive; Kafka starts without one")
        return 0
    os.replace(partial, archive)
    print(f"infra.broker cds: {archive} ({archive.stat().st_size >> 20} MiB, {time.monotonic() - t0:.1f} s)")
    return 0


def main() -> None:  # pragma: no cover - exercised through subprocesses in the tests
    ap = argparse.ArgumentParser(description="Run the embedded broker in the foreground")
    ap.add_argument("command", nargs="?", choices=["run", "cds"], default="run")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--insecure", action="store_true", help="listen beyond loopback (no authentication!)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("EPISODIC_BROKER_PORT", "9092")))
    ap.add_argument("--engine", default=os.environ.get("EPISODIC_BROKER", "auto"), choices=["auto", "kafka", "tansu"])
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("EPISODIC_DATA_DIR", "./.episodic")) / "kafka")
    ap.add_argument("--heap-mb", type=int, default=int(os.environ.get("EPISODIC_BROKER_HEAP_MB", "256")))
    ap.add_argument("--libs", type=Path, default=default_libs())
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "cds":
        raise SystemExit(make_cds(args.libs))
    try:
        broker, why = open_broker(
            engine=args.engine, data_dir=args.data_dir, host=args.host, port=args.port,
            allow_remote=args.insecure, heap_mb=args.heap_mb, libs=args.libs,
        )  # fmt: skip
        if why:
            logging.warning("Apache Kafka cannot run (%s): Tansu instead, memory storage: VOLATILE", why)
        broker.start()
    except BrokerError as e:
        raise SystemExit(f"infra.broker: {e}") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set() and broker.alive():
        stop.wait(0.5)
    broker.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
