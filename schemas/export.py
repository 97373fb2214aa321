"""Export the journal entry's JSON Schema for producers in other languages.

python -m schemas.export            # rewrites schemas/journal_entry.schema.json
python -m schemas.export --check    # exit 1 if the committed file and the model disagree
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schemas.journal import MAX_PAYLOAD_BYTES, JournalEntry

SCHEMA_PATH = Path(__file__).with_name("journal_entry.schema.json")
SCHEMA_ID = "https://episodic.dev/schemas/journal_entry.schema.json"


def journal_entry_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one `journal.entries` value."""
    schema = JournalEntry.model_json_schema(mode="validation")
    props = schema["properties"]
    props["ts"]["description"] = "RFC 3339 timestamp with a UTC offset (Z or ±HH:MM)"
    props["payload"]["description"] = f"free-form JSON object, at most {MAX_PAYLOAD_BYTES} bytes as compact UTF-8 JSON"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
        "description": "One journal entry on topic journal.entries (key = workspace_id, value = UTF-8 JSON). "
        "Records that do not validate go to journal.dlq.",
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
