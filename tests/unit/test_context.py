"""Context-aware indexing, pure parts (episodic.indexing.context): modes, the folded text (the same bytes the eval
mirror measures), adjacency edges in a payload, the settings, the API fields and the render."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from episodic.domain.context_mode import ContextMode, parse_mode
from episodic.indexing.context import cut, folded_text, set_adjacent
from episodic.kernel.settings import Settings
from episodic.retrieval.render import render
from episodic_client.models import Hit, RecallRequest
from eval.context import ContextSpec
from eval.context import render as mirror_render
from eval.data import Turn


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("off", ContextMode("off", 0, 16)),
        ("prev:1", ContextMode("prev", 1, 16)),
        (" PREV:3 ", ContextMode("prev", 3, 16)),
        ("run-header", ContextMode("run-header", 0, 16)),
    ],
)
def test_modes_parse(text: str, mode: ContextMode) -> None:
    assert parse_mode(text) == mode


@pytest.mark.parametrize("text", ["", "prev", "prev:0", "prev:9", "prev:-1", "prev:1.5", "header", "on"])
def test_bad_modes_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected off, prev:N \(N from 1 to 8\) or run-header"):
        parse_mode(text)


def test_settings_validate_the_mode_and_name_the_field() -> None:
    s = Settings(context_mode="prev:1", context_words=8)
    assert s.context == ContextMode("prev", 1, 8)
    assert Settings().context == ContextMode("prev", 2, 16)  # the default chosen in eval/README.md
    dated = Settings(context_date=True).context
    assert dated == ContextMode("prev", 2, 16, date=True) and dated.label() == "prev:2/16w+date"
    assert Settings(context_mode="off", context_date=True).context.label() == "off"
    with pytest.raises(ValidationError, match="context_mode"):
        Settings(context_mode="prev:99")
    with pytest.raises(ValidationError, match="context_words"):
        Settings(context_words=0)


def _turn(i: int, role: str, content: str) -> Turn:
    return Turn(f"s:{i}", "s", i, role, content, "2023/05/20 (Sat) 00:59", False)


def test_the_folded_text_is_byte_for_byte_what_the_eval_measured() -> None:
    turns = [
        _turn(0, "user", "I went to the concert   last night with my sister and it was " + "very " * 20 + "loud"),
        _turn(1, "assistant", "That sounds fun!"),
        _turn(2, "user", "Yes, last Tuesday, with my sister"),
    ]
    spec = ContextSpec(prev=2, words=16)
    for i, t in enumerate(turns):
        lines = [cut(p.text(), 16) for p in turns[max(0, i - 2) : i]]
        assert folded_text(lines, t.text()) == mirror_render(t, turns[:i], spec)
    assert cut("a  b\tc", 16) == "a  b\tc"  # a short entry is kept as it is
    assert cut("a b c d", 2) == "a b"


def test_an_adjacent_edge_is_set_not_added() -> None:
    payload: dict = {"entry_id": "e2", "relations": [{"dst": "x", "relation": "similar", "weight": 0.9}]}
    assert set_adjacent(payload, "previous", "e1", "t")
    assert not set_adjacent(payload, "previous", "e1", "t")  # already so
    assert set_adjacent(payload, "previous", "e0", "t")  # a late entry in between replaces it
    assert [(e["relation"], e["dst"]) for e in payload["relations"]] == [("similar", "x"), ("previous", "e0")]
    assert payload["links"] == ["e0", "x"]
    assert set_adjacent(payload, "previous", None, "t") and payload["links"] == ["x"]
    assert not set_adjacent(payload, "next", "e2", "t")  # never an edge to itself


def test_the_api_carries_context_and_the_adjacent_option() -> None:
    base = {"workspace_id": "w", "agent_id": "a", "query": "q"}
    assert RecallRequest.model_validate(base).adjacent is None
    assert RecallRequest.model_validate({**base, "adjacent": True}).adjacent is True
    with pytest.raises(ValidationError, match="adjacent"):
        RecallRequest.model_validate({**base, "adjacent": "yes"})
    hit = {
        "entry_id": "e",
        "score": 1.0,
        "age_seconds": 0.0,
        "summary": "s",
        "entry_type": "t",
        "severity": "info",
        "agent_id": None,
        "crew_id": None,
        "ts": "2026-01-01T00:00:00Z",
        "payload": {},
    }
    assert Hit.model_validate(hit).context is None
    got = Hit.model_validate({**hit, "via": "adjacent", "context": [{"entry_id": "d", "text": "user: hi"}]})
    assert got.via == "adjacent" and got.context is not None and got.context[0].text == "user: hi"


def _hit(summary: str, context: list | None) -> SimpleNamespace:
    return SimpleNamespace(
        summary=summary,
        context=context,
        entry_type="summary.generated",
        severity="info",
        agent_id="a",
        age_seconds=0.0,
        score=1.0,
    )


def test_render_shows_the_context_after_the_summary_and_cuts_it_first() -> None:
    ctx = [{"entry_id": "d1", "text": "did you go with anyone?"}, {"entry_id": "d2", "text": ""}]
    text = render([_hit("yes, with my sister", ctx)], 4000).text
    assert "] yes, with my sister (after: did you go with anyone?)\n" in text
    short = render([_hit("x" * 60, [{"entry_id": "d", "text": "y" * 400}])], 460).text
    assert "x" * 60 in short  # the summary is whole; the context was cut
    assert render([_hit("plain", None)], 4000).text.count("(after:") == 0
