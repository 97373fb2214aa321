"""consumers: the aiokafka consumer loops: the embedding consumer (journal.embeddable -> store).

Owns: `embedding.py` (EmbeddingConsumer: batches, the visibility budget, densify, forgets applied in order,
commit after upsert).
May import: `episodic` (the core) and `schemas`; not `streams`, `recall`, `infra` or `stack`.
"""
