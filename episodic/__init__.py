"""episodic: the core. Pure domain logic, its ports and the adapters behind them, shared by the stages.

Owns: by concern, one sub-package each (its own docstring says what it owns and may import), bottom to top:
`domain` (pure rules), `kernel` (errors, ports, settings, metrics, auth, transport security), `store` and
`bus` (the memory store over two engines; Kafka), `embedding`, `indexing`, `retrieval` (the recall engine)
and `lifecycle` (forget, DLQ, export/import, inspect, re-embed), and `maintenance` (the stream agents'
logic). No arrow runs from a lower sub-package up to a higher one: the "core" contract in pyproject's
[tool.importlinter] enforces it, and tests/unit/test_layout.py proves the contract fails on a violation.
The memory client is not here: it is the client distribution (`clients/python`, package `episodic_client`),
below `schemas`, so that an agent installs it without the engine.
May import: `schemas`, `episodic_client` (the API models, the client's settings) and third-party libraries;
never `streams`, `consumers`, `recall`, `stack` or `infra` (they stand on the core). `make lint` and
tests/unit/test_layout.py enforce it.
"""

__version__ = "0.1.0"
