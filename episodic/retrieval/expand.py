"""The memories a recall brings in beside its direct hits, scored below the hit that brought them.

- `walked`: one hop along `similar` and `supports` edges, in both directions (edges point new -> old; the
  inverse is implied at read time); a neighbour scores its parent's score × the edge weight.
- `adjacent`: a hit's previous and next memory in its run (the `previous` / `next` edges of
  `episodic.indexing.context`, kept in the hit's payload), scored `weight` × the hit's score.

Both return entry id -> (score, via) for memories that are not direct hits; the recall engine fetches
them through the request's scope and lets them compete for the k places (`merged`: a direct hit wins a tie).

- `newer_first`: a hit superseded by a newer memory (`superseded_by`, episodic.domain.supersession) gets that
  memory right above it, moved up from lower in the list or brought in (via "supersedes"), with the older
  one's score when its own is lower: an agent reads the current fact first and, below it, what it replaced.

Every hit says why it stands where it does (`placed`, the API's `Hit.placed`): "direct" (its own score for
the query: the store's fused legs, the context leg and the piece prior included), "walk" and "adjacent"
(scored from the hit that brought it in: `PLACED`), "newer" (put right above the memory it supersedes by
`newer_first`, whether it matched or was brought in; a newer memory that already ranked above it keeps its
own placement). Folding places nothing: an owner stands at its own score and lists what it covers in
`folded`. There is no diversity re-rank (MMR was measured worse: eval/README.md, "Folding and supersession").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

WALKED_RELATIONS = ("similar", "supports")
ADJACENT_RELATIONS = ("previous", "next")

Near = dict[str, tuple[float, str]]
# the placement of a memory brought in beside the direct hits, by its `via`
PLACED = {"similar": "walk", "supports": "walk", "adjacent": "adjacent"}


class Scored(Protocol):
    entry_id: str
    score: float
    relations: list[dict[str, Any]]


def walked(hits: Sequence[Scored], relations: Iterable[Any]) -> Near:
    """`relations`: the stored edges touching the hits (objects with src, dst, relation, weight)."""
    by_id = {h.entry_id: h for h in hits}
    near: Near = {}
    for r in relations:
        if r.relation not in WALKED_RELATIONS:
            continue
        for here, there in ((r.src, r.dst), (r.dst, r.src)):
            if here in by_id and there not in by_id:
                score = by_id[here].score * min(1.0, max(0.0, r.weight))
                if there not in near or score > near[there][0]:
                    near[there] = (score, r.relation)
    return near


def adjacent(hits: Sequence[Scored], weight: float) -> Near:
    direct = {h.entry_id for h in hits}
    near: Near = {}
    for h in hits:
        for e in h.relations:
            dst, score = str(e.get("dst", "")), h.score * weight
            if e.get("relation") in ADJACENT_RELATIONS and dst not in direct and score > near.get(dst, (-1.0,))[0]:
                near[dst] = (score, "adjacent")
    return near


H = TypeVar("H", bound=Scored)


def merged(hits: list[H], found: list[H], k: int) -> list[H]:
    """The top k of both, by score; stable, so a direct hit wins a tie."""
    found = sorted(found, key=lambda h: (-h.score, h.entry_id))
    return sorted([*hits, *found], key=lambda h: -h.score)[:k]


class Dated(Scored, Protocol):
    superseded_by: str | None
    via: str
    placed: str


D = TypeVar("D", bound=Dated)


def newer_first(hits: list[D], found: Sequence[D], k: int) -> list[D]:
    """`hits` with each superseded hit's newer memory right above it (one level: the newest of a chain is
    brought up by its own predecessor). `found`: the newer memories that are not hits (fetched through the
    scope; one missing there is simply not shown). The top k."""
    by_id = {h.entry_id: h for h in [*hits, *found]}
    out: list[D] = []
    placed: set[str] = set()
    for h in hits:
        if h.entry_id in placed:
            continue
        newer = by_id.get(h.superseded_by or "")
        if newer is not None and newer.entry_id not in placed and newer is not h:
            if newer not in hits:
                newer.via = "supersedes"
            newer.placed = "newer"
            newer.score = max(newer.score, h.score)
            out.append(newer)
            placed.add(newer.entry_id)
        out.append(h)
        placed.add(h.entry_id)
    return out[:k]
