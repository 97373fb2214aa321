"""Contracts only, no IO: the journal entry, topic records, API models, topic names."""
