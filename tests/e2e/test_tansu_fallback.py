"""The Tansu fallback, announced: where Apache Kafka cannot run (no Java 17, or no jars), `episodic up` still
starts and works on Tansu with memory storage, and says so the way a missing model is announced as
sparse-only: a WARN at boot with the reason and the fix, `/healthz` `"journal": "volatile"`, and `episodic
doctor` a WARN with the fix. A smoke test: an entry goes through the gate and the consumer and is recalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from infra.broker import free_port
from tests.e2e.conftest import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["no jars here (auto)", "asked for (EPISODIC_BROKER=tansu)"])
async def test_the_stack_runs_on_tansu_and_says_the_journal_is_volatile(tmp_path: Path, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")}
    http_port = free_port()
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]),
        "EPISODIC_DATA_DIR": str(tmp_path / "data"),
        "EPISODIC_BROKER_PORT": str(free_port()),
        "EPISODIC_HTTP_PORT": str(http_port),
        "EPISODIC_EMBED_MODEL": "none",
        "EPISODIC_TOPIC_PARTITIONS": "1",
    })  # fmt: skip
    if how.startswith("no jars"):
        env["EPISODIC_BROKER_LIBS"] = str(tmp_path / "no-kafka-here")
    else:
        env["EPISODIC_BROKER"] = "tansu"
    log = tmp_path / "up.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stack.cli", "up"], env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{http_port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:

            async def up() -> dict[str, object] | None:
                try:
                    r = await http.get("/healthz")
                    return r.json() if r.status_code == 200 else None
                except httpx.HTTPError:
                    return None

            health = await poll(up, timeout=120, what="the stack up on Tansu")
            assert health["journal"] == "volatile" and health["kafka"] == "ok"
            text = log.read_text()
            assert "WARNING" in text and "journal is VOLATILE" in text and "make install" in text
            if how.startswith("no jars"):
                assert "no Kafka jars" in text  # the reason
            entry = {
                "id": "t1", "workspace_id": "w", "agent_id": "a", "ts": "2026-11-21T10:00:00Z",
                "entry_type": "summary.generated", "severity": "info", "summary": "the fallback broker took it",
            }  # fmt: skip
            assert (await http.post("/v1/journal", json={"entries": [entry]})).status_code == 202

            async def recalled() -> bool:
                body = {"workspace_id": "w", "agent_id": "a", "query": "fallback broker", "mode": "sparse"}
                r = await http.post("/v1/recall", json=body)
                return r.status_code == 200 and [h["entry_id"] for h in r.json()["hits"]] == ["t1"]

            await poll(recalled, timeout=60, what="the entry recalled through Tansu")
        doctor = subprocess.run(
            [sys.executable, "-m", "stack.cli", "doctor", "--url", url, "--json"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        import json

        journal = next(c for c in json.loads(doctor.stdout) if c["name"] == "journal")
        assert journal["level"] == "WARN" and "OpenJDK 17" in journal["fix"], journal
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
