"""The composition root without IO: the `episodic` command table, the role table, start-up refusals."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from episodic.settings import Settings
from stack.cli import COMMANDS, main, resolve
from stack.commands.serve import main as serve_main
from stack.commands.up import run_role
from stack.roles import ALL_ROLES, ROLES, Role
from stack.runtime import Stack

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_resolves_to_a_function() -> None:
    assert set(COMMANDS) == {"up", "produce", "recall", "forget", "show", "ls", "doctor", "gate", "embedder", "serve"}
    for name in COMMANDS:
        assert callable(resolve(name)), name


def test_help_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    with pytest.raises(SystemExit) as e:
        main(["upp"])
    assert e.value.code == 2 and "unknown command 'upp'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["stack.cli", "stack"])
def test_python_dash_m_runs_the_command(module: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", module, "produce", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: episodic produce")


def test_the_role_table() -> None:
    assert set(ALL_ROLES) == set(ROLES)
    assert all(kind.name == name for name, kind in ROLES.items())
    assert all(issubclass(kind, Role) and not kind.__abstractmethods__ for kind in ROLES.values())
    # started downstream first (the consumer is ready before the gate forwards), HTTP last ...
    assert list(ROLES) == ["embedder", "gate", "http"]
    # ... drained upstream first: the gate stops taking records, the consumer finishes its batch, then HTTP
    assert sorted(ROLES, key=lambda n: ROLES[n].drain_rank) == ["gate", "embedder", "http"]
    assert {n for n, kind in ROLES.items() if kind.needs_store} == {"embedder", "http"}
    assert [n for n, kind in ROLES.items() if kind.serves_http] == ["http"]


def test_a_stack_refuses_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="linker"):
        Stack(Settings(), roles=("gate", "linker"))
    with pytest.raises(ValueError):
        Stack(Settings(), roles=())


def test_a_single_role_needs_a_shared_kafka(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("EPISODIC_KAFKA_BOOTSTRAP", raising=False)
    with caplog.at_level(logging.ERROR, logger="episodic"):
        assert run_role("embedder", []) == 2
    assert "`episodic embedder` runs one stage against a shared Kafka" in caplog.text


def test_serve_preflight_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EPISODIC_TOKENS_FILE", raising=False)
    assert serve_main(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing" in capsys.readouterr().err
    bad = tmp_path / "t.json"
    bad.write_text("{}")
    assert serve_main(["--tokens-file", str(bad)]) == 2
    assert "tokens file" in capsys.readouterr().err


def test_doctor_warns_when_the_collection_has_no_context_vector() -> None:
    import httpx

    from episodic.settings import Settings
    from stack.commands.doctor import check_service

    def answer(context: str) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/healthz":
                health = {"status": "ok", "episodic": "vector", "kafka": "ok", "qdrant": "ok", "context": context}
                return httpx.Response(200, json={**health, "kafka_bootstrap": None})
            if request.url.path == "/metrics":
                return httpx.Response(200, text="")
            return httpx.Response(200, json={"indexed": 1, "dense": 1, "sparse_only": 0})

        return httpx.MockTransport(handler)

    old = check_service(Settings(), "http://x", None, transport=answer("unavailable"))
    [warn] = [c for c in old if c.name == "context"]
    assert warn.level == "WARN" and "bm25_context" in warn.message and warn.fix and "reindex" in warn.fix
    assert not [
        c for c in check_service(Settings(), "http://x", None, transport=answer("prev:2/16w")) if c.name == "context"
    ]
