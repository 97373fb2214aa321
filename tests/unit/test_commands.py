"""The composition root without IO: the `episodic` command table, the role table, start-up refusals."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from episodic.kernel.settings import Settings
from stack.cli import COMMANDS, main, resolve
from stack.commands.run import serve_main
from stack.commands.up import up_roles
from stack.roles import ALL_ROLES, ROLES, Role
from stack.runtime import Stack

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_resolves_to_a_function() -> None:
    assert set(COMMANDS) == {
        *("up", "produce", "recall", "forget", "show", "ls", "doctor", "run", "gate", "embedder", "serve", "mcp"),
        *("linker", "importance", "health", "health-agent", "nudge-agent", "reindex", "dlq", "export", "import"),
        "check",
    }
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
    # the pipeline's roles start together (Stack.start), HTTP after them; listed downstream first ...
    assert list(ROLES) == ["embedder", "gate", "linker", "importance", "health", "nudge", "http"]
    # ... drained upstream first: the stages reading journal.entries (the gate, the nudge agent), the consumer
    # finishes its batch, then HTTP, then the agents that consume what the consumer and HTTP publish
    assert sorted(ROLES, key=lambda n: ROLES[n].drain_rank) == [
        "gate", "nudge", "embedder", "http", "linker", "importance", "health"
    ]  # fmt: skip
    assert {n for n, kind in ROLES.items() if kind.needs_store} == {
        "embedder", "http", "linker", "importance", "health", "nudge"
    }  # fmt: skip
    # only the stages that embed (documents, queries) load the model
    assert {n for n, kind in ROLES.items() if kind.embeds_documents or kind.answers_queries} == {"embedder", "http"}
    assert [n for n, kind in ROLES.items() if kind.serves_http] == ["http"]
    # only the recall service does without Kafka (it buffers memory.referenced): `serve` outlives Kafka
    assert [n for n, kind in ROLES.items() if not kind.needs_kafka] == ["http"]


def test_drain_waves_follow_the_rank_and_are_one_wave_when_kafka_is_gone() -> None:
    stack = Stack(Settings(), roles=tuple(ROLES))
    stack.running = {name: kind() for name, kind in ROLES.items()}
    assert stack._drain_waves() == [["gate", "nudge"], ["embedder"], ["http"], ["health", "importance", "linker"]]
    stack.fail(3)  # Kafka is gone: nothing to hand on, every role stops at once
    assert stack._drain_waves() == [sorted(ROLES)]


def test_a_stack_refuses_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="linkr"):
        Stack(Settings(), roles=("gate", "linkr"))
    with pytest.raises(ValueError):
        Stack(Settings(), roles=())


@pytest.mark.parametrize("role", ["embedder", "linker", "importance"])
def test_a_single_role_needs_a_shared_kafka(
    role: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("EPISODIC_KAFKA_BOOTSTRAP", raising=False)
    with caplog.at_level(logging.ERROR, logger="episodic"):
        assert resolve(role)([]) == 2
    assert f"`episodic {role}` runs one role against a shared Kafka" in caplog.text


def test_up_leaves_the_linker_out_when_it_is_disabled() -> None:
    assert up_roles(Settings()) == ALL_ROLES and "linker" in ALL_ROLES
    assert up_roles(Settings(linker_enabled=False)) == tuple(r for r in ALL_ROLES if r != "linker")


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

    from episodic.kernel.settings import Settings
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
    assert warn.level == "WARN" and "bm25_context" in warn.message and warn.fix and "re-ingest" in warn.fix
    assert not [
        c for c in check_service(Settings(), "http://x", None, transport=answer("prev:2/16w")) if c.name == "context"
    ]


def test_the_gate_batch_size_reaches_the_consumer(capsys: pytest.CaptureFixture[str]) -> None:
    """`episodic gate --batch-size N` bounds the fetched batches: Faust's max_poll_records."""
    from stack.commands.gate import _parser, gate_config
    from streams.app import create_app

    _topics, options = gate_config(_parser().parse_args(["--batch-size", "7"]))
    app = create_app(Settings(), app_id="t", max_poll_records=options.batch_size)
    assert options.batch_size == 7 and app.conf.broker_max_poll_records == 7
    with pytest.raises(SystemExit):
        _parser().parse_args(["--batch-size", "0"])
    assert "must be at least 1" in capsys.readouterr().err


def test_run_takes_every_role_of_the_table_and_the_recall_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    from stack.commands.run import parser, resolve_role, role_names

    assert set(ROLES) <= set(role_names()) and {"recall", "serve"} <= set(role_names())
    assert all(resolve_role(name) == name for name in ROLES)
    assert resolve_role("recall") == resolve_role("serve") == "http"
    with pytest.raises(ValueError, match=r"unknown role 'gat'.*gate"):
        resolve_role("gat")
    assert main(["run", "gat"]) == 2
    assert "unknown role 'gat'" in capsys.readouterr().err
    args = parser().parse_args(["gate", "--port", "0", "--host", "127.0.0.2", "--data-dir", "/tmp/x"])
    assert (args.role, args.http_port, args.http_host, args.data_dir) == ("gate", 0, "127.0.0.2", Path("/tmp/x"))


@pytest.mark.parametrize("argv", [["run", "gate"], ["run", "embedder"], ["run", "recall"], ["linker"], ["serve"]])
def test_run_refuses_without_a_shared_kafka(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("EPISODIC_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("EPISODIC_TOKENS_FILE", raising=False)
    assert main(argv) == 2
    assert "runs one role against a shared Kafka: set EPISODIC_KAFKA_BOOTSTRAP" in capsys.readouterr().err


def test_dlq_needs_a_subcommand_and_replay_a_selection(capsys: pytest.CaptureFixture[str]) -> None:
    from stack.commands.dlq import main as dlq

    assert dlq([]) == 2 and dlq(["nope"]) == 2 and dlq(["--help"]) == 0
    assert "episodic dlq {ls,replay}" in capsys.readouterr().err
    for bad, why in [
        (["replay"], "or --all for every one"),
        (["replay", "--since", "yesterday"], "since: 'yesterday'"),
        (["replay", "--id", "e1"], "partition:offset"),
        (["replay", "--all", "--max-replays", "0"], "--max-replays must be at least 1"),
    ]:
        with pytest.raises(SystemExit) as e:
            dlq(bad)
        assert e.value.code == 2 and why in capsys.readouterr().err, bad


def test_import_checks_the_file_before_opening_any_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stack.commands.portable import import_main

    assert import_main([str(tmp_path / "missing.jsonl")]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "e1", "workspace_id": "w", "agent_id": "a", "ts": "2026-11-23T00:00:00Z",'
                   ' "entry_type": "t", "severity": "info", "summary": "s"}\n\nnot json\n')  # fmt: skip
    assert import_main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "2 bad line(s), nothing imported" in err and "line 1: memory" in err and "line 3:" in err
