"""episodic.kernel: what every stage of the process shares: the contracts between the core's parts and
the process-wide plumbing.

Owns: the project's exceptions (`errors`), the ports (`ports`: the Embedder protocol, the MemoryStore and
StateStore interfaces and the value types they speak), the settings (`settings`, the one place that reads
EPISODIC_*), the Prometheus metrics (`metrics`), bearer-token auth and scopes (`auth`), and transport
security for every Kafka and Qdrant client the project opens (`transport_security`, named
`client_options` before: it is not the memory client).
May import: `episodic.domain`, `schemas`, `episodic_client` (the settings extend the client's; auth takes Role
and Scope from the API models) and third-party libraries.
"""
