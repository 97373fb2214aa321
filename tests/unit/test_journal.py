"""The journal entry model and parser (SPEC §3): every rule, and the dead-letter reason it maps to."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemas.events import EmbeddableRecord, InvalidRecord
from schemas.journal import (
    DLQ_REASONS,
    MAX_DEPTH,
    MAX_PAYLOAD_BYTES,
    MAX_SUMMARY_CHARS,
    InvalidEntry,
    JournalEntry,
    parse_entry,
)
from tests.unit.journal_strategies import base_entry, entries


def entry(**over: Any) -> dict[str, Any]:
    """The shared base entry at severity warn, with this module's summary and payload; `_DROP` drops a field."""
    mine = {"severity": "warn", "summary": "the deploy was escalated to a human", "payload": {"k": "v"}}
    return base_entry(**{**mine, **{k: ... if v is _DROP else v for k, v in over.items()}})


_DROP = object()


def raw(**over: Any) -> bytes:
    return json.dumps(entry(**over)).encode()


VALID: list[tuple[str, bytes]] = [
    (
        "minimal",
        json.dumps(
            {k: entry()[k] for k in ("id", "workspace_id", "agent_id", "ts", "entry_type", "severity", "summary")}
        ).encode(),
    ),
    ("full", raw(refs={"episodic": True, "supports": ["a", "b"], "extra": 1}, priority="pin")),
    ("offset ts", raw(ts="2026-03-01T12:00:00.123456+05:30")),
    ("lower z", raw(ts="2026-03-01t12:00:00z")),
    ("space separator", raw(ts="2026-03-01 12:00:00Z")),
    ("null optionals", raw(crew_id=None, run_id=None, refs=None, priority=None)),
    ("null payload", raw(payload=None)),
    ("max summary", raw(summary="x" * MAX_SUMMARY_CHARS)),
    ("unicode summary", raw(summary="déploiement échoué ✓")),
    ("unknown fields ignored", raw(color="blue")),
    ("max id", raw(id="i" * 128)),
    ("every severity debug", raw(severity="debug")),
    ("every severity info", raw(severity="info")),
    ("every severity error", raw(severity="error")),
    ("every priority high", raw(priority="high")),
    ("every priority permanent", raw(priority="permanent")),
]


@pytest.mark.parametrize(("name", "value"), VALID, ids=[n for n, _ in VALID])
def test_valid_entries_parse(name: str, value: bytes) -> None:
    e = parse_entry(value)
    assert e.id.startswith("e-") or e.id == "i" * 128
    assert e.ts_datetime.tzinfo is not None


INVALID: list[tuple[str, bytes | None, str, str]] = [
    # (case, raw, reason, a word the error must name)
    ("tombstone", None, "not_json", "tombstone"),
    ("empty bytes", b"", "not_json", "JSON"),
    ("not utf-8", b"\xff\xfe{}", "not_utf8", "UTF-8"),
    ("latin-1", '{"summary": "caf\xe9"}'.encode("latin-1"), "not_utf8", "UTF-8"),
    ("not json", b"{oops", "not_json", "JSON"),
    ("trailing garbage", raw() + b"}", "not_json", "JSON"),
    ("array", b"[1, 2]", "not_object", "list"),
    ("null", b"null", "not_object", "null"),
    ("string", b'"hello"', "not_object", "str"),
    ("number", b"42", "not_object", "int"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "not_json", "JSON"),
    ("missing id", raw(id=_DROP), "missing_field", "id"),
    ("missing workspace", raw(workspace_id=_DROP), "missing_field", "workspace_id"),
    ("missing agent", raw(agent_id=_DROP), "missing_field", "agent_id"),
    ("missing ts", raw(ts=_DROP), "missing_field", "ts"),
    ("missing type", raw(entry_type=_DROP), "missing_field", "entry_type"),
    ("missing severity", raw(severity=_DROP), "missing_field", "severity"),
    ("missing summary", raw(summary=_DROP), "missing_field", "summary"),
    ("empty id", raw(id=""), "empty_field", "id"),
    ("blank workspace", raw(workspace_id="   "), "empty_field", "workspace_id"),
    ("empty agent", raw(agent_id=""), "empty_field", "agent_id"),
    ("empty summary", raw(summary=""), "empty_field", "summary"),
    ("blank summary", raw(summary=" \n\t"), "empty_field", "summary"),
    ("empty type", raw(entry_type=""), "empty_field", "entry_type"),
    ("unknown severity", raw(severity="fatal"), "bad_severity", "severity"),
    ("severity case", raw(severity="WARN"), "bad_severity", "severity"),
    ("ts words", raw(ts="yesterday"), "bad_timestamp", "ts"),
    ("ts date only", raw(ts="2026-03-01"), "bad_timestamp", "ts"),
    ("ts no offset", raw(ts="2026-03-01T12:00:00"), "bad_timestamp", "ts"),
    ("ts bad month", raw(ts="2026-13-01T12:00:00Z"), "bad_timestamp", "ts"),
    ("ts epoch number", raw(ts=1700000000), "bad_timestamp", "ts"),
    ("oversize summary", raw(summary="x" * (MAX_SUMMARY_CHARS + 1)), "oversize_summary", "summary"),
    ("oversize payload", raw(payload={"blob": "y" * MAX_PAYLOAD_BYTES}), "oversize_payload", "payload"),
    ("payload list", raw(payload=[1, 2]), "payload_not_object", "payload"),
    ("payload string", raw(payload="text"), "payload_not_object", "payload"),
    ("id too long", raw(id="i" * 129), "invalid_field", "id"),
    ("id not string", raw(id=7), "invalid_field", "id"),
    ("bad priority", raw(priority="urgent"), "invalid_field", "priority"),
    ("refs not object", raw(refs=[1]), "invalid_field", "refs"),
    ("refs.episodic not bool", raw(refs={"episodic": "yes"}), "invalid_field", "refs"),
]


@pytest.mark.parametrize(("case", "value", "reason", "word"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_entries_raise_with_reason(case: str, value: bytes | None, reason: str, word: str) -> None:
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(value)
    assert ei.value.reason == reason, ei.value.error
    assert ei.value.reason in DLQ_REASONS
    assert word.lower() in ei.value.error.lower()


def test_payload_limit_is_on_encoded_bytes() -> None:
    # 3-byte characters: under the limit in characters, over it in UTF-8 bytes
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(raw(payload={"t": "€" * (MAX_PAYLOAD_BYTES // 3 + 10)}))
    assert ei.value.reason == "oversize_payload"
    parse_entry(raw(payload={"t": "€" * (MAX_PAYLOAD_BYTES // 3 - 100)}))


def test_the_fast_decode_takes_clean_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: valid records never reach the slow path that explains refusals."""
    import schemas.journal as journal

    def refuse(raw: Any) -> Any:
        raise AssertionError("slow path")

    monkeypatch.setattr(journal, "_explain", refuse)
    for _name, value in VALID:
        parse_entry(value)


@pytest.mark.parametrize("seed", range(20))
def test_reason_is_the_first_bad_field_in_field_order_whatever_the_key_order(seed: int) -> None:
    import random

    bad = entry(workspace_id=" ", severity="fatal", ts="nope", payload=[1], priority="x", crew_id=5)
    items = list(bad.items())
    random.Random(seed).shuffle(items)
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(json.dumps(dict(items)).encode())
    assert (ei.value.reason, ei.value.error.split(":")[0]) == ("empty_field", "workspace_id")
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(json.dumps(dict(items[::-1]) | {"workspace_id": "w"}).encode())
    assert (ei.value.reason, ei.value.error.split(":")[0]) == ("invalid_field", "crew_id")


@pytest.mark.parametrize(
    ("ts", "canonical"),
    [
        ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00Z"),
        ("2026-03-01t12:00:00.5z", "2026-03-01T12:00:00.500000Z"),
        (" 2026-03-01 12:00:00+00:00 ", "2026-03-01T12:00:00Z"),
        ("2026-03-01T12:00:00.1234567-05:30", "2026-03-01T12:00:00.123456-05:30"),
        ("2026-03-01T12:00:00+0530", "2026-03-01T12:00:00+05:30"),
    ],
)
def test_ts_is_kept_as_its_canonical_text(ts: str, canonical: str) -> None:
    e = parse_entry(raw(ts=ts))
    assert e.ts == canonical
    assert e.ts_datetime == datetime.fromisoformat(ts.strip().replace("z", "Z"))


def test_what_only_the_reference_parser_reads_is_still_accepted() -> None:
    """Big integers and duplicate keys: accepted as before (msgspec's reader refuses some of them, the
    standard library's takes them)."""
    base = raw()[:-1]
    e = parse_entry(base + b', "payload": {"d": 10000000000000000000000, "e": [1.5, -2e300]}}')
    assert e.payload == {"d": 10**22, "e": [1.5, -2e300]}
    assert parse_entry(b'{"id": 1, ' + raw()[1:]).id == "e-1"  # duplicate key: the last one counts


@pytest.mark.parametrize("number", [b"NaN", b"-Infinity", b"Infinity", b"1e400", b"-1E999"])
@pytest.mark.parametrize("field", ["payload", "refs"])
def test_numbers_json_cannot_hold_are_refused_naming_their_path(number: bytes, field: str) -> None:
    """NaN, ±Infinity and numbers beyond a double are not JSON numbers (RFC 8259): the entry could not be
    forwarded as it was sent, so it goes to the dead-letter topic with the path to the number."""
    body = b'{"ok": 1, "deep": [0, {"x": ' + number + b"}]}"
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(raw()[:-1] + b', "' + field.encode() + b'": ' + body + b"}")
    assert ei.value.reason == "invalid_field"
    assert ei.value.error.startswith(f"{field}.deep.1.x: ") and "not a JSON number" in ei.value.error


def test_lone_surrogates_are_refused_where_they_cannot_be_written() -> None:
    for field, reason in (("summary", "invalid_field"), ("id", "invalid_field"), ("payload", "payload_not_object")):
        value = b'"\\ud800"' if field != "payload" else b'{"k": "\\ud800"}'
        record = json.dumps({k: v for k, v in entry().items() if k != field}).encode()[:-1]
        with pytest.raises(InvalidEntry) as ei:
            parse_entry(record + b', "' + field.encode() + b'": ' + value + b"}")
        assert (ei.value.reason, ei.value.error.split(":")[0]) == (reason, field)


def test_payload_nesting_limit_counts_the_entry() -> None:
    def nest(levels: int) -> Any:
        v: Any = 1
        for _ in range(levels):
            v = {"d": v}
        return v

    parse_entry(raw(payload=nest(MAX_DEPTH - 1)))  # entry + payload + ... = MAX_DEPTH levels
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(raw(payload=nest(MAX_DEPTH)))
    assert ei.value.reason == "invalid_field" and ei.value.error.startswith("payload: nests deeper")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries())
def test_whatever_the_gate_accepts_the_consumer_reads_back(value: bytes) -> None:
    """Every generated record is refused with a known reason naming a field, or accepted; an accepted one's
    journal.embeddable record decodes (as the consumer decodes it) to the very same record."""
    try:
        e = parse_entry(value)
    except InvalidEntry as err:
        assert err.reason in DLQ_REASONS
        if err.reason not in ("not_utf8", "not_json", "not_object"):
            assert err.error.split(":")[0].split(".")[0] in JournalEntry.__struct_fields__, err.error
        return
    now = datetime(2026, 3, 1, tzinfo=UTC)
    wire = EmbeddableRecord.json_of(e, base_importance=0.5, accepted_at=now)
    back = EmbeddableRecord.from_json(wire)
    assert back == EmbeddableRecord.from_entry(e, base_importance=0.5, accepted_at=now)
    assert back.to_json() == wire


def test_consumer_decode_refuses_garbage_with_one_error_type() -> None:
    for value in (b"", b"{", b"[]", b'{"id": "x"}', b"\xff", b"[" * 5000, raw()):
        with pytest.raises(InvalidRecord):
            EmbeddableRecord.from_json(value)


def test_json_of_writes_what_the_record_writes_for_entries_and_records() -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    e = parse_entry(raw(refs={"episodic": True, "x": [1]}, priority="pin"))
    record = EmbeddableRecord.from_entry(e, base_importance=0.85, accepted_at=now)
    assert EmbeddableRecord.json_of(e, base_importance=0.85, accepted_at=now) == record.to_json()
    # given a record (a subclass of the entry), the extra fields are not written twice
    again = EmbeddableRecord.json_of(record, base_importance=0.5, accepted_at=now)
    assert EmbeddableRecord.from_json(again) == EmbeddableRecord.from_entry(e, base_importance=0.5, accepted_at=now)


# Offsets as the journal may carry them: whole minutes, and the seconds Python's ISO parser also reads.
OFFSETS = st.one_of(
    st.none(),
    st.just(UTC),
    st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m))),
    st.integers(-86399, 86399).map(lambda s: timezone(timedelta(seconds=s))),
)


# Offsets of 23:59:30 and beyond (either sign), which once came out `Z` (a day away) where msgspec wrote ±23:59.
NEAR_A_DAY = [timezone(timedelta(seconds=s)) for s in (86370, 86371, 86399, -86370, -86371, -86399)]


@settings(max_examples=2000)
@given(st.datetimes(timezones=OFFSETS))
@example(datetime(2026, 3, 1, 12, tzinfo=NEAR_A_DAY[1]))
@example(datetime(2026, 3, 1, 12, tzinfo=NEAR_A_DAY[2]))
@example(datetime(2026, 3, 1, 12, tzinfo=NEAR_A_DAY[5]))
def test_format_timestamp_writes_what_msgspec_wrote(value: datetime) -> None:
    """`format_timestamp` moved from msgspec's encoder to the standard library (it lives in the client now,
    which has no msgspec): the canonical `ts` of every entry must stay the same text."""
    from episodic_client.timestamps import format_timestamp

    assert format_timestamp(value) == msgspec.json.encode(value)[1:-1].decode()


@pytest.mark.parametrize("tz", NEAR_A_DAY, ids=str)
def test_format_timestamp_moves_no_instant_by_a_day(tz: timezone) -> None:
    """The canonical text names (nearly) the instant it was given: an offset is cut to whole minutes (and at
    most ±23:59), so the text may be under a minute off, never a day."""
    from episodic_client.timestamps import format_timestamp, parse_timestamp

    value = datetime(2026, 3, 1, 12, tzinfo=tz)
    assert abs((parse_timestamp(format_timestamp(value)) - value).total_seconds()) < 60
