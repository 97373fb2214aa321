"""episodic.domain.chunking: the pieces of a memory that get a dense vector each (pure logic, a fake window cutter)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodic.domain.chunking import (
    LEGACY,
    MIN_SENTENCE_WORDS,
    Scheme,
    join_fragments,
    mode_of,
    pack,
    pieces,
    same_cut,
    sentences,
)


def window_of(n_chars: int):
    """A stand-in for the token-window cutter: slices of at most n_chars characters."""

    def cut(text: str) -> list[str]:
        return [text[i : i + n_chars] for i in range(0, len(text), n_chars)] or [text]

    return cut


WIDE = window_of(10_000)


def test_sentences_split_on_end_marks_closing_quotes_and_line_breaks() -> None:
    text = 'I went to the lake. "Was it cold?" she asked.\nYes! It was (very) cold.) Then we left'
    assert sentences(text) == [
        "I went to the lake.",
        '"Was it cold?"',
        "she asked.",
        "Yes!",
        "It was (very) cold.)",
        "Then we left",
    ]
    assert sentences("no end mark at all") == ["no end mark at all"]
    assert sentences("  \n\n ") == []
    assert sentences("version 2.5 is out") == ["version 2.5 is out"]  # no white space after the dot


def test_pack_joins_consecutive_sentences_up_to_the_word_budget() -> None:
    parts = ["one two three.", "four five.", "six seven eight nine.", "ten."]
    assert pack(parts, 5) == ["one two three. four five.", "six seven eight nine. ten."]
    assert pack(parts, 1) == parts  # nothing fits beside anything: one sentence a piece
    assert pack(["a b c d e f g"], 3) == ["a b c d e f g"]  # a longer sentence is a piece of its own
    assert pack([], 5) == []


def test_a_fact_said_in_passing_gets_a_piece_of_its_own() -> None:
    text = (
        "I was thinking of getting a tree stand for deer hunting this season, and I have been reading reviews "
        "of ladder stands and hang-on stands for weeks without deciding anything at all. Can you tell me what "
        "to consider when buying one? Oh, and by the way, I caught 7 largemouth bass on my trip to Lake "
        "Michigan with Alex on 7/10 - that was a great day!"
    )
    got = pieces(text, "sentences", 32, WIDE)
    assert got[-1] == (
        "Oh, and by the way, I caught 7 largemouth bass on my trip to Lake Michigan with Alex on 7/10 - that "
        "was a great day!"
    )
    assert len(got) == 3


def test_list_markers_and_short_closers_go_with_a_neighbour() -> None:
    """A list's "2." or a closing "Good luck!" is no piece of its own: two memories sharing one would be
    cosine 1.0 on it (the linker measured 1.0 edges between unrelated answers on LongMemEval)."""
    text = (
        "Here are three ideas for the weekend trip with your family and the dog. 1. Rent a cabin near the "
        "lake. 2. Visit the old harbour and its market. 3. Try the coastal trail. Good luck!"
    )
    got = pieces(text, "sentences", 8, WIDE)
    assert "2. Visit the old harbour and its market." in got and "3. Try the coastal trail. Good luck!" in got
    assert all(len(p.split()) >= MIN_SENTENCE_WORDS for p in got)
    assert join_fragments(["Yes.", "Done.", "OK."]) == ["Yes. Done. OK."]  # all short: one sentence
    assert join_fragments(["A whole sentence here.", "Thanks!"]) == ["A whole sentence here. Thanks!"]
    assert join_fragments(["Thanks!", "A whole sentence here."]) == ["Thanks! A whole sentence here."]
    assert join_fragments([]) == []


REFERENCE = (
    "Thanks! I moved the checkout service to the new cluster yesterday, and the canary looked fine. "
    '1. Drain the old nodes. 2. Update the DNS records before Friday. 3. Ping "ops" on call.\n'
    "The rollback went well. Version 2.5 is out (finally). Good luck!"
)


def test_the_sentences_cut_is_the_one_its_key_names() -> None:
    """Stores record how their vectors were cut as `Scheme.key` (episodic.embedding.generations), and a key must cut
    the same way for good: a store whose key still matches is never cut again. If this fails, the splitter,
    `join_fragments` or `MIN_SENTENCE_WORDS` changed: give that cut a key of its own (`sentences.2:...`, see
    `chunking.mode_of`: a version field of `Scheme`), so that stores recorded under the old key are
    re-embedded, then update this list."""
    assert Scheme("sentences", 8, 254, 32).key() == "sentences:8:254:32"
    assert pieces(REFERENCE, "sentences", 8, WIDE) == [
        "Thanks! I moved the checkout service to the new cluster yesterday, and the canary looked fine.",
        "1. Drain the old nodes.",
        "2. Update the DNS records before Friday.",
        '3. Ping "ops" on call.',
        "The rollback went well. Version 2.5 is out (finally). Good luck!",
    ]


def test_window_mode_is_the_window_cutter_alone() -> None:
    text = "First sentence. Second sentence."
    assert pieces(text, "window", 32, window_of(10)) == window_of(10)(text)


def test_a_piece_longer_than_the_model_reads_is_cut_by_the_window() -> None:
    long_sentence = "word " * 50
    got = pieces("A short one but whole. " + long_sentence.strip() + ".", "sentences", 8, window_of(60))
    assert got[0] == "A short one but whole."
    assert all(len(p) <= 60 for p in got) and len(got) > 2
    assert "".join(got[1:]) == long_sentence.strip() + "."


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk mode"):
        pieces("x", "paragraphs", 32, WIDE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="words"):
        pieces("x", "sentences", 0, WIDE)


def test_a_text_of_white_space_still_has_a_piece() -> None:
    assert pieces("   ", "sentences", 32, WIDE) == ["   "]
    assert pieces("", "sentences", 32, WIDE) == [""]


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n'\"")), max_size=300), st.integers(1, 40))
def test_pieces_keep_every_word_in_order(text: str, words: int) -> None:
    got = pieces(text, "sentences", words, WIDE)
    assert got, "a text always has at least one piece"
    assert " ".join(got).split() == text.split()
    for p in got:  # a piece over the budget is a single sentence (its fragments joined to it)
        assert len(p.split()) <= words or len(join_fragments(sentences(p))) <= 1 or p.strip() == ""
    if len(text.split()) >= MIN_SENTENCE_WORDS:  # no fragment stands alone
        assert all(len(p.split()) >= MIN_SENTENCE_WORDS for p in got)


@pytest.mark.parametrize(
    "scheme", [Scheme("sentences", 32, 254, 32), Scheme("window", 0, 254, 32), Scheme("sentences", 8, 126, 0)]
)
def test_a_scheme_round_trips_through_its_key(scheme: Scheme) -> None:
    assert Scheme.parse(scheme.key()) == scheme


def test_the_legacy_scheme_is_windows_of_unrecorded_sizes_and_cuts_like_any_windows() -> None:
    assert LEGACY == "window" and Scheme.parse(LEGACY) == Scheme("window", 0, 0, 0)
    assert same_cut(LEGACY, "window:254:32") and same_cut("window:126:16", LEGACY) and same_cut(LEGACY, LEGACY)
    assert not same_cut(LEGACY, "sentences:32:254:32") and not same_cut("window:254:32", "window:126:16")
    assert not same_cut(LEGACY, "whole") and same_cut("whole", "whole")  # an embedder that does not chunk


def test_a_later_cutters_key_keeps_its_mode_where_it_cannot_be_made() -> None:
    """A later cutter of a mode is keyed `<mode>.<version>`: a process of this version cannot make those
    pieces (parse refuses the key, so none of its embedders is taken for that generation's documents),
    but its recall still fuses with that mode's weights."""
    assert mode_of("sentences.2:32:254:32") == "sentences" and mode_of("window.3:254:32") == "window"
    assert mode_of("sentences:32:254:32") == "sentences" and mode_of("whole") is None and mode_of("pages.2:1") is None
    with pytest.raises(ValueError, match="not a piece scheme"):
        Scheme.parse("sentences.2:32:254:32")
    assert not same_cut(LEGACY, "window.2:254:32")  # another cutter's windows, not the windows of the old days


@pytest.mark.parametrize(
    "key",
    ["", "window:254", "sentences:32:254", "pages:1:2:3", "window:a:32", "x" * 300, "window:254:254",
     "window:-3:0", "window:0:0", "window:7:0", "sentences:0:254:32", "sentences:32:254:-1", "window:"],
)  # fmt: skip
def test_a_garbage_key_is_refused_naming_it(key: str) -> None:
    with pytest.raises(ValueError, match="not a piece scheme"):
        Scheme.parse(key)
