"""Every label value a metric is initialised with has a writer in the code, and every value written is one
that is initialised up front: no series that nothing sets, no series that appears only when it first fires."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from episodic.indexing.gating import UNEXPECTED_REASON
from episodic.kernel.metrics import (
    AGENT_OUTCOMES,
    DEAD_LETTER_REASONS,
    DECAY_ACTIONS,
    DECAY_OUTCOMES,
    ERROR_STAGES,
    FORGET_SELECTORS,
    INDEX_MODES,
    REFERENCE_OUTCOMES,
    Metrics,
)
from schemas.events import IndexMode
from schemas.journal import DLQ_REASONS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("episodic", "streams", "consumers", "recall", "stack")


def _sources() -> str:  # the packages that write metrics
    return "\n".join(p.read_text() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_error_stages_written_are_the_stages_initialised() -> None:
    written = set(re.findall(r'consumer_errors\.labels\(stage="([a-z_]+)"\)', _sources()))
    assert written == set(ERROR_STAGES), f"written {sorted(written)}, initialised {sorted(ERROR_STAGES)}"


def test_dead_letter_reasons_have_writers() -> None:
    # the gate's reasons: declared in DLQ_REASONS, and raised by the validation with each of them
    validation = "\n".join(p.read_text() for pkg in ("schemas", "episodic") for p in (ROOT / pkg).rglob("*.py"))
    for reason in DLQ_REASONS:
        assert validation.count(f'"{reason}"') >= 2, f"{reason}: declared but never raised"
    assert UNEXPECTED_REASON in DEAD_LETTER_REASONS
    from consumers import poison

    consumer = "\n".join(p.read_text() for p in (ROOT / "consumers").glob("*.py"))
    names = ("BAD_EMBEDDABLE", "BAD_CONTROL", "STORE_REJECTED", "FORGET_FAILED", "ID_TAKEN")
    declared = {getattr(poison, name) for name in names}
    assert set(DEAD_LETTER_REASONS) - set(DLQ_REASONS) - {UNEXPECTED_REASON} == declared | {"bad_review"}
    for name in names:  # the embedding consumer dead-letters with each
        assert f"dead_letter({name}," in consumer, name
    # the importance agent's: a memory.reviewed record that does not decode (streams/importance.py)
    assert "reason=BAD_REVIEW" in (ROOT / "streams" / "importance.py").read_text()


def test_maintenance_labels_have_writers() -> None:
    from dataclasses import fields

    from episodic.maintenance.decay import DecayReport
    from episodic.maintenance.importance import ReferenceResult
    from episodic.maintenance.linker import LinkResult
    from episodic.maintenance.reviews import ReviewResult

    results = {"linker": LinkResult, "importance": ReferenceResult, "reviews": ReviewResult}
    # where each agent is declared (the reviews agent sits in the importance agent's app), and its name there
    homes = {"linker": ("linker", "NAME"), "importance": ("importance", "NAME"), "reviews": ("importance", "REVIEWS")}
    assert set(AGENT_OUTCOMES) == set(results)
    for agent, outcomes in AGENT_OUTCOMES.items():  # each agent writes every outcome from its result's fields
        assert set(outcomes) <= {f.name for f in fields(results[agent])}, agent
        module, name = homes[agent]
        assert f"for outcome in AGENT_OUTCOMES[{name}]:" in (ROOT / "streams" / f"{module}.py").read_text(), agent
    assert set(DECAY_ACTIONS) <= {f.name for f in fields(DecayReport)}
    decay = (ROOT / "episodic" / "maintenance" / "decay.py").read_text()
    assert set(re.findall(r'decay_runs\.labels\(outcome="([a-z_]+)"\)', decay)) == set(DECAY_OUTCOMES)
    assert set(re.findall(r'references\.labels\(outcome="([a-z_]+)"\)', _sources())) == set(REFERENCE_OUTCOMES)


def test_forget_selectors_are_the_selector_kinds() -> None:
    from schemas.events import ForgetSelector

    kinds = {
        ForgetSelector(entry_ids=["e"]).kind,
        ForgetSelector(agent_id="a").kind,
        ForgetSelector(run_id="r").kind,
        ForgetSelector(all=True).kind,
    }
    assert kinds == set(FORGET_SELECTORS)


def test_index_modes_are_the_event_modes() -> None:
    from typing import get_args

    assert set(INDEX_MODES) == set(get_args(IndexMode)) == {"vector", "sparse-only", "duplicate"}
    m = Metrics(CollectorRegistry())
    for mode in INDEX_MODES:
        assert m.registry.get_sample_value("episodic_indexed_total", {"mode": mode}) == 0.0
    assert m.registry.get_sample_value("episodic_indexed_total", {"mode": "unchanged"}) is None


def test_every_reason_and_stage_is_exported_at_zero() -> None:
    m = Metrics(CollectorRegistry())
    for reason in DEAD_LETTER_REASONS:
        assert m.registry.get_sample_value("episodic_dead_lettered_total", {"reason": reason}) == 0.0
    for stage in ERROR_STAGES:
        assert m.registry.get_sample_value("episodic_consumer_errors_total", {"stage": stage}) == 0.0
    for agent, outcomes in AGENT_OUTCOMES.items():
        for outcome in outcomes:
            labels = {"agent": agent, "outcome": outcome}
            assert m.registry.get_sample_value("episodic_agent_events_total", labels) == 0.0
    for selector in FORGET_SELECTORS:
        assert m.registry.get_sample_value("episodic_forgets_total", {"selector": selector}) == 0.0


def test_health_gauges_fold_from_two_threads_at_once_within_their_label_bound() -> None:
    """The health agent (the stack's loop) and an admin health run (the recall service's own loop) may fold
    snapshots at the same moment: neither raises, and the labelled workspaces stay the `limit` lowest."""
    import threading
    from types import SimpleNamespace

    from episodic.domain.health import METRICS

    metrics = Metrics(CollectorRegistry())
    errors: list[BaseException] = []

    def snap(ws: str, score: float) -> Any:
        values = SimpleNamespace(**{m: score for m in METRICS})
        return SimpleNamespace(workspace_id=ws, crew_id=None, score=score, band="green", metrics=values)

    def fold(prefix: str) -> None:
        try:
            for i in range(300):
                metrics.set_health([snap(f"{prefix}-{i}", (i % 97) / 97)], 5)
        except BaseException as e:  # the test reports whatever a race raised
            errors.append(e)

    threads = [threading.Thread(target=fold, args=(p,)) for p in ("agent", "admin")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    labelled = {s.labels["workspace_id"] for m in metrics.health_score.collect() for s in m.samples}
    assert len(labelled) == 5 and all(int(ws.split("-")[1]) % 97 == 0 for ws in labelled)
