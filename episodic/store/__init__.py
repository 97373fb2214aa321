"""episodic.store: the memory store, written once over two engine backends (SPEC §6).

Owns: the facade every stage uses (`facade.QdrantStore`), the embedded engine (`edge`: Qdrant Edge, in
process) and its background dense index (`edge_index`: a worker process, `edge_worker`, indexes a copy
that is swapped in), the distributed one (`qdrant_server`: qdrant-client against a server, or its local
mode in tests), the engine-neutral queries and filters (`query`) and store rules (`rules`: payload indexes, input
checks, payload shaping), BM25 sparse vectors (`sparse`), the StateStore on the same engine (`state`) and
the read-write lock the embedded engine needs (`rwlock`).
May import: `episodic.kernel`, `episodic.domain`, `schemas` and third-party libraries (qdrant-edge-py,
qdrant-client, numpy).

**The write discipline (issue 25).** Every write of a memory stamps a fresh revision token in its payload
(`rev`, `episodic.kernel.ports.REV`). A write that depends on what its writer read is conditional on that
revision (Qdrant's conditional update: `update_filter` on the server, `condition` in Edge): the memory is
written only while it is still at the revision read, else the writer reads it again and decides again
(`QdrantStore.update_memories` for field updates, vectors and deletes; `upsert_if` for whole points). A
write that depends on nothing it read writes only the fields its writer owns (a partial payload update).
On Qdrant Edge, whose writes run one at a time in this process, a writer whose change reads nothing but
the memory (`update_memories(held=True)`: the decay, a review's rescoring) reads and writes each memory
in one hold of the write path instead: nothing can come between, so it checks no condition, stamps a
fresh `rev` (a conditional writer that read before it conflicts) and leaves `revs` alone. Conflicts are
counted per writer (`QdrantStore.write_conflicts`, the metric `episodic_store_write_conflicts_total`).

Who writes which fields of a memory. The owner may write its fields unconditionally (a partial update);
every other writer of them writes conditionally on `rev`:

- content (entry_id, workspace_id, crew_id, agent_id, run_id, ts, entry_type, severity, summary, payload,
  refs, priority, base_importance, accepted_at, dedup_key, the `bm25` vector): the indexer, a new memory
  or a new version as a whole point (`upsert_if`, which keeps the counters, edges and `revs` it read);
  `episodic import` the same way.
- the active dense vector, has_dense, model, pieces: the indexer with the point; densify
  (`update_memories`, only while the summary is the one it embedded).
- another generation's vector, model_<vector>, pieces_<vector>: the re-embed pass (`update_memories`,
  only for the summary it embedded); reembed_failures, densify_failures, densify_error: their pass (owner).
- aliases, occurrences: the indexer's duplicate absorption (`update_memories`: the ids are added to the
  list as it is at the write).
- reference_count, last_referenced_at: the importance agent (owner; its ledger's before/after makes a
  replay exact); a new version and an import keep them.
- review_count, review_ratings, last_rating, last_reviewed_at, stability, difficulty (the review state,
  issue 26): the importance agent's reviews (owner, episodic.maintenance.reviews; its `reviewed` ledger's
  before/after makes a replay exact); a new version and an import keep them.
- importance_score: decay (`update_memories`, held, computed from the memory as it is at the write); the importance
  agent's reviews the same way (writer `reviews`) when EPISODIC_REVIEW_RANKING is not `off`.
- relations, links, linked_at: the linker (`similar`), the indexer (`supports`; run `previous` / `next`
  on the neighbours), forget and retention (edges cut, runs joined): all `update_memories`.
- context, context_ids, context_date, the `bm25_context` vector: the indexer with the point; forget's
  context scrub (`update_memories`).
- folded, agents (and the occurrences they add), folded_into (episodic.indexing.folding, issue 26): the
  linker's fold on the owner and forget / retention's unfold (`update_memories`, computed from the owner as
  it is at the write, writers `linker` and `fold`); the absorbed memory's `folded_into` mark and an older
  memory's `superseded_by` are field writes of their own (owner: the linker, or the unfold); forget and
  retention clear `superseded_by` when the newer memory goes (`update_memories`, writer `fold`).
- the memory itself: forget deletes unconditionally (a forget wins over every write); retention deletes
  after its tombstone (episodic.maintenance.decay).
- rev (every write), revs (every conditional write but a held one).
"""
