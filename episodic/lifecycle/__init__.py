"""episodic.lifecycle: what operators and agents do to memories after they are stored.

Owns: forgetting (`forget`: applying a forget, keeping what it removed out), dead letters (`dlq`: list and
replay), export and import (`portable`), inspecting and listing memories (`inspect`), and the re-embed
pass to another model (`reembed`: it writes through the indexer, hence here and not in embedding).
May import: `episodic.indexing`, `episodic.embedding`, `episodic.store`, `episodic.bus`, `episodic.kernel`,
`episodic.domain`, `schemas`, `episodic_client` (the API models) and third-party libraries.
"""
