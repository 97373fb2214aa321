"""Hypothesis strategies for raw journal records: mostly-valid entries with odd values, and their bytes mutated.

They feed the journal corpus (`journal_corpus.py`) and the property tests of the parser.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

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


def base_entry(**over: Any) -> dict[str, Any]:
    """A valid, embeddable entry with every optional field set; a value of `...` drops that field."""
    e: dict[str, Any] = {
        "id": "e-1",
        "workspace_id": "ws-1",
        "crew_id": "crew-1",
        "agent_id": "agent-1",
        "run_id": "run-1",
        "ts": "2026-03-01T12:00:00Z",
        "entry_type": "peer.escalation",
        "severity": "info",
        "summary": "escalated the failing deploy",
        "payload": {"n": 1},
    }
    e.update(over)
    return {k: v for k, v in e.items() if v is not ...}


@st.composite
def entries(draw: st.DrawFn) -> bytes:
    """Mostly valid entries, with some fields replaced by odd values or left out."""
    e = base_entry(entry_type=draw(st.sampled_from(["peer.escalation", "peer.conversation", "keeper.decision"])))
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


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """An entry from `entries()` with one to three bytes inserted, deleted or replaced."""
    b = bytearray(draw(entries()))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(b)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = draw(st.sampled_from([0x00, 0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x2C, 0x31, 0x20, 0xC3, 0xFF, 0x7A]))
        if op == "insert" or i == len(b):
            b.insert(i, byte)
        elif op == "delete":
            del b[i]
        else:
            b[i] = byte
    return bytes(b)
