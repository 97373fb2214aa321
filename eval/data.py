"""LongMemEval loading: corpora of conversation turns with turn-level evidence (SPEC §10 "Benchmarks").

Two sets, as ../shared/datasets/longmemeval/README.md describes them:

- ``oracle``: every question's evidence sessions pooled into ONE corpus (sessions deduplicated by id),
  so the other questions' sessions are distractors. 500 questions, 470 with turn-level evidence.
- ``s``: the 48 questions of the s subset, each with its own haystack of about 50 sessions, each its
  own corpus (its own workspace in the pipeline).

One entry per turn; its text is ``"role: content"`` by default (the README's mapping). A turn's id is
``"{session_id}:{turn_index}"``, unique within a corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

DATA_DIR = Path(
    os.environ.get("EPISODIC_LONGMEMEVAL_DIR", Path(__file__).resolve().parents[2] / "shared/datasets/longmemeval")
)
FILES = {"oracle": "oracle.jsonl.gz", "s": "s_subset.jsonl.gz"}


@dataclass(frozen=True, slots=True)
class Turn:
    id: str  # "{session_id}:{index}"
    session_id: str
    index: int
    role: str
    content: str
    date: str  # the session's haystack date, "2023/05/20 (Sat) 00:59"
    has_answer: bool

    def text(self, role_prefix: bool = True) -> str:
        return f"{self.role}: {self.content}" if role_prefix else self.content


@dataclass(slots=True)
class Question:
    id: str
    type: str
    question: str
    answer: str
    date: str
    evidence: frozenset[str]  # turn ids with has_answer
    answer_sessions: frozenset[str]


@dataclass(slots=True)
class Corpus:
    """One searchable corpus (one workspace): its turns and the questions asked against it."""

    name: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def scored_questions(self) -> list[Question]:
        """Questions that have turn-level evidence (abstention `_abs` questions have none)."""
        return [q for q in self.questions if q.evidence and not q.id.endswith("_abs")]


def _lines(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _session_turns(sid: str, date: str, session: list[dict]) -> list[Turn]:
    return [
        Turn(
            id=f"{sid}:{i}",
            session_id=sid,
            index=i,
            role=str(t.get("role", "")),
            content=str(t.get("content", "")),
            date=date,
            has_answer=bool(t.get("has_answer", False)),
        )
        for i, t in enumerate(session)
    ]


def _question(rec: dict, turns: list[Turn]) -> Question:
    return Question(
        id=str(rec["question_id"]),
        type=str(rec.get("question_type", "")),
        question=str(rec["question"]),
        answer=str(rec.get("answer", "")),
        date=str(rec.get("question_date", "")),
        evidence=frozenset(t.id for t in turns if t.has_answer),
        answer_sessions=frozenset(str(s) for s in rec.get("answer_session_ids", [])),
    )


def load_oracle(data_dir: Path = DATA_DIR, limit: int | None = None, only: str | None = None) -> list[Corpus]:
    """The pooled oracle corpus: one corpus holding every question's sessions once. `only`: the questions of
    that type alone, pooled (e.g. "knowledge-update"); `limit` then counts those."""
    name = "oracle" if limit is None else f"oracle{limit}"
    corpus = Corpus(name if only is None else f"{name}-{only}")
    seen: dict[str, list[Turn]] = {}
    kept = 0
    for rec in _lines(data_dir / FILES["oracle"]):
        if only is not None and rec.get("question_type") != only:
            continue
        if limit is not None and kept >= limit:
            break
        kept += 1
        own: list[Turn] = []
        for sid, date, sess in zip(
            rec["haystack_session_ids"], rec["haystack_dates"], rec["haystack_sessions"], strict=True
        ):
            sid = str(sid)
            if sid not in seen:
                seen[sid] = _session_turns(sid, str(date), sess)
                corpus.turns.extend(seen[sid])
            else:
                # The same session under another question: has_answer marks belong to this question.
                seen_turns = _session_turns(sid, str(date), sess)
                own.extend(seen_turns)
                continue
            own.extend(seen[sid])
        corpus.questions.append(_question(rec, own))
    return [corpus]


def stratified(corpora: list[Corpus]) -> list[Corpus]:
    """Round-robin over question types, file order within a type: any prefix is a balanced sample."""
    by_type: dict[str, list[Corpus]] = {}
    for c in corpora:
        by_type.setdefault(c.questions[0].type, []).append(c)
    lists = list(by_type.values())
    return [v[i] for i in range(max((len(v) for v in lists), default=0)) for v in lists if i < len(v)]


def load_s(data_dir: Path = DATA_DIR, limit: int | None = None) -> list[Corpus]:
    """The s subset: one corpus (haystack) per question, types interleaved; `limit` takes a prefix."""
    out: list[Corpus] = []
    for rec in _lines(data_dir / FILES["s"]):
        c = Corpus(f"s-{rec['question_id']}")
        seen: set[str] = set()
        own: list[Turn] = []
        for sid, date, sess in zip(
            rec["haystack_session_ids"], rec["haystack_dates"], rec["haystack_sessions"], strict=True
        ):
            sid = str(sid)
            turns = _session_turns(sid, str(date), sess)
            own.extend(turns)
            if sid in seen:
                continue
            seen.add(sid)
            c.turns.extend(turns)
        c.questions.append(_question(rec, own))
        out.append(c)
    return stratified(out)[:limit]


def holdout(question_ids: Iterable[str]) -> frozenset[str]:
    """The holdout third of a set's questions: the third with the lowest SHA-1 of their id (stable, and
    exactly a third even for the 48 s questions). Choices are made on the other two thirds (dev) only;
    holdout is reported beside dev as a check that a choice does not just fit those questions."""
    ids = sorted(set(question_ids), key=lambda i: hashlib.sha1(i.encode()).hexdigest())
    return frozenset(ids[: round(len(ids) / 3)])


def load(name: str, limit: int | None = None, only: str | None = None) -> list[Corpus]:
    if name == "oracle":
        return load_oracle(limit=limit, only=only)
    if name == "s":
        return load_s(limit=limit)
    raise ValueError(f"unknown set {name!r} (oracle or s)")
