"""The committed JSON Schema of the journal entry matches the model (SPEC §3)."""

from __future__ import annotations

import json

from schemas.export import SCHEMA_PATH, journal_entry_schema, main, render


def test_committed_schema_matches_the_model() -> None:
    committed = SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == render(), "schemas/journal_entry.schema.json is stale: run python -m schemas.export"
    assert main(["--check"]) == 0


def test_schema_states_the_contract() -> None:
    s = journal_entry_schema()
    assert s["$schema"].endswith("2020-12/schema")
    assert set(s["required"]) == {"id", "workspace_id", "agent_id", "ts", "entry_type", "severity", "summary"}
    props = s["properties"]
    assert props["severity"]["enum"] == ["debug", "info", "warn", "error"]
    assert props["summary"]["maxLength"] == 16_384 and props["summary"]["minLength"] == 1
    assert props["id"]["maxLength"] == 128
    assert props["payload"]["type"] == "object"
    assert props["ts"]["format"] == "date-time"
    assert props["priority"]["anyOf"][0]["enum"] == ["pin", "high", "permanent"]
    for name in ("id", "workspace_id", "agent_id", "entry_type", "summary"):
        assert props[name]["pattern"] == "\\S", name  # not blank
    for name in ("crew_id", "run_id"):
        assert props[name]["anyOf"][0]["minLength"] == 1 and props[name]["anyOf"][1] == {"type": "null"}
    refs = s["$defs"]["Refs"]
    assert props["refs"]["anyOf"][0] == {"$ref": "#/$defs/Refs"}
    assert refs["additionalProperties"] is True
    assert refs["properties"]["supports"]["anyOf"][0]["items"]["maxLength"] == 128
    json.dumps(s)  # serialisable as is
