"""episodic-client: talk to an episodic memory service over HTTP, without the engine.

    pip install ./clients/python                  # httpx, pydantic, tenacity; nothing of the engine
    pip install './clients/python[langchain]'     # + EpisodicRetriever (episodic_client.langchain)
    pip install './clients/python[mcp]'           # + the MCP server over HTTP (`episodic-mcp`)

    from episodic_client import MemoryClient

    with MemoryClient.from_settings() as memory:   # EPISODIC_URL, EPISODIC_TOKEN, EPISODIC_WORKSPACE_ID, ...
        block = memory.render("what went wrong in checkout last time?", run_id=run).text
        memory.remember("Raised the checkout heap to 4 GiB; the OOMs stopped", run_id=run)

Owns: the typed clients (`client.py`: `MemoryClient`, `AsyncMemoryClient`; `calls.py`: the API's calls as
values, identity, retries), their errors (`errors.py`), the HTTP API models (`models.py`, the one definition:
the engine's service declares its routes with them), RFC 3339 timestamps (`timestamps.py`), the client's
settings from the environment (`settings.py`), the LangChain retriever (`langchain.py`, extra `langchain`)
and the MCP server over HTTP (`mcp/`, extra `mcp`).
May import: httpx, pydantic, tenacity and the standard library; langchain-core in `langchain.py` and the
`mcp` SDK in `mcp/` only (their extras). Nothing of the engine: the engine imports this, never the reverse
(import-linter's `client` contract and clients/python/tests/test_install.py check it).

What agents import is re-exported here (`__all__`); the modules' other names are internals.
"""

from __future__ import annotations

from episodic_client.calls import Identity, RetryPolicy
from episodic_client.client import AsyncMemoryClient, MemoryClient, default_url
from episodic_client.errors import (
    ClientConfigError,
    ClientError,
    EntriesRejected,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RecallClientError,
    RecallRefused,
    RequestRefused,
    ServiceUnavailable,
    ServiceUnreachable,
    Unauthorized,
    UnexpectedAnswer,
)
from episodic_client.settings import ClientSettings

__version__ = "0.1.0"

__all__ = [
    "AsyncMemoryClient", "ClientConfigError", "ClientError", "ClientSettings", "EntriesRejected", "Forbidden",
    "Identity", "InvalidRequest", "MemoryClient", "NotFound", "PayloadTooLarge", "RecallClientError",
    "RecallRefused", "RequestRefused", "RetryPolicy", "ServiceUnavailable", "ServiceUnreachable", "Unauthorized",
    "UnexpectedAnswer", "default_url",
]  # fmt: skip
