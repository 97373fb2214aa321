"""stack: the composition root. The process wiring that puts the stages together, and every command.

Owns: the Stack (`runtime.py`: broker, topics, producer, store and model opened once; watchdog; drain),
the role table (`roles.py`: gate, embedder, http), the store backend chosen from settings
(`stores.py`: `open_store`), the MCP server's Kafka writer (`mcp_writers.py`; the tools are the
client's `episodic_client.mcp`), the `episodic` command (`cli.py`) and its front-ends (`commands/`: up,
produce, recall, forget / show / ls, doctor, mcp, gate, embedder, serve).
May import: everything (`streams`, `consumers`, `recall`, `infra`, `episodic`, `schemas`,
`episodic_client`); nothing of ours imports it.
"""
