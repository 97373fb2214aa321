"""Every label value a metric is initialised with has a writer in the code, and every value written is one
that is initialised up front: no series that nothing sets, no series that appears only when it first fires."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from episodic.gating import UNEXPECTED_REASON
from episodic.metrics import DEAD_LETTER_REASONS, ERROR_STAGES, INDEX_MODES, Metrics
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
    from consumers.poison import BAD_EMBEDDABLE, STORE_REJECTED

    consumer = (ROOT / "consumers" / "embedding.py").read_text()
    assert set(DEAD_LETTER_REASONS) - set(DLQ_REASONS) - {UNEXPECTED_REASON} == {BAD_EMBEDDABLE, STORE_REJECTED}
    for name in ("BAD_EMBEDDABLE", "STORE_REJECTED"):  # the consumer dead-letters with both
        assert f"dead_letter({name}," in consumer, name


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
