"""The dev sets: corpora of conversation turns with turn-level evidence (SPEC §10 "Benchmarks").

LongMemEval, two sets, as ../shared/datasets/longmemeval/README.md describes them:

- ``oracle``: every question's evidence sessions pooled into ONE corpus (sessions deduplicated by id),
  so the other questions' sessions are distractors. 500 questions, 470 with turn-level evidence.
- ``s``: the 48 questions of the s subset, each with its own haystack of about 50 sessions, each its
  own corpus (its own workspace in the pipeline).

One entry per turn; its text is ``"role: content"`` by default (the README's mapping). A turn's id is
``"{session_id}:{turn_index}"``, unique within a corpus.

LoCoMo, the dev half (``locomo``, ../shared/datasets/locomo-dev/README.md, research use only: read here,
never copied into the repository): five conversations between two people, each its own corpus (workspace
``locomo-<conversation>``), one run per session (``<conversation>-session_N``), one entry per turn with the
entry id ``locomo-<conversation>-<dia_id>``, its text ``"Speaker: text"`` (+ ``" [shares <caption>]"``),
its date the session's. A question's type is its category ("1" to "5").

Each set is split once into a dev part (choices are made on it) and a holdout part (the final check only):
``holdout_of``. LongMemEval: a third of the questions by a stable hash (``holdout``); LoCoMo: whole
conversations (two of five, by the same hash of the workspace), so no holdout question shares a speaker,
a session or a turn with a dev one.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

DATA_DIR = Path(
    os.environ.get("EPISODIC_LONGMEMEVAL_DIR", Path(__file__).resolve().parents[2] / "shared/datasets/longmemeval")
)
FILES = {"oracle": "oracle.jsonl.gz", "s": "s_subset.jsonl.gz"}
LOCOMO_DIR = Path(
    os.environ.get("EPISODIC_LOCOMO_DIR", Path(__file__).resolve().parents[2] / "shared/datasets/locomo-dev")
)
LOCOMO_FILE = "conversations.jsonl.gz"
LOCOMO_HOLDOUT = 2  # conversations of the five held out (the two lowest hashes of their workspace)
SETS = ("oracle", "s", "locomo")


def haystack_time(date: str) -> datetime:
    """'2023/05/20 (Sat) 00:59' (a session's or a question's date) as a UTC instant; 2023-01-01 when unreadable."""
    try:
        d = datetime.strptime(date.split(" (")[0] + " " + date.split(") ")[-1], "%Y/%m/%d %H:%M")
    except (ValueError, IndexError):
        d = datetime(2023, 1, 1)
    return d.replace(tzinfo=UTC)


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

    @property
    def at(self) -> datetime:
        """The entry's time: its session's date plus one second per turn before it (a session keeps its order)."""
        return haystack_time(self.date) + timedelta(seconds=self.index)

    @property
    def ts(self) -> str:
        """`at` in RFC 3339, as the journal entry carries it."""
        return self.at.isoformat().replace("+00:00", "Z")


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
    workspace_id: str = ""  # "": "lme-<name>" (LongMemEval's workspaces)
    agent_id: str = "lme-agent"

    @property
    def workspace(self) -> str:
        return self.workspace_id or f"lme-{self.name}"

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


def holdout_of(corpora: Iterable[Corpus]) -> frozenset[str]:
    """The ids of the holdout questions of one set's corpora: LoCoMo's by conversation (every question of the
    `LOCOMO_HOLDOUT` conversations whose workspace has the lowest SHA-1), LongMemEval's by question
    (`holdout`)."""
    corpora = list(corpora)
    if corpora and all(c.name.startswith("locomo-") for c in corpora):
        names = sorted({c.workspace for c in corpora}, key=lambda w: hashlib.sha1(w.encode()).hexdigest())
        held = set(names[:LOCOMO_HOLDOUT]) if len(names) > LOCOMO_HOLDOUT else set()
        return frozenset(q.id for c in corpora if c.workspace in held for q in c.scored_questions)
    return holdout(q.id for c in corpora for q in c.scored_questions)


_DIA = re.compile(r"D:?(\d+):(\d+)")


def locomo_date(text: str) -> str:
    """LoCoMo's session time ('1:56 pm on 8 May, 2023') in LongMemEval's form ('2023/05/08 (Mon) 13:56'),
    which the harness and the mirror's date line read; ValueError when it does not parse."""
    d = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return f"{d:%Y/%m/%d} ({d:%a}) {d:%H:%M}"


def locomo_evidence(values: Iterable[str]) -> list[str]:
    """The dia ids a question's evidence names: 'D1:3' as it is, and the few malformed items of the file
    ('D8:6; D9:17', 'D:11:26') read as the ids they hold."""
    return [f"D{a}:{b}" for v in values for a, b in _DIA.findall(str(v))]


def locomo_corpus(rec: dict) -> Corpus:
    conv = str(rec["conversation_id"])
    c = Corpus(f"locomo-{conv}", workspace_id=f"locomo-{conv}", agent_id="locomo-agent")
    numbers = sorted(int(k.split("_")[1]) for k in rec if re.fullmatch(r"session_\d+", k))
    for n in numbers:
        date = locomo_date(str(rec[f"session_{n}_date_time"]))
        for j, t in enumerate(rec[f"session_{n}"]):
            text = str(t.get("text", ""))
            if t.get("blip_caption"):
                text += f" [shares {t['blip_caption']}]"
            c.turns.append(
                Turn(f"{c.name}-{t['dia_id']}", f"{conv}-session_{n}", j, str(t["speaker"]), text, date, False)
            )
    ids = {t.id for t in c.turns}
    # LoCoMo gives no question date: its questions are asked after the last session, so that session's date is
    # when they are asked (what the harness sends as the recall's `as_of`, relative times read from it).
    asked = max((t.date for t in c.turns), key=haystack_time, default="")
    for i, qa in enumerate(rec.get("qa", [])):
        evidence = frozenset(e for d in locomo_evidence(qa.get("evidence") or []) if (e := f"{c.name}-{d}") in ids)
        c.questions.append(
            Question(
                id=f"{c.name}-q{i}",
                type=str(qa.get("category", "")),
                question=str(qa["question"]),
                answer=str(qa.get("answer", qa.get("adversarial_answer", ""))),
                date=asked,
                evidence=evidence,
                answer_sessions=frozenset(),
            )
        )
    return c


def load_locomo(data_dir: Path = LOCOMO_DIR, limit: int | None = None) -> list[Corpus]:
    """LoCoMo's conversations in the file's order, one corpus each; `limit`: the first N. An evidence id that
    names no turn of its conversation (one in the dev half) is left out; a question left with no evidence
    is not scored."""
    return [locomo_corpus(rec) for rec in _lines(data_dir / LOCOMO_FILE)][:limit]


def set_names(text: str) -> tuple[str, ...]:
    """--set: 'both' (LongMemEval's oracle and s, the sweeps' default), 'all' (both and LoCoMo) or names."""
    names = {"both": ("oracle", "s"), "all": SETS}.get(text) or tuple(n for n in text.split(",") if n)
    for n in names:
        if n not in SETS:
            raise SystemExit(f"unknown set {n!r} ({', '.join(SETS)}, both, all)")
    return names


def load(name: str, limit: int | None = None, only: str | None = None) -> list[Corpus]:
    if name == "oracle":
        return load_oracle(limit=limit, only=only)
    if name == "s":
        return load_s(limit=limit)
    if name == "locomo":
        return load_locomo(limit=limit)
    raise ValueError(f"unknown set {name!r} ({', '.join(SETS)})")
