"""The context mode of indexing as a value (`EPISODIC_CONTEXT_MODE`): what `episodic.indexing.context` folds
into a memory's context vector. Pure, no IO; here and not in `indexing` because the settings parse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["off", "prev", "run-header"]
OFF: Kind = "off"
PREV: Kind = "prev"
HEADER: Kind = "run-header"
MAX_PREV = 8
DEFAULT_WORDS = 16
_PREV_MODE = re.compile(r"^prev:([1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class ContextMode:
    kind: Kind = PREV
    n: int = 2
    words: int = DEFAULT_WORDS
    date: bool = False  # the entry's date line first in the folded text (not a default: eval/README.md)

    @property
    def off(self) -> bool:
        return self.kind == OFF

    def label(self) -> str:
        if self.kind == OFF:
            return OFF
        base = f"prev:{self.n}/{self.words}w" if self.kind == PREV else f"{self.kind}/{self.words}w"
        return base + ("+date" if self.date else "")


def parse_mode(text: str, words: int = DEFAULT_WORDS, *, date: bool = False) -> ContextMode:
    """`off`, `prev:N` (1..8) or `run-header`; ValueError naming what is accepted otherwise."""
    t = text.strip().lower()
    if words < 1:
        raise ValueError(f"context words must be at least 1, got {words}")
    if t == OFF:
        return ContextMode(OFF, 0, words)
    if t == HEADER:
        return ContextMode(HEADER, 0, words, date)
    m = _PREV_MODE.match(t)
    if m and 1 <= int(m.group(1)) <= MAX_PREV:
        return ContextMode(PREV, int(m.group(1)), words, date)
    raise ValueError(f"context mode {text!r}: expected off, prev:N (N from 1 to {MAX_PREV}) or run-header")
