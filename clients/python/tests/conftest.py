"""A live memory service for the client's tests: `episodic up` (the whole embedded stack) started from the
engine's venv, named by EPISODIC_STACK_COMMAND (`make test-client` sets it), on free ports, with a tokens file.

The tests run in a venv with the client alone, so the stack is another process and every check goes over HTTP,
as an agent's would. Waits poll with a deadline. (No tests/__init__.py: the client is imported from the venv's
installed distribution, never from the source tree beside it.)
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import START_TIMEOUT_S, TOKENS, Live, free_port, poll


def _up(url: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"`episodic up` exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    try:
        return httpx.get(f"{url}/healthz", timeout=2).json().get("status") == "ok"
    except (httpx.HTTPError, ValueError):
        return False


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    command = os.environ.get("EPISODIC_STACK_COMMAND")
    if not command:
        pytest.fail("EPISODIC_STACK_COMMAND is not set: run `make test-client`, or set it to `<venv>/bin/episodic up`")
    data = tmp_path_factory.mktemp("stack")
    tokens = data / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"name": n, "token": t, **spec} for n, (t, spec) in TOKENS.items()]}))
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")},
        "EPISODIC_DATA_DIR": str(data / "data"),
        "EPISODIC_HTTP_PORT": str(port),
        "EPISODIC_BROKER_PORT": str(free_port()),
        "EPISODIC_TOKENS_FILE": str(tokens),
        "EPISODIC_TOPIC_PARTITIONS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    log = data / "stack.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(shlex.split(command), env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        poll(lambda: _up(url, proc, log), timeout=START_TIMEOUT_S, what="`episodic up` healthy")
        yield Live(url)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
