"""Differential test: the gate's hand-written fast path (episodic/fastpath.py) + its pydantic fallback
route every input exactly like the pure pydantic path (`parse_entry` + EmbeddableRecord).

Same outcome type, same Skip/DeadLetter (reason, error and DLQ bytes), and for Forward the same key,
labels and the same record: equal field order, and equal parsed JSON with int/float kept apart.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import episodic.gating as gating
from episodic import fastpath
from episodic.gating import DeadLetter, Forward, Routed, Skip, route
from schemas.events import EmbeddableRecord
from tests.unit.test_gating import entry

NOW = datetime(2026, 3, 1, 12, 0, 5, 123000, tzinfo=UTC)


def _route(raw: Any, *, fast: bool) -> Routed:
    saved = gating._fast_validate
    gating._fast_validate = fastpath.validate if fast else None
    try:
        return route(raw, topic="journal.entries", partition=1, offset=7, now=NOW)
    finally:
        gating._fast_validate = saved


def _canonical(value: bytes) -> tuple[list[str], str]:
    obj = json.loads(value)
    return list(obj), json.dumps(obj, sort_keys=True)  # field order, and values with int vs float kept apart


def assert_same(raw: Any) -> Routed:
    fast = _route(raw, fast=True)
    slow = _route(raw, fast=False)
    assert type(fast) is type(slow), (raw, fast, slow)
    if isinstance(fast, Forward):
        assert isinstance(slow, Forward)
        assert (fast.key, fast.entry_id, fast.entry_type, fast.decision) == (
            slow.key,
            slow.entry_id,
            slow.entry_type,
            slow.decision,
        )
        assert _canonical(fast.value) == _canonical(slow.value), (raw, fast.value, slow.value)
        EmbeddableRecord.model_validate_json(fast.value)  # and the model reads it back
    else:
        assert fast == slow, (raw, fast, slow)
    return fast


def base(**over: Any) -> dict[str, Any]:
    """The gating tests' entry with its optional crew and run ids set."""
    return entry(**{"crew_id": "crew-1", "run_id": "run-1", **over})


def enc(obj: Any, ascii_only: bool = False) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).encode()


def without(key: str, **over: Any) -> bytes:
    return enc({k: v for k, v in base(**over).items() if k != key})


EDGE_CASES: list[bytes | None] = [
    enc(base()),
    enc(base(entry_type="peer.conversation")),
    enc(base(entry_type="keeper.decision", severity="warn", priority="pin")),
    enc(base(entry_type="keeper.decision", severity="debug")),
    enc(base(entry_type="tool.call", refs={"episodic": True})),
    enc(base(entry_type="tool.call", refs={"episodic": False, "supports": ["a", "b"], "x": {"y": [1]}})),
    enc(base(refs={"episodic": 1})),  # bool-as-int
    enc(base(refs={"episodic": "true"})),
    enc(base(refs={"supports": ["", "a"]})),
    enc(base(refs={"supports": [" "]})),
    enc(base(refs={"supports": "a"})),
    enc(base(refs={"supports": [1]})),
    enc(base(refs={"_private": 1, "model_config": 2, "__class__": 3, "__pydantic_extra__": 4})),
    enc(base(refs=[])),
    enc(base(refs=None)),
    enc(base(refs={})),
    # unicode and surrogates
    enc(base(summary="déploiement échoué — 失败 🚀", id="é-1")),
    enc(base(summary="\ud83d\ude80 pair"), ascii_only=True),
    enc(base(summary="lone \ud800 surrogate"), ascii_only=True),
    enc(base(payload={"k": "\udfff"}), ascii_only=True),
    enc(base(summary="\u2028\u2029\x00\x1f")),
    enc(base(summary="\u00a0\u3000")),  # unicode whitespace only: blank
    enc(base(id="\u2003")),
    enc(base(summary="x" * 16_384)),
    enc(base(summary="é" * 16_384)),
    enc(base(summary="🚀" * 16_385)),
    # numbers
    enc(base(payload={"big": 2**64 + 1, "neg": -(2**63) - 1, "f": 1e308, "z": -0.0, "i": 2**63 - 1})),
    enc(base(payload={"big": 10**40})),
    enc(base(payload={"ok": 9_999_999_999_999_999})),
    enc(base(payload={"f": 0.1, "g": 1e-320, "h": 123456789.123456789})),
    b'{"id":"e","workspace_id":"w","agent_id":"a","ts":"2026-03-01T12:00:00Z","entry_type":"peer.escalation",'
    b'"severity":"info","summary":"s","payload":{"inf":Infinity,"nan":NaN,"e":1E400}}',
    enc(base(id=1)),
    enc(base(id=True)),
    enc(base(id=1.5)),
    enc(base(severity=1)),
    enc(base(priority=True)),
    # nested payloads
    enc(base(payload={"a": {"b": {"c": [1, [2, [3, {"d": None}]]]}}})),
    enc(base(payload={"d": [[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]})),
    enc(base(payload={"blob": "p" * 65_000})),
    enc(base(payload={"blob": "p" * 65_530})),
    enc(base(payload={"blob": "p" * 65_536})),
    enc(base(payload={"blob": "é" * 32_760})),
    enc(base(payload={"blob": "\x01" * 11_000})),  # escapes grow 6x when re-encoded
    enc(base(payload=[1])),
    enc(base(payload="x")),
    enc(base(payload=None)),
    without("payload"),
    # timestamps
    *(
        enc(base(ts=ts))
        for ts in (
            "2026-03-01T12:00:00Z",
            "2026-03-01t12:00:00z",
            "2026-03-01 12:00:00+05:30",
            "2026-03-01T12:00:00.5Z",
            "2026-03-01T12:00:00.000000Z",
            "2026-03-01T12:00:00.123456-00:00",
            "2026-03-01T12:00:00.1234567Z",
            "2026-03-01T12:00:00+00:00",
            "2026-03-01T12:00:00-23:59",
            "2026-03-01T12:00:00+24:00",
            "2026-03-01T12:00:00+0530",
            "2026-03-01T12:00:00,5Z",
            "2026-03-01T12:00+02:00",
            "2026-03-01T12:00:00",
            "2026-03-01T12:00:00.Z",
            " 2026-03-01T12:00:00Z ",
            "2026-02-30T12:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T23:59:60Z",
            "0000-03-01T12:00:00Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999-05:00",
            "2026-03-01X12:00:00Z",
            "2026-03-01T12:00:00+02:00:30",
            "２０２６-03-01T12:00:00Z",
            "2026-03-01T12:00:00ZZ",
            "",
        )
    ),
    enc(base(ts=1_700_000_000)),
    enc(base(ts=None)),
    # whitespace ids, lengths, nulls, extra fields
    enc(base(id=" ")),
    enc(base(workspace_id="\t\n")),
    enc(base(agent_id=" a ")),
    enc(base(crew_id=" ")),
    enc(base(crew_id="")),
    enc(base(run_id="r" * 129)),
    enc(base(id="i" * 128)),
    enc(base(id="i" * 129)),
    enc(base(entry_type="")),
    enc(base(entry_type="t" * 129)),
    enc(base(crew_id=None, run_id=None, priority=None, refs=None)),
    enc(base(agent_id=None)),
    enc(base(severity=None)),
    enc(base(summary=None)),
    enc(base(extra=1, another={"x": [1, 2]}, id_=5)),
    without("crew_id"),
    without("severity"),
    without("ts"),
    b'{"id":"a","id":"b","workspace_id":"w","agent_id":"a","ts":"2026-03-01T12:00:00Z",'
    b'"entry_type":"peer.escalation","severity":"info","summary":"s"}',  # duplicate keys: last wins
    b"\xef\xbb\xbf" + enc(base()),  # BOM
    b"  " + enc(base()) + b"\n",
    enc(base())[:-1],
    enc(base()) + b"x",
    None,
    b"",
    b"null",
    b"[]",
    b"\xff",
]


@pytest.mark.parametrize("raw", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_edge_cases_route_like_the_pydantic_path(raw: bytes | None) -> None:
    assert_same(raw)


def test_the_fast_path_takes_the_common_clean_records() -> None:
    """Not vacuous: clean records, forwarded and skipped, are answered by the fast path itself."""
    for raw in (
        enc(base()),
        enc(base(entry_type="peer.conversation", crew_id=None)),
        enc(base(ts="2026-03-01T12:00:00.25+02:00", refs={"episodic": True, "supports": ["a"]})),
        enc(base(payload={"blob": "p" * 20_000})),
    ):
        assert fastpath.validate(raw) is not None, raw
        assert not isinstance(assert_same(raw), DeadLetter)


@pytest.mark.parametrize(
    "dt",
    [
        NOW,
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=timezone(timedelta(hours=23, minutes=59))),
        datetime(2026, 1, 1),
    ],
)
def test_datetime_json_matches_pydantic(dt: datetime) -> None:
    from pydantic import TypeAdapter

    assert json.dumps(fastpath.datetime_json(dt)).encode() == TypeAdapter(datetime).dump_json(dt)


# -- generated inputs ------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec=None), max_size=12)  # includes surrogates (written as \\u escapes)
SOME_ID = st.one_of(
    st.sampled_from(["e-1", "ws", "a", "x" * 128, "x" * 129, "", " ", "\t", " a", "é", "\u3000"]),
    TEXT,
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
)
TS = st.one_of(
    st.builds(
        lambda y, mo, d, sep, h, mi, s, frac, off: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{off}",
        st.integers(0, 9999),
        st.integers(0, 13),
        st.integers(0, 32),
        st.sampled_from(["T", "t", " ", "_"]),
        st.integers(0, 25),
        st.integers(0, 60),
        st.integers(0, 61),
        st.sampled_from(["", ".5", ".123456", ".1234567", ".", ",5"]),
        st.sampled_from(["Z", "z", "+00:00", "-00:00", "+05:30", "-23:59", "+24:00", "+0530", "", "+02:00:30"]),
    ),
    TEXT,
    st.integers(),
    st.none(),
)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
REFS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "episodic": st.one_of(st.booleans(), st.none(), st.integers(0, 1), st.just("true")),
            "supports": st.one_of(st.none(), st.lists(SOME_ID, max_size=3), SOME_ID),
            "extra": JSON_VALUE,
            "_x": JSON_VALUE,
        },
    ),
    JSON_VALUE,
)
FIELDS: dict[str, Any] = {
    "id": SOME_ID,
    "workspace_id": SOME_ID,
    "crew_id": SOME_ID,
    "agent_id": SOME_ID,
    "run_id": SOME_ID,
    "ts": TS,
    "entry_type": st.one_of(
        st.sampled_from(
            ["peer.escalation", "summary.generated", "keeper.decision", "peer.conversation", "network.x", "tool"]
        ),
        SOME_ID,
    ),
    "severity": st.one_of(st.sampled_from(["debug", "info", "warn", "error", "fatal", "INFO"]), SOME_ID),
    "summary": st.one_of(st.sampled_from(["ok", " ", "", "s" * 16_385]), TEXT),
    "payload": st.one_of(st.dictionaries(TEXT, JSON_VALUE, max_size=4), JSON_VALUE),
    "refs": REFS,
    "priority": st.one_of(st.sampled_from(["pin", "high", "permanent", "low"]), st.none(), SOME_ID),
    "unknown": JSON_VALUE,
}


@st.composite
def entries(draw: st.DrawFn) -> bytes:
    """Mostly valid entries, with some fields replaced by odd values or left out."""
    e = base(entry_type=draw(st.sampled_from(["peer.escalation", "peer.conversation", "keeper.decision"])))
    for name, strat in FIELDS.items():
        mode = draw(st.sampled_from(["keep", "keep", "keep", "odd", "drop"]))
        if mode == "odd" or (name == "unknown" and mode != "drop"):
            e[name] = draw(strat)
        elif mode == "drop":
            e.pop(name, None)
    text = json.dumps(e, ensure_ascii=draw(st.booleans()), allow_nan=True)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: written escaped instead
        return json.dumps(e, ensure_ascii=True, allow_nan=True).encode()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries())
def test_generated_entries_route_like_the_pydantic_path(raw: bytes) -> None:
    assert_same(raw)


@settings(max_examples=500, deadline=None)
@given(entries(), st.data())
def test_mutated_bytes_route_like_the_pydantic_path(raw: bytes, data: st.DataObject) -> None:
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(b)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = data.draw(st.sampled_from([0x00, 0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x2C, 0x31, 0x20, 0xC3, 0xFF, 0x7A]))
        if op == "insert" or i == len(b):
            b.insert(i, byte)
        elif op == "delete":
            del b[i]
        else:
            b[i] = byte
    assert_same(bytes(b))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_arbitrary_bytes_route_like_the_pydantic_path(raw: bytes) -> None:
    assert isinstance(assert_same(raw), DeadLetter | Skip | Forward)
