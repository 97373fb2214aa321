"""stack: the composition root. The process wiring that puts the stages together, and every command.

Owns: the Stack (`runtime.py`: broker, topics, producer, store and model opened once; watchdog; drain),
the role table (`roles.py`: gate, embedder, http), the store backend chosen from settings
(`stores.py`: `open_store`), the MCP server's tools (`mcp_server.py`; `mcp_writers.py`: where `remember`
writes), the `episodic` command (`cli.py`) and its front-ends (`commands/`: up, produce, recall, forget /
show / ls, doctor, mcp, gate, embedder, serve).
May import: everything (`streams`, `consumers`, `recall`, `infra`, `episodic`, `schemas`); nothing of
ours imports it.
"""
