"""schemas: the contracts, no IO.

Owns: the journal entry (`journal.py`), the topic records (`events.py`), the recall API models
(`api.py`), the topic names (`topics.py`) and the exported JSON Schema for producers in other languages.
May import: third-party libraries only (pydantic); nothing of ours.
"""
