"""What the dense model embeds of a memory: its text cut into pieces, one vector each (pure, no IO).

The store keeps a memory's piece vectors as one multivector and scores it by max-sim (the best piece's
cosine), so a piece is the unit a query is matched against. Two modes (`EPISODIC_CHUNK_MODE`):

- ``sentences`` (the default): consecutive sentences packed greedily into pieces of at most ``words``
  whitespace-separated words; a longer sentence is a piece of its own, and a fragment of fewer than
  `MIN_SENTENCE_WORDS` words (a list's "2.", a closing "Good luck!") goes with its neighbour. A memory
  that says one thing in passing ("... by the way, I caught 7 largemouth bass with Alex on 7/10") gets that
  sentence matched on its own instead of averaged into a 256-word-piece window about something else.
  Measured on LongMemEval (eval/README.md, "Sentence pieces"): the dense leg alone on the pooled oracle R@5
  0.330 -> 0.494 (dev), 0.302 -> 0.471 (holdout); single sentences (``words`` small) did worse than packing
  to 32 words.
- ``window``: windows of the model's word pieces with an overlap (the mode before sentences).

Either way no piece is longer than the model reads: `window` (the token-window cutter the embedder
supplies) cuts a piece that is, so the tail of a long memory stays findable (SPEC §10 "Long text").

A `Scheme` names how a model's vectors were cut; it is part of an embedding generation's identity
(episodic.embedding.generations), so a change of the cut re-embeds the store like a change of model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

ChunkMode = Literal["sentences", "window"]

# A sentence ends at . ! or ? (and one closing quote or bracket) followed by white space, or at a line
# break; only the white space is dropped. Abbreviations ("e.g. this") split too: a piece is packed back
# up to `words` words, so such a cut rarely leaves a piece alone.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019)\]]))\s+|\n+")


def sentences(text: str) -> list[str]:
    """`text`'s sentences, stripped, empty ones dropped (a text with no end mark is one sentence)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


# A sentence of fewer words is no piece of its own: a list's "2." or a closing "Good luck!" has no meaning to
# match a query on, and two memories sharing one would look identical to the linker (cosine 1.0 on it).
# Measured on LongMemEval (eval/README.md, "Sentence fragments"): recall unchanged, the linker's edges whose
# best pair is a piece under 8 words 128 -> 53 of ~2,700. Part of the `sentences` cut: a change to it or to
# the splitter must change `Scheme.key`, so that stores are cut again (episodic.embedding.generations); a unit test
# pins the cut (tests/unit/test_chunking.py, test_the_sentences_cut_is_the_one_its_key_names).
MIN_SENTENCE_WORDS = 5


def join_fragments(parts: list[str], min_words: int = MIN_SENTENCE_WORDS) -> list[str]:
    """`parts` with every one of fewer than `min_words` words joined to the one after it (the last one to
    the one before): "2." goes with its item, "Good luck!" with the sentence it closes."""
    out: list[str] = []
    carry = ""
    for s in parts:
        s = f"{carry} {s}" if carry else s
        if len(s.split()) < min_words:
            carry = s
            continue
        out.append(s)
        carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def pack(parts: list[str], words: int) -> list[str]:
    """Consecutive `parts` joined by a space while a piece stays within `words` words."""
    out: list[str] = []
    cur: list[str] = []
    n = 0
    for s in parts:
        w = len(s.split())
        if cur and n + w > words:
            out.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if cur:
        out.append(" ".join(cur))
    return out


def pieces(text: str, mode: ChunkMode, words: int, window: Callable[[str], list[str]]) -> list[str]:
    """The pieces of `text` to embed, in order; never empty for a non-empty text."""
    if mode == "window":
        return window(text)
    if mode != "sentences":
        raise ValueError(f"unknown chunk mode {mode!r} (sentences or window)")
    if words < 1:
        raise ValueError("words must be >= 1")
    packed = pack(join_fragments(sentences(text)), words)
    out = [c for p in packed for c in window(p)]
    return out or window(text)


@dataclass(frozen=True, slots=True)
class Scheme:
    """How a text is cut into vectors: the mode, the words per sentence piece (0 in `window` mode) and the
    token windows (word pieces per window, the model's limit applied, and their overlap). `key()` is its
    compact form, as the generations document records it: ``sentences:32:254:32`` or ``window:254:32``;
    ``window`` alone (`LEGACY`, window 0) is windows whose sizes were not recorded."""

    mode: ChunkMode
    words: int
    window: int
    overlap: int

    def key(self) -> str:
        if self.mode == "window":
            return f"window:{self.window}:{self.overlap}" if self.window else "window"
        return f"sentences:{self.words}:{self.window}:{self.overlap}"

    @classmethod
    def parse(cls, key: str) -> Scheme:
        parts = key.split(":")
        scheme: Scheme | None = None
        try:
            if parts == ["window"]:
                return cls("window", 0, 0, 0)
            if parts[0] == "window" and len(parts) == 3:
                scheme = cls("window", 0, int(parts[1]), int(parts[2]))
            elif parts[0] == "sentences" and len(parts) == 4:
                scheme = cls(cast(ChunkMode, "sentences"), int(parts[1]), int(parts[2]), int(parts[3]))
        except ValueError:
            pass
        if scheme is None:
            raise ValueError(
                f"not a piece scheme: {key!r} (window:<tokens>:<overlap> or sentences:<words>:<tokens>:<overlap>)"
            )
        # as the embedder makes them: a window of at least 8 word pieces, an overlap of at most half of it
        if (
            scheme.window < 8
            or not 0 <= scheme.overlap <= scheme.window // 2
            or (scheme.mode == "sentences" and scheme.words < 1)
        ):
            raise ValueError(f"not a piece scheme: {key!r} (window >= 8, 0 <= overlap <= window/2, words >= 1)")
        return scheme


# What a generation recorded before its pieces were: the token windows every store was cut into before
# sentence pieces, of the sizes configured then (EPISODIC_CHUNK_TOKENS / _OVERLAP_TOKENS, taken to be the
# ones configured now).
LEGACY = "window"


def mode_of(key: str) -> str | None:
    """The chunk mode a pieces key names (`window`, `sentences`), None for a key of no known mode (an
    embedder that does not chunk). A later cutter of a mode is to be keyed `<mode>.<version>:...` (the
    cutters here are version 1, keyed without one); such a key keeps its mode (and its fusion) for a
    process that cannot make its pieces."""
    mode = key.split(":", 1)[0].split(".", 1)[0]
    return mode if mode in ("window", "sentences") else None


def same_cut(a: str, b: str) -> bool:
    """Whether two pieces keys cut texts the same way: equal, or windows where one side's sizes were not
    recorded (`LEGACY`)."""
    return a == b or (LEGACY in (a, b) and a.split(":", 1)[0] == b.split(":", 1)[0] == "window")
