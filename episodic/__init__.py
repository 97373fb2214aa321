"""episodic: the core. Pure domain logic, ports and adapters shared by streams, consumers and recall."""

__version__ = "0.1.0"
