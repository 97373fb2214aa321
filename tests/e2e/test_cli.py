"""The CLI against a running stack: produce, recall, doctor; and `up` stops when its broker dies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from episodic.bus.producer import produce_file
from episodic.kernel.settings import Settings
from infra.broker import free_port
from stack.commands.doctor import main as doctor_main
from stack.commands.recall import main as recall_main
from stack.roles import HttpRole
from stack.runtime import Stack
from tests.e2e.conftest import poll, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLE = Path(__file__).resolve().parents[2] / "infra" / "samples" / "journal.jsonl"


async def test_produce_recall_and_doctor_against_a_running_stack(
    fresh_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPISODIC_KAFKA_BOOTSTRAP", fresh_broker)
    async with running_stack(stack_settings(fresh_broker, tmp_path)) as stack:
        url = f"http://127.0.0.1:{stack.http_port}"
        sent = await produce_file(SAMPLE, bootstrap=fresh_broker, progress=False)
        assert sent == 43
        # 12 acme memories + 2 globex (one duplicate folded, noise and garbage dropped)
        await poll(lambda: stack.store.count("acme") == 12 and stack.store.count("globex") == 2, what="sample indexed")
        # the ranking below is the hybrid's: every memory with its dense vector (a busy machine may write
        # them BM25-first and add the vectors a moment later)
        await poll(lambda: stack.store.count("acme", has_dense=True) == 12, timeout=120, what="vectors added")

        capsys.readouterr()
        rc = await asyncio.to_thread(
            recall_main,
            ["checkout ran out of memory", "--workspace", "acme", "--agent", "planner", "--url", url, "--json"],
        )
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["hits"][0]["entry_id"] == "e0001"
        assert all(h["agent_id"] == "planner" for h in out["hits"])
        assert "e0001" in {h["entry_id"] for h in out["hits"]} and "globex" not in json.dumps(out)

        rc = await asyncio.to_thread(recall_main, ["canary", "--workspace", "acme", "--agent", "planner", "--url", url])
        table = capsys.readouterr().out
        assert rc == 0 and "keeper.decision" in table and "score" in table

        async def doctor() -> tuple[str, dict[str, str]]:
            rc = await asyncio.to_thread(doctor_main, ["--url", url])
            report = capsys.readouterr().out
            assert rc == 0, report
            return report, {ln.split()[1]: ln for ln in report.splitlines() if ln[:4] in ("OK  ", "WARN", "FAIL")}

        report, lines = await doctor()
        for check in ("broker", "topics", "store", "embedder", "lag", "auth", "decay"):
            assert check in report
        for role in ("gate", "embedder", "linker", "importance"):
            assert f"role-{role}" in lines, report
        # the sample is gated and embedded: both groups commit (the gate's offsets follow its deliveries on
        # Faust's commit timer, so the first doctor may run before the first commit) and keep up
        deadline = asyncio.get_running_loop().time() + 60
        while not (lines["role-gate"].startswith("OK") and lines["role-embedder"].startswith("OK")):
            assert asyncio.get_running_loop().time() < deadline, report
            await asyncio.sleep(1)
            report, lines = await doctor()


async def test_doctor_warns_with_the_fix_in_sparse_only_mode(
    fresh_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPISODIC_KAFKA_BOOTSTRAP", fresh_broker)
    async with running_stack(stack_settings(fresh_broker, tmp_path, embed_model="none")) as stack:
        url = f"http://127.0.0.1:{stack.http_port}"
        capsys.readouterr()
        rc = await asyncio.to_thread(doctor_main, ["--url", url])
        report = capsys.readouterr().out
        assert rc == 0
        line = next(ln for ln in report.splitlines() if ln.split()[1:2] == ["embedder"])
        assert line.startswith("WARN") and "sparse-only" in line
        assert "EPISODIC_EMBED_MODEL" in report


async def test_doctor_fails_when_the_service_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    rc = await asyncio.to_thread(doctor_main, ["--url", f"http://127.0.0.1:{free_port()}"])
    assert rc != 0


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # a quiet stop, no traceback
async def test_up_stops_when_its_embedded_broker_dies(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_port=free_port(), http_port=free_port(), embed_model="none", topic_partitions=1
    )
    stack = Stack(settings)
    try:
        await stack.start()
        assert stack.broker is not None and stack.broker.alive()
        stack.broker.kill()  # the broker dies under the stack (SIGKILL)
        await asyncio.wait_for(stack.wait(), 30)
        assert stack.exit_code == 3
    finally:
        await stack.stop()


async def test_a_role_without_the_recall_service_still_serves_metrics_and_healthz(
    fresh_broker: str, tmp_path: Path
) -> None:
    import httpx

    settings = stack_settings(fresh_broker, tmp_path, embed_model="none")
    stack = Stack(settings, roles=("embedder",))
    try:
        await stack.start()
        assert stack.role(HttpRole) is None and stack.http_port == settings.http_port
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(timeout=5) as http:
            text = (await http.get(f"{base}/metrics")).text
            health = await http.get(f"{base}/healthz")
            assert "episodic_embed_batch_size" in text and "episodic_sparse_only 1.0" in text
            assert health.status_code == 200, health.text
            assert health.json() == {
                "status": "ok", "roles": {"embedder": "ok"}, "kafka": "ok", "kafka_bootstrap": fresh_broker,
                "journal": "durable", "qdrant": "ok",
            }  # fmt: skip
            role = stack.running["embedder"]
            role.crash = lambda: "consumer died"  # type: ignore[method-assign]
            health = await http.get(f"{base}/healthz")
            assert health.status_code == 503 and health.json()["roles"] == {"embedder": "crashed: consumer died"}
    finally:
        await stack.stop()
