"""episodic: the core. Pure domain logic, its ports and the adapters behind them, shared by the stages.

Owns: the embedding policy and gating, identity, the indexer, the embedder and BM25, the ports
(Embedder, MemoryStore, StateStore) and the store adapters, recall and rendering, the memory lifecycle
(`forget.py`: applying forgets and keeping forgotten entries out; `memories.py`: inspect and list), auth,
settings, metrics, the Kafka helpers (`bus.py`), and the client libraries: the journal producer helper
(`producer.py`), the typed memory clients (`client.py`, `client_calls.py`, `client_errors.py`) and the
LangChain retriever over them (`langchain_retriever.py`, the `langchain` extra).
May import: `schemas` and third-party libraries; never `streams`, `consumers`, `recall`, `stack` or
`infra` (they stand on the core). `make lint` and tests/unit/test_layout.py enforce it.
"""

__version__ = "0.1.0"
