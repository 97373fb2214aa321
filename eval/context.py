"""Context-aware indexing: the text a leg indexes for an entry, with what came before it folded in.

The entry itself is returned unchanged at recall; only what BM25 and/or the dense model *see* changes.
Context is strictly streaming: the previous entries of the same session (run), never later ones, and the
session's date. ``render`` is the one definition of the indexed text that the sweeps measure, written so
an indexer can reproduce it byte for byte::

    [<date line>\\n][<previous entry N>\\n ... <previous entry 1>\\n]<entry>

- date line (``date=True``): ``"Saturday 20 May 2023 (2023-05-20)"``, the session's (run's) date in
  words and in ISO form, so "in May", "on a Saturday" and "2023-05-20" all share terms with it.
- previous entries (``prev=N``): the N entries before this one in the same session, oldest first, each
  as ``"role: content"`` cut to its first ``words`` whitespace-separated words when ``words`` is set
  (a long assistant answer would otherwise bury a short reply under its own terms).
- run header (``header=True``): the session's first entry, cut the same way, before the previous ones
  (once, when it is not already one of them): what the run is about, for every entry of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from eval.data import Turn


@dataclass(frozen=True, slots=True)
class ContextSpec:
    prev: int = 0  # previous entries of the same session folded in
    date: bool = False  # the session's date line first
    words: int | None = None  # each previous entry cut to its first `words` words (None: whole)
    header: bool = False  # the run's first entry (cut to `words`) instead of / before the previous ones
    next: int = 0  # later entries of the same session folded in after the entry (not streaming: a measure)

    @property
    def off(self) -> bool:
        return self.prev == 0 and not self.date and not self.header and self.next == 0

    def label(self) -> str:
        if self.off:
            return "turn"
        parts = []
        if self.date:
            parts.append("date")
        if self.header:
            parts.append("header" + (f"/{self.words}w" if self.words and not self.prev else ""))
        if self.prev:
            parts.append(f"prev{self.prev}" + (f"/{self.words}w" if self.words else ""))
        if self.next:
            parts.append(f"next{self.next}" + (f"/{self.words}w" if self.words else ""))
        return "+".join(parts)


def parse_ctx(text: str) -> ContextSpec:
    """'prev=1,words=64,date=1' -> ContextSpec (the eval commands' --ctx option)."""
    kw: dict[str, int | bool | None] = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name == "date":
            kw[name] = value in ("1", "true")
        elif name in ("prev", "words", "next"):
            kw[name] = int(value) if value not in ("", "none") else None
        else:
            raise ValueError(f"unknown context option {name!r} (prev, next, words, date)")
    return ContextSpec(**kw)  # type: ignore[arg-type]


def date_line(stamp: str) -> str:
    """'2023/05/20 (Sat) 00:59' -> 'Saturday 20 May 2023 (2023-05-20)'; '' when it does not parse."""
    try:
        d = datetime.strptime(stamp.split(" (")[0].strip(), "%Y/%m/%d")
    except ValueError:
        return ""
    return f"{d:%A} {d.day} {d:%B %Y} ({d:%Y-%m-%d})"


def _cut(text: str, words: int | None) -> str:
    if words is None:
        return text
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words])


def render(turn: Turn, before: Sequence[Turn], spec: ContextSpec, own: bool = True, after: Sequence[Turn] = ()) -> str:
    """The indexed text of `turn`; `before` = the earlier turns of its session, oldest first; `after` = the
    later ones (``spec.next``). own=False: the context lines alone (a separate field)."""
    if spec.off:
        return turn.text() if own else ""
    lines = []
    if spec.date:
        line = date_line(turn.date)
        if line:
            lines.append(line)
    earlier = list(before[-spec.prev :]) if spec.prev else []
    if spec.header and before and (not earlier or earlier[0] is not before[0]):
        earlier.insert(0, before[0])  # the run's first entry, once (it may already be a previous one)
    lines.extend(_cut(t.text(), spec.words) for t in earlier)
    if own:
        lines.append(turn.text())
    lines.extend(_cut(t.text(), spec.words) for t in list(after)[: spec.next])
    return "\n".join(lines)


def rendered(turns: Sequence[Turn], spec: ContextSpec, own: bool = True) -> list[str]:
    """render() for every turn of a corpus, in order (sessions are contiguous and in turn order)."""
    out: list[str] = []
    session: list[Turn] = []
    for i, t in enumerate(turns):
        if not session or session[-1].session_id != t.session_id:
            session = []
        after: list[Turn] = []
        for later in turns[i + 1 : i + 1 + spec.next]:
            if later.session_id != t.session_id:
                break
            after.append(later)
        out.append(render(t, session, spec, own, after))
        session.append(t)
    return out
