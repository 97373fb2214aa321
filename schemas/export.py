"""Export the journal entry's JSON Schema for producers in other languages.

python -m schemas.export            # rewrites schemas/journal_entry.schema.json
python -m schemas.export --check    # exit 1 if the committed file and the model disagree
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

import msgspec

from schemas.journal import MAX_DEPTH, MAX_PAYLOAD_BYTES, JournalEntry, Priority, RefKeys, Severity

SCHEMA_PATH = Path(__file__).with_name("journal_entry.schema.json")
SCHEMA_ID = "https://episodic.dev/schemas/journal_entry.schema.json"


def journal_entry_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one `journal.entries` value, from msgspec's schema of the Struct.

    Tuned where msgspec says less than the parser checks: the enums in their declared order (msgspec sorts
    them), `payload` as an object (null is also read as {}), `refs` with its two known keys.
    """
    _, defs = msgspec.json.schema_components([JournalEntry, RefKeys], ref_template="#/$defs/{name}")
    schema = defs["JournalEntry"]
    props = schema["properties"]
    props["severity"] = {"type": "string", "enum": list(get_args(Severity))}
    props["priority"]["anyOf"][0] = {"type": "string", "enum": list(get_args(Priority))}
    props["payload"] = {
        "type": "object",
        "additionalProperties": True,
        "default": {},
        "description": f"free-form JSON object, at most {MAX_PAYLOAD_BYTES} bytes as compact UTF-8 JSON; "
        f"objects and arrays nest at most {MAX_DEPTH} levels in the entry (the entry itself is the first)",
    }
    refs = {**defs["RefKeys"], "additionalProperties": True}
    refs["description"] = "free-form object; `episodic: true` forces embedding, `supports` lists entry ids"
    props["refs"]["anyOf"][0] = {"$ref": "#/$defs/Refs"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "JournalEntry",
        "description": "One journal entry on topic journal.entries (key = workspace_id, value = UTF-8 JSON). "
        "Unknown fields are ignored. Records that do not validate go to journal.dlq. `pattern` marks the fields "
        "that must not be blank (only whitespace, as Python's str.isspace() defines it).",
        "type": "object",
        "properties": props,
        "required": schema["required"],
        "$defs": {"Refs": refs},
    }


def render() -> str:
    return json.dumps(journal_entry_schema(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="fail if the committed schema is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is stale: run python -m schemas.export", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
