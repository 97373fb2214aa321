"""episodic.store: the memory store, written once over two engine backends (SPEC §6).

Owns: the facade every stage uses (`facade.QdrantStore`), the embedded engine (`edge`: Qdrant Edge, in
process) and its background dense index (`edge_index`: a worker process, `edge_worker`, indexes a copy
that is swapped in), the distributed one (`qdrant_server`: qdrant-client against a server, or its local
mode in tests), the engine-neutral queries and filters (`query`) and store rules (`rules`: payload indexes, input
checks, payload shaping), BM25 sparse vectors (`sparse`), the StateStore on the same engine (`state`) and
the read-write lock the embedded engine needs (`rwlock`).
May import: `episodic.kernel`, `episodic.domain`, `schemas` and third-party libraries (qdrant-edge-py,
qdrant-client, numpy).

Who writes which fields of a memory is written in `facade`'s docstring.
"""
