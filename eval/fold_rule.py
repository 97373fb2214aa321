"""The fold rule, measured: precision and recall of `episodic.domain.folding.near_duplicate` on labelled pairs.

    python -m eval.fold_rule                   # `make eval-fold`: today's rule, the shipped rule, the variants
    python -m eval.fold_rule --build-pairs     # eval/data/fold_groups.jsonl -> eval/data/fold_pairs.jsonl
    python -m eval.fold_rule --rarity          # the rarity experiment (issue 47 item 1; not in the product)

The pairs (eval/data/fold_pairs.jsonl, how they were made: eval/data/README.md) are true paraphrases
(`fold: true`) and near misses (`fold: false`: one entity, number, date, negation, actor or outcome
changed), from 100 groups of four texts. A group is either all dev or all holdout (a stable hash of its
id, 3 in 5 dev), so no text of the holdout was seen while the rule was chosen on dev.

Each text is embedded by the product's own model and pieces (`load_model`, `embed_documents`), and the
cosine of a pair is the one the linker compares: the best pair of pieces, or for texts of several pieces
the lower of that and their mean vectors' cosine. Precision = folded paraphrases / everything folded;
recall = folded paraphrases / paraphrases. "main" is the rule that shipped before (cosine >= 0.86, the
same numbers and dates, content-word Jaccard >= 0.8), computed here from the same token functions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from episodic.domain.folding import FoldRule, content_tokens, fact_tokens, jaccard, near_duplicate, reading

DATA = Path(__file__).resolve().parent / "data"
GROUPS = DATA / "fold_groups.jsonl"
# Written blind to the rule (eval/data/README.md), each read once for a rule chosen before: its own split
FRESH = {
    DATA / "fold_groups_fresh.jsonl": "fresh",
    DATA / "fold_groups_fresh2.jsonl": "fresh2",
    DATA / "fold_groups_fresh3.jsonl": "fresh3",
    DATA / "fold_groups_fresh4.jsonl": "fresh4",
    DATA / "fold_groups_fresh5.jsonl": "fresh5",
}
PAIRS = DATA / "fold_pairs.jsonl"
CACHE = Path(__file__).resolve().parent / "results" / "fold_vectors.npz"
# (first text, second text, fold, variant): a paraphrase of the base, the same paraphrase of the changed base,
# and the change seen plainly (minimal) or through the rewording (reworded)
PAIRINGS = (
    ("a", "p", True, "paraphrase"),
    ("m", "mp", True, "paraphrase"),
    ("a", "m", False, "minimal"),
    ("p", "mp", False, "minimal"),
    ("a", "mp", False, "reworded"),
    ("p", "m", False, "reworded"),
)


def split_of(group: str) -> str:
    return "dev" if int(hashlib.sha1(group.encode()).hexdigest(), 16) % 5 < 3 else "holdout"


def build_pairs() -> list[dict]:
    """The labelled pairs of every group, in file order."""
    out = []
    groups = [(path, line) for path in (GROUPS, *FRESH) for line in path.read_text(encoding="utf-8").splitlines()]
    for path, line in groups:
        g = json.loads(line)
        for x, y, fold, variant in PAIRINGS:
            out.append(
                {
                    "id": f"{g['group']}-{x}-{y}",
                    "group": g["group"],
                    "source": g["source"],
                    "split": FRESH.get(path) or split_of(g["group"]),
                    "kind": "paraphrase" if fold else g["kind"],
                    "variant": variant,
                    "fold": fold,
                    "a": g[x],
                    "b": g[y],
                }
            )
    return out


def load_pairs() -> list[dict]:
    return [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]


def vectors(texts: list[str]) -> dict[str, np.ndarray]:
    """Each text's piece vectors (pieces x dim), by the product's model; cached in eval/results."""
    key = hashlib.sha1("\x00".join(sorted(texts)).encode()).hexdigest()
    if CACHE.exists():
        with np.load(CACHE, allow_pickle=True) as z:
            if str(z["key"]) == key:
                return dict(z["vectors"].item())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from episodic.embedding.embedder import load_model
    from episodic.kernel.settings import Settings

    model = load_model("all-MiniLM-L6-v2", Settings())
    found = dict(zip(texts, model.embed_documents(texts), strict=True))
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    np.savez(CACHE, key=np.array(key), vectors=np.array(found, dtype=object))
    return found


def near_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The linker's cosine of two memories (episodic.maintenance.linker: min of best pair and mean vectors)."""
    best = float(np.max(a @ b.T))
    if len(a) == 1 and len(b) == 1:
        return best
    ma, mb = a.mean(axis=0), b.mean(axis=0)
    return min(best, float(ma @ mb / max(np.linalg.norm(ma) * np.linalg.norm(mb), 1e-12)))


Rule = Callable[[float, str, str], bool]


def main_rule(cosine: float, a: str, b: str) -> bool:
    """The rule before this one: cosine >= 0.86, the same numbers and dates, content-word Jaccard >= 0.8."""
    ta, tb = content_tokens(a), content_tokens(b)
    return cosine >= 0.86 and fact_tokens(ta) == fact_tokens(tb) and jaccard(ta, tb) >= 0.8


def shipped(rule: FoldRule) -> Rule:
    return lambda cosine, a, b: near_duplicate(cosine, a, b, rule).fold


@dataclass
class Score:
    pairs: int = 0
    paraphrases: int = 0
    folded_paraphrases: int = 0
    folded_misses: int = 0

    @property
    def recall(self) -> float:
        return self.folded_paraphrases / self.paraphrases if self.paraphrases else 0.0

    @property
    def precision(self) -> float:
        folded = self.folded_paraphrases + self.folded_misses
        return self.folded_paraphrases / folded if folded else 1.0

    def cell(self) -> str:
        return f"{self.precision:.3f} / {self.recall:.3f} ({self.folded_misses})"


def score(rule: Rule, pairs: list[dict], cos: dict[str, float]) -> Score:
    s = Score()
    for p in pairs:
        folds = rule(cos[p["id"]], p["a"], p["b"])
        s.pairs += 1
        s.paraphrases += p["fold"]
        s.folded_paraphrases += folds and p["fold"]
        s.folded_misses += folds and not p["fold"]
    return s


BEFORE = "before issue 47: cosine 0.86, Jaccard 0.8, same numbers and dates"
SHIPPED = "SHIPPED: gate 0.75, same facts, names, negations, outcomes; WordNet-related words, +2 words"


def rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {BEFORE: main_rule}
    out[SHIPPED] = shipped(FoldRule())
    out["  no WordNet (compounds, outcome words only)"] = shipped(FoldRule(synonyms=False))
    for n in (1, 2, 3):
        tag = " (chosen on dev first)" if n == 2 else ""
        out[f"  + {n} verbish swap{'s' if n > 1 else ''}{tag}"] = shipped(FoldRule(swaps=n))
    for cos in (0.70, 0.80, 0.85, 0.90):
        out[f"  gate {cos:.2f}"] = shipped(FoldRule(cosine=cos))
    for add in (0, 1, 4):
        out[f"  +{add} words"] = shipped(FoldRule(additions=add))
    return out


def report(pairs: list[dict], cos: dict[str, float]) -> str:
    parts = {split: [p for p in pairs if p["split"] == split] for split in ("dev", "holdout", *FRESH.values())}
    parts["all"] = pairs
    lines = [
        f"pairs: {len(pairs)} ({sum(p['fold'] for p in pairs)} paraphrases, "
        f"{sum(not p['fold'] for p in pairs)} near misses); "
        + ", ".join(f"{split} {len(ps)}" for split, ps in parts.items() if split != "all"),
        "cells: precision / recall (near misses folded)",
        "",
        "| rule | " + " | ".join(parts) + " |",
        "|---|" + "---|" * len(parts),
    ]
    chosen = rules()
    for name, rule in chosen.items():
        lines.append(f"| {name} | " + " | ".join(score(rule, ps, cos).cell() for ps in parts.values()) + " |")
    last = list(FRESH.values())[-1]
    lines += ["", f"By source and by kind ({last}, the last set written blind; the near misses of a kind, and the "
              "paraphrases), before -> shipped:"]  # fmt: skip
    held = parts[last]
    base, new = chosen[BEFORE], chosen[SHIPPED]
    for field in ("source", "kind"):
        for value in sorted({p[field] for p in held}):
            ps = [p for p in held if p[field] == value]
            a, b = score(base, ps, cos), score(new, ps, cos)
            what = "folded" if value == "paraphrase" or field == "source" else "near misses folded"
            n = a.folded_paraphrases + a.folded_misses, b.folded_paraphrases + b.folded_misses
            lines.append(f"  {field} {value}: {len(ps)} pairs, {what} {n[0]} -> {n[1]}; precision / recall "
                         f"{a.cell()} -> {b.cell()}")  # fmt: skip
    return "\n".join(lines)


def common_words(share: float, df: Counter[str], documents: int) -> Rule:
    """The shipped rule, except that the content words it finds different on both sides fold when every one
    of them is common: in at least `share` of the workspace's documents (`df`, stems by document). The idea
    (issue 47): a rewording swaps everyday words ("due" / "deadline", "goal" / "hope"), a near miss swaps a
    rare one (a service, an item). An outcome word one text states alone still refuses."""
    rule = FoldRule()

    def fold(cosine: float, a: str, b: str) -> bool:
        v = near_duplicate(cosine, a, b, rule)
        if v.fold or not v.reason.startswith("different words: "):
            return v.fold
        words = [w for side in v.reason.split(": ", 1)[1].split(" / ") for w in side.split(", ")]
        if any(w.endswith(("+", "-")) for w in words):
            return False
        return all(df.get(w, 0) >= share * documents for w in words)

    return fold


def rarity(pairs: list[dict], cos: dict[str, float]) -> str:
    """The rarity experiment: document frequencies from the dev sets' turns (LongMemEval oracle and LoCoMo's
    dev conversations, a stand-in for a workspace's statistics); shares chosen a priori (1 %, 0.5 %), the
    choice on dev, the holdout read once for the chosen share."""
    from eval.data import holdout_of, load

    df: Counter[str] = Counter()
    documents = 0
    for name in ("oracle", "locomo"):
        for c in load(name):
            held = holdout_of([c]) if name == "locomo" else frozenset()
            if held and all(q.id in held for q in c.scored_questions):
                continue  # a held-out conversation
            for t in c.turns:
                documents += 1
                df.update(reading(t.content).content)
    dev = [p for p in pairs if p["split"] == "dev"]
    lines = [f"rarity: {documents} documents; cells precision / recall (near misses folded)"]
    results = {}
    for share in (0.01, 0.005):
        s = score(common_words(share, df, documents), dev, cos)
        results[share] = s
        lines.append(f"  dev, words in >= {share:.1%} of documents: {s.cell()}")
    ok = [sh for sh, s in results.items() if s.precision >= 0.99]
    if ok:
        chosen = max(ok, key=lambda sh: results[sh].recall)
        once = score(common_words(chosen, df, documents), [p for p in pairs if p["split"] == "holdout"], cos)
        lines.append(f"  holdout, the share chosen on dev ({chosen:.1%}): {once.cell()}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-pairs", action="store_true", help="write eval/data/fold_pairs.jsonl from the groups")
    ap.add_argument("--rarity", action="store_true", help="the common-words experiment (dev, then holdout once)")
    a = ap.parse_args()
    if a.build_pairs:
        pairs = build_pairs()
        PAIRS.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
        print(f"{len(pairs)} pairs -> {PAIRS}")
        return
    pairs = load_pairs()
    vecs = vectors(sorted({t for p in pairs for t in (p["a"], p["b"])}))
    cos = {p["id"]: near_cosine(vecs[p["a"]], vecs[p["b"]]) for p in pairs}
    print(rarity(pairs, cos) if a.rarity else report(pairs, cos))


if __name__ == "__main__":
    main()
