"""The LoCoMo harness (eval.data, eval.pipeline) follows the dataset's protocol, and the choice protocol's
noise (eval.noise) tells a real loss from resampling noise. A made-up conversation stands in for the data
(which stays out of the repository)."""

from __future__ import annotations

import numpy as np
import pytest

from eval.data import holdout_of, locomo_corpus, locomo_date, locomo_evidence
from eval.noise import differences, paired, verdict
from eval.pipeline import Answer, body, cells, covered, entries, report


def conversation(cid: str) -> dict:
    return {
        "conversation_id": cid,
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_2_date_time": "9:05 am on 3 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "We moved to Oslo."}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Look at this.", "blip_caption": "a photo of a cat"},
        ],
        "events_session_1": ["not used"],
        "qa": [
            {"question": "Where did Bo move?", "answer": "Oslo", "evidence": ["D2:1"], "category": 1},
            {"question": "What did Bo share?", "answer": "a cat", "evidence": ["D1:2; D2:1", "D:1:1"], "category": 4},
            {"question": "Unknowable?", "answer": "-", "evidence": ["D9:9"], "category": 5},
        ],
    }


def test_a_session_time_reads_as_the_harness_date() -> None:
    assert locomo_date("1:56 pm on 8 May, 2023") == "2023/05/08 (Mon) 13:56"
    assert locomo_date("12:09 am on 13 September, 2023") == "2023/09/13 (Wed) 00:09"
    with pytest.raises(ValueError):
        locomo_date("yesterday")


def test_malformed_evidence_items_name_the_turns_they_hold() -> None:
    assert locomo_evidence(["D1:3", "D8:6; D9:17", "D:11:26", "D9:1 D4:4"]) == [
        "D1:3",
        "D8:6",
        "D9:17",
        "D11:26",
        "D9:1",
        "D4:4",
    ]


def test_one_entry_per_turn_one_run_per_session_by_the_protocol() -> None:
    c = locomo_corpus(conversation("7"))
    got = list(entries(c))
    assert [e["id"] for e in got] == ["locomo-7-D1:1", "locomo-7-D1:2", "locomo-7-D2:1"]  # sessions in order
    assert {e["workspace_id"] for e in got} == {"locomo-7"}
    assert len({e["agent_id"] for e in got}) == 1
    assert [e["run_id"] for e in got] == ["7-session_1", "7-session_1", "7-session_2"]
    assert [e["ts"] for e in got] == ["2023-05-08T13:56:00Z", "2023-05-08T13:56:01Z", "2023-06-03T09:05:00Z"]
    assert got[1]["summary"] == "Bo: Look at this. [shares a photo of a cat]"
    assert {(e["entry_type"], e["severity"]) for e in got} == {("summary.generated", "info")}
    # evidence as entry ids; an id naming no turn is left out, and a question left without any is not scored
    qs = c.scored_questions
    assert [q.type for q in qs] == ["1", "4"]
    assert qs[1].evidence == {"locomo-7-D1:2", "locomo-7-D2:1", "locomo-7-D1:1"}


def test_every_question_is_asked_at_its_date_unless_the_mode_says_now() -> None:
    """Issue 46: LoCoMo gives no question date; its questions come after the last session (3 June, though the
    file lists it first), which the harness sends as the recall's `as_of`; "+now" leaves it to the clock."""
    c = locomo_corpus(conversation("7"))
    q = c.scored_questions[0]
    assert q.date == "2023/06/03 (Sat) 09:05"
    assert body(c, q, "hybrid", 10)["as_of"] == "2023-06-03T09:05:00Z"
    assert "as_of" not in body(c, q, "hybrid+now", 10)
    both = body(c, q, "hybrid+adjacent+now", 10)
    assert both["adjacent"] is True and both["mode"] == "hybrid" and "as_of" not in both


def test_the_holdout_is_whole_conversations() -> None:
    corpora = [locomo_corpus(conversation(cid)) for cid in ("26", "41", "43", "47", "49")]
    held = holdout_of(corpora)
    by_conversation = {c.name: {q.id in held for q in c.scored_questions} for c in corpora}
    assert all(len(v) == 1 for v in by_conversation.values())  # a conversation is held out whole or not at all
    assert sorted(n for n, v in by_conversation.items() if v == {True}) == ["locomo-43", "locomo-49"]


def test_a_hit_stands_for_its_aliases_and_the_turns_folded_into_it() -> None:
    hit = {"entry_id": "a", "aliases": ["b"], "folded": ["c", "d"]}
    assert covered(hit) == ["a", "b", "c", "d"]
    ans = Answer("q", "locomo", "1", "dev", frozenset({"d", "z"}), (tuple(covered(hit)),), 0.01)
    assert ans.recall(5) == 0.5


def test_the_report_has_every_part_and_category() -> None:
    answers = [
        Answer(f"q{i}", "locomo", str(1 + i % 2), "dev" if i < 4 else "holdout", frozenset({"a"}), ((("a",),)), 0.0)
        for i in range(6)
    ]
    keys = set(cells(answers))
    assert {"locomo/dev", "locomo/dev/1", "locomo/dev/2", "locomo/holdout/1", "locomo/all", "locomo/all/2"} <= keys
    text = report({"hybrid": answers})
    assert "| **dev** (4) | 1.000/1.000 ±0.000 |" in text
    assert "| holdout/2 (1) | 1.000/1.000 |" in text  # holdout category 2: one question


def test_the_paired_bootstrap_tells_a_loss_from_noise() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2, 400).astype(float)
    worse = base.copy()
    worse[np.flatnonzero(base)[:40]] = 0.0  # 40 of 400 questions lose their evidence: -10 points
    assert paired(base, worse).loses
    flipped = base.copy()
    flipped[:6] = 1 - flipped[:6]  # a handful of questions change either way: noise
    d = paired(base, flipped)
    assert not d.loses and not d.gains and d.lo < 0 < d.hi


def test_the_verdict_names_every_cell_that_loses() -> None:
    ids = [f"q{i}" for i in range(200)]
    base = {i: (1.0, 1.0) for i in ids}
    new = {i: ((0.0, 1.0) if n < 60 else (1.0, 1.0)) for n, i in enumerate(ids)}  # R@5 lost in cell a only
    diffs = differences(base, new, {"a": ids[:100], "b": ids[100:]})
    v = verdict(diffs)
    assert v.losses == ("a",) and not v.holds
    assert verdict(differences(base, base, {"a": ids})).holds


def test_the_mirrors_time_legs_read_relative_times_as_told() -> None:
    """eval.methods.question_spans: "now" reads relative times from a clock after the sets (as the pipeline's
    service does), "asked" from the question's date where the set gives one, "off" keeps absolute times only."""
    from eval.methods import question_spans
    from eval.views import Q

    def q(text: str, asked: str = "") -> Q:
        return Q({}, None, frozenset(), "", text=text, asked=asked)  # type: ignore[arg-type]  # no rows read

    def days(spans: tuple) -> list[str]:
        return [f"{s.start:%Y-%m-%d}/{s.end:%Y-%m-%d}" for s in spans]

    asked = "2023/05/30 (Tue) 23:40"
    assert days(question_spans(q("what did I buy last month?", asked), "asked")) == ["2023-04-01/2023-05-01"]
    assert days(question_spans(q("what did I buy last month?", asked), "now")) == ["2025-12-01/2026-01-01"]
    assert days(question_spans(q("what did I buy last month?"), "asked")) == ["2025-12-01/2026-01-01"]  # no date
    assert question_spans(q("what did I buy last month?", asked), "off") == ()
    both = q("what did I buy in May 2023, and last month?", asked)
    assert days(question_spans(both, "off")) == ["2023-05-01/2023-06-01"]


def test_the_adaptive_re_ranks_of_the_mirror_do_what_they_say() -> None:
    """eval.runlevel's issue-46 variants over a made-up conversation: a gate of 0 leaves the fused order, the
    kept head stays first, a neighbour lifts the turn beside it, and the share reads one run's mass."""
    from eval import runlevel as R
    from eval.memories import Memories
    from eval.views import Q

    rec = conversation("7")
    rec["session_1"] = [{"speaker": "Ann", "dia_id": f"D1:{i}", "text": f"turn {i}"} for i in range(1, 5)]
    mem = Memories.build(locomo_corpus(rec))  # memories 0-3: session 1 in order, 4: session 2
    q = Q({}, mem, frozenset(), "")
    idx, sc = np.array([4, 0, 2, 3, 1]), np.array([1.0, 0.9, 0.5, 0.4, 0.3])
    same, _ = R.gated(1.0, lambda *_: 0.0)(q, idx, sc)
    assert same.tolist() == idx.tolist()
    lifted, _ = R.gated(1.0, lambda *_: 1.0)(q, idx, sc)
    assert lifted.tolist()[0] == 0  # session 1's three best outweigh session 2's one
    assert R.head_kept(1.0, 1)(q, idx, sc)[0].tolist()[0] == 4
    assert R.neighbours(1.0)(q, idx, sc)[0].tolist().index(1) < 4  # next to 0 and 2, both candidates
    assert R.share(q, idx, sc, top=5) == pytest.approx(2.1 / 3.1)
