"""What both embedded brokers share: the loopback rule, ports, the child process and its log.

A broker runs as a child process in a session of its own, so that Ctrl-C reaches only `episodic up`, which
drains and then stops the broker itself. On Linux it also gets SIGTERM when the process that started it dies,
even by kill -9 (`die_with_parent`), so it never outlives the stack: Kafka then shuts down cleanly (its log
flushed, its lock released) and the next `episodic up` on the same data directory starts where it stopped.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("infra.broker")


class BrokerError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    """localhost and the loopback addresses (127.0.0.0/8, ::1). The same rule as episodic.kernel.auth's, kept
    here because the launcher imports nothing of ours."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def refuse_remote(host: str, allow_remote: bool) -> None:
    """Beyond loopback without `allow_remote` (EPISODIC_BROKER_INSECURE=true): refused, with the fix (issue 29)."""
    if not is_loopback(host) and not allow_remote:
        raise BrokerError(
            f"refusing to run the embedded broker on {host!r}: it has no authentication, and anyone who "
            "reaches it could write entries as any agent or forget any workspace. Bind it to 127.0.0.1, use "
            "Kafka with SASL (EPISODIC_KAFKA_BOOTSTRAP, EPISODIC_KAFKA_SECURITY_PROTOCOL=SASL_SSL), or set "
            "EPISODIC_BROKER_INSECURE=true on a trusted network."
        )


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_PICK = random.SystemRandom()  # not the global generator, which a test may seed (two workers, one port)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out for outgoing connections (Linux; 32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port free to listen on now, below the kernel's range for outgoing connections where that leaves room
    (from 15000): a port taken from that range (bind to 0) can be the local end of another process's next
    outgoing connection before the server that was meant to listen there has started (a broker then exits on
    'Address already in use'); a port below it is taken only by another server."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = host.strip("[]")
    low = _ephemeral_low()
    if low - 15000 >= 1000:
        for _ in range(50):
            port = _PICK.randrange(15000, low)
            with socket.socket(family) as s:
                try:
                    s.bind((addr, port))
                except OSError:
                    continue
                return port
    with socket.socket(family) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> BrokerError:
    return BrokerError(
        f"port {port} on {host} is already in use: stop what listens there, set EPISODIC_BROKER_PORT to a free "
        "port, or point EPISODIC_KAFKA_BOOTSTRAP at that Kafka"
    )


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the thread that forked it dies (prctl's parent is the thread, not
    the process): hence `_spawner`, one thread that lives as long as the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass


class _Spawner:
    """Forks every broker from one daemon thread that lives as long as the process.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits. The stack starts its broker from a
    worker thread (`asyncio.to_thread`), the tests from a pool's: a broker forked there got SIGTERM as soon as
    that thread ended (measured: a broker started from a thread that then returned was gone 3 s later), which
    is not the process dying. Forked from here, it dies with the process only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: Any = None

    def popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        import queue

        with self._lock:
            if self._jobs is None:
                self._jobs = queue.Queue()
                threading.Thread(target=self._run, name="broker-spawner", daemon=True).start()
        done: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._jobs.put((cmd, kw, done))
        result = done.get()
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]

    def _run(self) -> None:
        while True:
            cmd, kw, done = self._jobs.get()
            try:
                done.put(subprocess.Popen(cmd, **kw))
            except BaseException as e:  # handed to the caller
                done.put(e)


_spawner = _Spawner()


class Child:
    """One broker process: started in its own session, its output pumped into a log file and a tail."""

    def __init__(self, name: str, log_file: Path | None) -> None:
        self.name = name
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=60)
        self._marks: dict[str, bool] = {}
        self._seen = threading.Lock()

    def expect(self, text: str) -> None:
        """Watch its output for a line that contains `text` (`printed(text)` says whether one came)."""
        with self._seen:
            self._marks.setdefault(text, False)

    def spawn(self, cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        with self._seen:
            self._marks = dict.fromkeys(self._marks, False)
            self._tail.clear()
        self.proc = _spawner.popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # Ctrl-C reaches `up`, which drains and then stops the broker itself
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        threading.Thread(target=self._pump, name=f"{self.name}-log", daemon=True).start()

    def _pump(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
        fh = self.log_file.open("ab") if self.log_file else None
        try:
            for line in proc.stdout:
                text = line.decode(errors="replace").rstrip()
                with self._seen:
                    self._tail.append(text)
                    for mark, seen in self._marks.items():
                        if not seen and mark in text:
                            self._marks[mark] = True
                if fh:
                    fh.write(line)
                    fh.flush()
        finally:
            if fh:
                fh.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_output(self) -> str:
        return " | ".join(self._tail)

    def wait_until(self, ready: Callable[[], bool], *, timeout: float, what: str, poll_s: float = 0.05) -> None:
        """Until `ready()`; BrokerError (with the tail of its output) when the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise BrokerError(f"{self.name} exited with {code} before {what}: {self.last_output()}")
            if ready():
                return
            time.sleep(poll_s)
        raise BrokerError(f"{self.name}: not {what} within {timeout:g}s: {self.last_output()}")

    def printed(self, text: str) -> bool:
        with self._seen:
            return self._marks.get(text, False)

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %gs of SIGTERM: killed", self.name, timeout)
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would (tests)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
