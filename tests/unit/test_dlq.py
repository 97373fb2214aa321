"""Dead-letter replay, the pure parts: decoding what is on journal.dlq, selecting, when not to replay, history."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from episodic.indexing.gating import dead_letter
from episodic.lifecycle.dlq import (
    Letter,
    Selector,
    letter_of,
    parse_letter_id,
    parse_since,
    replay_history,
    replay_key,
    skip_reason,
)
from schemas.events import REPLAY_HEADER, DlqRecord, DlqSource, ReplayHistory, ReplayMark

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
ENTRY = {"id": "e1", "workspace_id": "ws", "agent_id": "a", "summary": "x", "severity": "fatal"}


def letter(reason: str = "bad_severity", raw: bytes | None = None, *, offset: int = 7, **kw: object) -> Letter:
    value = raw if raw is not None else json.dumps(ENTRY).encode()
    rec = DlqRecord.build(
        reason=reason, error="severity: bad", raw=value, topic="journal.entries", partition=1, offset=40
    )
    if kw:
        rec = DlqRecord.from_dict({**rec.to_json_dict(), **kw})
    return letter_of(0, offset, int(NOW.timestamp() * 1000), b"key", rec.to_json())


def test_a_dead_letter_never_replayed_is_written_as_before() -> None:
    rec = DlqRecord.build(reason="not_json", error="e", raw=b"{", topic="t", partition=0, offset=1)
    assert set(json.loads(rec.to_json())) == {"reason", "error", "source", "raw_b64", "raw_text"}


def test_garbage_on_the_dlq_topic_is_a_letter_with_a_problem_never_an_error() -> None:
    for value in (b"\xff\xfe", b"[]", b'{"reason": 7}', b"", None):
        got = letter_of(0, 1, None, None, value)
        assert got.record is None and got.problem
        assert got.why_not_replayable() == "not a dead-letter record"
        assert got.view()["status"] == "unreplayable" and got.entry_id is None


def test_what_is_never_replayed() -> None:
    assert letter("forget_failed").why_not_replayable() is not None
    assert letter("bad_control").why_not_replayable() is not None
    assert letter(raw=b"").why_not_replayable() == "no bytes (the record had no value)"
    cut = dead_letter(b"x" * 2_000_000, reason="oversize_summary", error="summary", topic="t", partition=0, offset=0)
    truncated = letter_of(0, 1, None, None, cut.value)
    assert truncated.record is not None and truncated.record.truncated
    assert truncated.why_not_replayable() is not None
    assert skip_reason(truncated, max_replays=3, force=True) is not None  # force never sends cut bytes
    assert letter().why_not_replayable() is None


def test_the_ledger_and_the_limit_skip_unless_forced() -> None:
    mark = ReplayMark(dead_letter=DlqSource("journal.dlq", 0, 7), replayed_to=DlqSource("journal.entries", 0, 9),
                      replays=1, replayed_at=NOW)  # fmt: skip
    marked = dataclasses.replace(letter(), mark=mark)
    assert skip_reason(marked, max_replays=3, force=False) == "replayed already (--force to replay it again)"
    assert skip_reason(marked, max_replays=3, force=True) is None
    worn = letter(replays=3, history=[])
    assert "replayed 3 times already" in str(skip_reason(worn, max_replays=3, force=False))
    assert skip_reason(worn, max_replays=4, force=False) is None


def test_the_history_grows_by_one_failure_a_replay_and_stays_bounded() -> None:
    first = letter()
    h1 = replay_history(first, topic="journal.dlq", now=NOW)
    assert h1.replays == 1 and [(a.reason, a.dead_letter.offset, a.source.offset) for a in h1.history] == [
        ("bad_severity", 7, 40)
    ]
    back = DlqRecord.build(reason="store_rejected", error="no", raw=b"{}", topic="journal.embeddable", partition=0,
                           offset=3).with_replay(ReplayHistory.of_headers([(REPLAY_HEADER, h1.to_json())]))  # fmt: skip
    assert back.replays == 1 and back.history == h1.history
    h = h1
    for _ in range(30):
        rec = DlqRecord.from_dict({**back.to_json_dict(), "replays": h.replays, "history": h.to_json_dict()["history"]})
        h = replay_history(letter_of(0, 9, None, None, rec.to_json()), topic="journal.dlq", now=NOW)
    assert h.replays == 31 and len(h.history) == 10


def test_a_bad_replay_header_is_ignored() -> None:
    assert ReplayHistory.of_headers([(REPLAY_HEADER, b"nope")]) is None
    assert ReplayHistory.of_headers([("other", b"{}")]) is None
    assert ReplayHistory.of_headers(None) is None


def test_the_key_is_the_workspace_else_the_original_key() -> None:
    assert replay_key(letter()) == b"ws"
    assert replay_key(letter(raw=b"not json")) == b"key"


def test_selectors() -> None:
    one = letter()
    assert Selector().matches(one) and Selector().empty
    assert Selector(reasons=frozenset({"bad_severity"})).matches(one)
    assert not Selector(reasons=frozenset({"not_json"})).matches(one)
    assert Selector(since=NOW - timedelta(minutes=1)).matches(one)
    assert not Selector(since=NOW + timedelta(minutes=1)).matches(one)
    assert Selector(ids=frozenset({(0, 7)})).matches(one) and not Selector(ids=frozenset({(1, 7)})).matches(one)
    assert Selector(entry_ids=frozenset({"e1"}), workspace_id="ws").matches(one)
    assert not Selector(workspace_id="other").matches(one)
    assert not Selector(reasons=frozenset({"bad_severity"})).matches(letter_of(0, 1, None, None, b"junk"))


def test_since_and_ids_parse_or_say_why() -> None:
    assert parse_since("2h", now=NOW) == NOW - timedelta(hours=2)
    assert parse_since("90s", now=NOW) == NOW - timedelta(seconds=90)
    assert parse_since("2026-11-20T00:00:00Z") == datetime(2026, 11, 20, tzinfo=UTC)
    # a duration past datetime's range (the explorer's since=99999999999d was an OverflowError: a 500)
    for bad in ("yesterday", "2026-11-20T00:00:00", "5y", "99999999999d", "1" + "0" * 40 + "w", "9999999999999h"):
        with pytest.raises(ValueError, match="since"):
            parse_since(bad, now=NOW)
    assert parse_letter_id("3:120") == (3, 120)
    with pytest.raises(ValueError, match="partition:offset"):
        parse_letter_id("e1")


def test_a_replayed_record_keeps_the_acceptance_stamp_it_carries_and_never_a_later_one() -> None:
    """A record dead-lettered after the gate (journal.embeddable: `store_rejected`, ...) holds its
    `accepted_at`; replayed, it stays that old, so it cannot roll back a version accepted after it."""
    from types import SimpleNamespace

    from streams.gate import GateTopics, process

    earlier = NOW - timedelta(hours=3)
    entry = {**ENTRY, "severity": "info", "entry_type": "summary.generated", "ts": "2026-11-23T08:00:00Z"}
    header = replay_history(letter(), topic="journal.dlq", now=NOW).header()

    def stamp_of(value: dict[str, object], headers: list[tuple[str, bytes]] | None) -> str:
        rec = SimpleNamespace(
            topic="journal.entries", partition=0, offset=1, key=b"ws", value=json.dumps(value).encode(), headers=headers
        )
        sends, _, _ = process([rec], topics=GateTopics(), now=NOW)
        assert [s[0] for s in sends] == ["journal.embeddable"]
        return str(json.loads(sends[0][2])["accepted_at"])

    iso = lambda t: t.isoformat().replace("+00:00", "Z")  # noqa: E731
    carried = {**entry, "accepted_at": iso(earlier), "base_importance": 0.7}
    assert stamp_of(carried, [header]) == iso(earlier)  # replayed: its own stamp
    assert stamp_of(carried, None) == iso(NOW)  # not a replay: a stamp in the input means nothing
    assert stamp_of(entry, [header]) == iso(NOW)  # replayed, never accepted before: stamped now
    future = {**carried, "accepted_at": iso(NOW + timedelta(days=1))}
    assert stamp_of(future, [header]) == iso(NOW)  # never later than now
    assert stamp_of({**carried, "accepted_at": "yesterday"}, [header]) == iso(NOW)
