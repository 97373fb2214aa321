"""The sweep's per-question-type table (`eval.sweep.type_table`, experiment ``folding-by-type``) scores every
type of each set and part apart, and MMR over folded memories keeps the owners' cover (`eval.folding.mmr`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eval.data import Corpus, Turn
from eval.folding import mmr
from eval.memories import Memories
from eval.methods import single
from eval.sweep import evaluate, type_table
from eval.views import Q, Views


def workspace() -> Memories:
    texts = ["user: my cat is called Tom", "user: I run on Sundays", "user: my cat is called Tom now"]
    turns = [Turn(f"s:{i}", "s", i, "user", t[6:], "2023/05/20 (Sat) 00:59", False) for i, t in enumerate(texts)]
    return Memories.build(Corpus("w", turns))


def question(mem: Memories, evidence: str, type_: str) -> Q:
    return Q({"D": np.array([0.9, 0.5, 0.1])}, mem, frozenset({evidence}), type_)


def test_every_type_gets_its_own_rows_and_the_second_method_is_compared_with_the_first() -> None:
    mem = workspace()
    dev = [question(mem, "s:0", "knowledge-update"), question(mem, "s:2", "knowledge-update")]
    dev.append(question(mem, "s:1", "temporal-reasoning"))
    views = Views({"oracle/dev": dev, "oracle/holdout": [question(mem, "s:1", "temporal-reasoning")]}, {})
    views.by_type = True

    def last_first(q: Q) -> tuple[np.ndarray, np.ndarray]:  # memory 2 first: it moves knowledge-update only
        return np.array([2, 0, 1]), np.array([3.0, 2.0, 1.0])

    res = evaluate(views, {"base": single("D"), "other": last_first})
    assert res["base"]["oracle/dev/knowledge-update"].n == 2
    assert res["base"]["oracle/holdout/temporal-reasoning"].n == 1
    text = type_table(res, "t", views)
    rows = [line for line in text.splitlines() if line.startswith("| oracle")]
    assert [r.split(" (")[0] for r in rows] == [
        "| oracle/dev",
        "| oracle/holdout",
        "| oracle/dev/knowledge-update",
        "| oracle/dev/temporal-reasoning",
        "| oracle/holdout/temporal-reasoning",
    ]
    assert rows[2].endswith("| +0.0/+0.0 |")  # both evidence turns are in either top 5
    assert "other − base (points)" in text


def test_mmr_over_folded_memories_keeps_what_each_owner_covers() -> None:
    mem = workspace()

    def owners(q: Q) -> tuple[np.ndarray, np.ndarray]:
        return np.array([0, 1]), np.array([0.9, 0.5])

    owners.cover = lambda m, i: ["s:0", "s:2"] if i == 0 else m.aliases[i]  # type: ignore[attr-defined]
    picked = mmr(owners, 0.95)
    assert picked.cover(mem, 0) == ["s:0", "s:2"]  # type: ignore[attr-defined]
    assert not hasattr(mmr(single("D"), 0.95), "cover")


def test_the_sweep_scores_the_holdout_only_when_asked(monkeypatch: Any, tmp_path: Path, capsys: Any) -> None:
    """Choices are made on dev: a sweep prints no holdout column (nor scores one) unless `--holdout` asks for
    the final check, and `--part holdout` alone is refused."""
    from eval import experiments, sweep

    mem = workspace()
    views = Views({"oracle/dev": [question(mem, "s:0", "x")], "oracle/holdout": [question(mem, "s:1", "y")]}, {})
    monkeypatch.setitem(experiments.EXPERIMENTS, "tiny", lambda a: (views, {"base": single("D")}, "tiny"))
    monkeypatch.setattr(sweep, "load", lambda *a, **k: [])
    monkeypatch.setattr(sweep, "RESULTS", tmp_path)
    assert sweep.main(["tiny", "--set", "oracle"]) == 0
    plain = capsys.readouterr().out
    assert "oracle/dev (1 q)" in plain and "holdout" not in plain
    assert "holdout" not in (tmp_path / "sweep-tiny.json").read_text()
    assert sweep.main(["tiny", "--set", "oracle", "--holdout"]) == 0
    full = capsys.readouterr().out
    assert "oracle/holdout (1 q)" in full and "holdout mean" in full
    with pytest.raises(SystemExit, match="only with --holdout"):
        sweep.main(["tiny", "--set", "oracle", "--part", "holdout"])
