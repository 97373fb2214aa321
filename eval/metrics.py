"""Turn-level evidence recall@k and hit@k, as the eval reports them.

A ranked result is a list of hits; each hit covers one or more turn ids (a memory and its exact-duplicate
aliases, SPEC §10). ``recall@k`` is the fraction of a question's evidence turns covered by the top k
hits; ``hit@k`` is 1 when at least one evidence turn is covered. Both are averaged over the questions
that have evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Hit = Iterable[str]  # the turn ids one hit covers


def covered(ranked: Sequence[Hit], k: int) -> set[str]:
    out: set[str] = set()
    for ids in ranked[:k]:
        out.update(ids)
    return out


def evidence_recall(ranked: Sequence[Hit], evidence: Iterable[str], k: int) -> float:
    ev = set(evidence)
    if not ev:
        raise ValueError("a question without evidence has no recall")
    if k < 1:
        raise ValueError("k must be >= 1")
    return len(ev & covered(ranked, k)) / len(ev)


def evidence_hit(ranked: Sequence[Hit], evidence: Iterable[str], k: int) -> float:
    return 1.0 if evidence_recall(ranked, evidence, k) > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Score:
    n: int
    recall5: float
    recall10: float
    hit5: float
    hit10: float

    def row(self) -> list[str]:
        return [f"{self.recall5:.3f}", f"{self.recall10:.3f}", f"{self.hit5:.3f}", f"{self.hit10:.3f}"]


def score(results: Iterable[tuple[Sequence[Hit], Iterable[str]]]) -> Score:
    """Average recall@5/@10 and hit@5/@10 over (ranked hits, evidence) pairs."""
    r5 = r10 = h5 = h10 = 0.0
    n = 0
    for ranked, evidence in results:
        ev = set(evidence)
        r5 += evidence_recall(ranked, ev, 5)
        r10 += evidence_recall(ranked, ev, 10)
        h5 += evidence_hit(ranked, ev, 5)
        h10 += evidence_hit(ranked, ev, 10)
        n += 1
    if n == 0:
        return Score(0, 0.0, 0.0, 0.0, 0.0)
    return Score(n, r5 / n, r10 / n, h5 / n, h10 / n)


def table(rows: Sequence[tuple[str, Score]], title: str = "") -> str:
    """A fixed-width text table: one row per method."""
    width = max([len("method")] + [len(name) for name, _ in rows])
    head = f"{'method':<{width}}  {'n':>4}  {'R@5':>6}  {'R@10':>6}  {'hit@5':>6}  {'hit@10':>6}"
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    for name, s in rows:
        lines.append(f"{name:<{width}}  {s.n:>4}  " + "  ".join(f"{v:>6}" for v in s.row()))
    return "\n".join(lines)
