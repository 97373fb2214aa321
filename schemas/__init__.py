"""schemas: the contracts, no IO.

Owns: the journal entry (`journal.py`), the topic records (`events.py`), the topic names (`topics.py`), the
export file's lines (`portable.py`) and the exported JSON Schema for producers in other languages. The HTTP
API models are the client distribution's (`episodic_client.models`), so that an agent gets them without the
engine.
May import: third-party libraries (msgspec, pydantic) and the client distribution (`episodic_client`: its RFC
3339 timestamps and the journal topic's name, one definition each); nothing else of ours.
"""
