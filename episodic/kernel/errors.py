"""The project's own exceptions; adapters wrap third-party errors in these."""

from __future__ import annotations


class EpisodicError(Exception):
    """Base class."""


class StoreUnavailable(EpisodicError):
    """The memory store cannot be reached or opened."""


class StoreError(EpisodicError):
    """The memory store rejected an operation."""


class EmbedderUnavailable(EpisodicError):
    """The embedding model is missing or failed to load."""


class BrokerUnavailable(EpisodicError):
    """The Kafka broker cannot be reached, or the embedded broker died."""
