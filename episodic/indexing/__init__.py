"""episodic.indexing: from an embeddable record to a stored memory.

Owns: the gate's routing decision for a raw journal record (`gating`), the indexer that turns a batch of
embeddable records into memories (`indexer`), and context-aware indexing with episode adjacency
(`context`: the context vector, run edges, and scrubbing a forgotten memory out of its neighbours).
May import: `episodic.embedding`, `episodic.store`, `episodic.kernel`, `episodic.domain`, `schemas` and
third-party libraries.
"""
