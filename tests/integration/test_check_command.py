"""`episodic check` on a data directory: exit 0 when the store holds its invariants, 1 with the violation
named in the JSON report when it does not (the checks themselves: tests/contract/test_check_contract.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.settings import Settings
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord
from stack.commands.check import main
from stack.stores import open_store

pytestmark = pytest.mark.integration


def rec(i: str) -> EmbeddableRecord:
    at = datetime(2026, 11, 20, 10, tzinfo=UTC)
    return EmbeddableRecord.from_dict(
        {"id": i, "workspace_id": "w1", "agent_id": "a1", "ts": at.isoformat(), "entry_type": "summary.generated",
         "severity": "info", "summary": f"memory {i}", "payload": {}, "base_importance": 0.7, "accepted_at": at}
    )  # fmt: skip


def test_the_command_exits_1_and_names_the_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EPISODIC_DATA_DIR", str(tmp_path))
    store = open_store(Settings(data_dir=tmp_path), dim=384)
    Indexer(store=store, embedder=None, bm25=Bm25Encoder()).index_batch([rec("e1"), rec("e2")])
    store.close()
    assert main([]) == 0
    assert json.loads(capsys.readouterr().out)["memories"] == 2
    store = open_store(Settings(data_dir=tmp_path), dim=384)
    store.set_payloads({point_id("w1", "e2"): {"reference_count": -3}})
    store.close()
    assert main(["--workspace", "w1"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == {"counter_out_of_range": 1} and report["shown"][0]["entry_id"] == "e2"
