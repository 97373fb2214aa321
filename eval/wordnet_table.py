"""The fold rule's word table (episodic/domain/data/synonyms.tsv.gz), derived from WordNet 3.0.

    apt-get install wordnet-base           # Debian's WordNet 3.0 database, in /usr/share/wordnet
    python -m eval.wordnet_table           # writes episodic/domain/data/synonyms.tsv.gz (deterministic)

Why a table in the repository and not WordNet at run time: the fold rule runs in the linker and the render
of every install, and must decide the same everywhere, offline. PyPI has no wheel with WordNet's data in
it (`wn` and `nltk` download theirs at run time), and a system package would make the rule depend on what
the host has installed. So WordNet is read once, here, and what the rule needs is kept, keyed by the
rule's word unit, the Snowball stem of a one-word lemma or of an irregular form of WordNet's exception
lists ("fell" is a form of "fall", "said" of "say"):

- **senses**: the synsets of every sense of each lemma with that stem, and apart from them, for a verb
  sense its hypernyms and verb group, for an adjective sense the adjectives it is similar to ("showed" is a
  way to "teach"). Two stems are related when they share a synset, or one's sense is the other's widened
  sense; never as two sisters under one hypernym ("increase" and "decrease" are both ways to "change",
  "niece" and "nephew" both kin: a noun is never widened), and never when WordNet calls them antonyms.
  Only synsets that two stems or more hold are kept, renumbered densely.
- **verbish**: whether at least half of the stem's senses tagged in WordNet's corpus are verbs,
  adjectives or adverbs (`VERBISH`): a word that says what happened or how, not what or who.

WordNet 3.0 Copyright 2006 by Princeton University; its licence is episodic/domain/data/WORDNET-LICENSE.
"""

from __future__ import annotations

import argparse
import gzip
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import snowballstemmer

WORDNET = Path("/usr/share/wordnet")
OUT = Path(__file__).resolve().parent.parent / "episodic" / "domain" / "data" / "synonyms.tsv.gz"
POS = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}
WIDEN = {"v": {"@", "$"}, "a": {"&"}}  # pointers followed: verb hypernym and verb group; adjective similar-to
ANTONYM = "!"
VERBISH = 0.5  # share of a stem's tagged senses that are verbs, adjectives or adverbs (chosen on dev)


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="latin-1").splitlines() if not line.startswith(" ")]


def senses(root: Path) -> dict[tuple[str, str], tuple[list[str], int]]:
    """(lemma, pos) -> (its synsets, most frequent sense first; how many of its senses are tagged)."""
    out: dict[tuple[str, str], tuple[list[str], int]] = {}
    for name, pos in POS.items():
        for line in _lines(root / f"index.{name}"):
            f = line.split()
            count = int(f[2])
            out[(f[0], pos)] = ([f"{pos}{offset}" for offset in f[-count:]], int(f[-count - 1]))
    return out


def pointers(root: Path) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """(synset -> the synsets its `WIDEN` pointers lead to; the antonym pairs of lemmas), from the data files."""
    out: dict[str, set[str]] = defaultdict(set)
    antonyms: set[tuple[str, str]] = set()
    lemmas: dict[str, list[str]] = {}
    pending: list[tuple[str, str, str]] = []  # (synset, its word number, the antonym's synset and number)
    for name, pos in POS.items():
        for line in _lines(root / f"data.{name}"):
            f = line.split("|")[0].split()
            key, words = f"{pos}{f[0]}", int(f[3], 16)
            lemmas[key] = [f[4 + 2 * w].lower() for w in range(words)]
            i = 4 + 2 * words
            for k in range(int(f[i])):
                symbol, offset, target, where = f[i + 1 + 4 * k : i + 5 + 4 * k]
                other = f"{'a' if target == 's' else target}{offset}"
                if symbol in WIDEN.get(pos, ()):
                    out[key].add(other)
                elif symbol == ANTONYM:
                    pending.append((key, where, other))
    for key, where, other in pending:  # `where`: source word number, target word number (hex, 2 digits each)
        mine, theirs = int(where[:2], 16), int(where[2:], 16)
        if mine and theirs and other in lemmas:
            antonyms.add((lemmas[key][mine - 1], lemmas[other][theirs - 1]))
    return out, antonyms


def exceptions(root: Path) -> list[tuple[str, str, str]]:
    """(irregular form, its lemma, pos) from WordNet's exception lists ("fell fall", "taught teach")."""
    out: list[tuple[str, str, str]] = []
    for name, pos in POS.items():
        for line in (root / f"{name}.exc").read_text(encoding="latin-1").splitlines():
            form, *bases = line.split()
            out.extend((form, base, pos) for base in bases)
    return out


@dataclass
class Table:
    own: dict[str, set[str]]  # stem -> the synsets of its senses
    wide: dict[str, set[str]]  # stem -> the synsets its verb and adjective senses widen to
    verbish: set[str]
    antonyms: set[tuple[str, str]]  # stem pairs, both ways


def table(root: Path) -> Table:
    stem = snowballstemmer.stemmer("english").stemWord
    found, (widen, antonyms) = senses(root), pointers(root)
    t = Table(defaultdict(set), defaultdict(set), set(), set())
    tagged: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def add(key: str, synsets: list[str]) -> None:
        for s in synsets:
            t.own[key].add(s)
            t.wide[key].update(widen.get(s, ()))

    for (lemma, pos), (synsets, count) in found.items():
        if lemma.isalpha():  # one-word lemmas: the rule compares words ("turn_on", "warm-up" are split there)
            add(stem(lemma), synsets)
            tagged[stem(lemma)][pos] += count
    forms: set[str] = set()  # irregular forms of verbs and adjectives ("taught", "ran", "better") say how
    for form, base, pos in exceptions(root):
        if form.isalpha() and (base, pos) in found:
            add(stem(form), found[(base, pos)][0])
            if pos != "n" and stem(form) not in tagged:
                forms.add(stem(form))
    t.verbish = {k for k, by in tagged.items() if 0 < sum(by.values()) * VERBISH <= by["v"] + by["a"] + by["r"]}
    t.verbish |= forms
    t.antonyms = {(stem(a), stem(b)) for a, b in antonyms if a.isalpha() and b.isalpha() and stem(a) != stem(b)}
    t.antonyms |= {(b, a) for a, b in t.antonyms}
    return t


def write(t: Table, path: Path) -> tuple[int, int]:
    """One line a stem, `stem<TAB>v or nothing<TAB>own synsets<TAB>widened synsets<TAB>antonym stems` (synsets
    as hex numbers), then nothing else: the synsets two stems or more hold, numbered densely."""
    members: dict[str, int] = defaultdict(int)
    for key in set(t.own) | set(t.wide):
        for s in t.own.get(key, set()) | t.wide.get(key, set()):
            members[s] += 1
    number = {s: i for i, s in enumerate(sorted(s for s, n in members.items() if n >= 2))}
    against: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(t.antonyms):
        against[a].append(b)

    def ids(synsets: set[str]) -> str:
        return ",".join(f"{i:x}" for i in sorted(number[s] for s in synsets if s in number))

    lines = []
    for key in sorted(set(t.own) | set(t.wide)):
        own, wide = ids(t.own.get(key, set())), ids(t.wide.get(key, set()) - t.own.get(key, set()))
        if own or wide or key in t.verbish:
            flag = "v" if key in t.verbish else ""
            lines.append(f"{key}\t{flag}\t{own}\t{wide}\t{','.join(against.get(key, []))}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:  # mtime 0: reproducible
        gz.write(("\n".join(lines) + "\n").encode())
    return len(lines), len(number)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", type=Path, default=WORDNET, help="WordNet's dict folder (Debian: wordnet-base)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    stems, synsets = write(table(a.wordnet), a.out)
    print(f"{stems} stems, {synsets} shared synsets -> {a.out} ({a.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
