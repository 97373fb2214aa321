"""episodic.retrieval: the recall engine (SPEC §7, §10); `recall/` is the HTTP service in front of it.

Owns: a validated request to ranked hits over the ports (`engine`, named `episodic.recall` before), the
memories a recall brings in beside its direct hits (`expand`: walk and adjacency), and the prompt-ready,
injection-safe `<recalled-memory>` block (`render`) and the cleaning of recalled text inside it (`untrusted`).
May import: `episodic.indexing`, `episodic.embedding`, `episodic.store`, `episodic.kernel`, `episodic.domain`,
`schemas`, `episodic_client` (the API models) and third-party libraries. A sibling of `episodic.lifecycle`:
neither imports the other.
"""
