"""A LangChain retriever over the memory client (the optional extra: `pip install 'episodic-client[langchain]'`).

    from episodic_client import MemoryClient
    from episodic_client.langchain import EpisodicRetriever

    retriever = EpisodicRetriever(client=MemoryClient.from_settings(), k=8)
    docs = retriever.invoke("why did checkout run out of memory?")   # or `await retriever.ainvoke(...)`

Each hit becomes a `Document` whose `page_content` is the memory's summary and whose `metadata` carries the
rest of the hit (entry_id, score, entry_type, severity, agent_id, crew_id, ts, age_seconds, via, placed,
aliases, payload, ...). The identity (workspace, agent, crew, scope) is the client's; `recall_fields` adds recall
options (mode, walk_depth, and the filters of the API) to every query. Recalled text is untrusted: keep it
out of a prompt's instructions (`MemoryClient.render` makes the wrapped block). Needs only langchain-core.
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("episodic_client.langchain needs langchain-core: pip install 'episodic-client[langchain]'") from e
from pydantic import ConfigDict, Field

from episodic_client.client import AsyncMemoryClient, MemoryClient
from episodic_client.models import Hit


def to_document(hit: Hit) -> Document:
    """One recall hit as a LangChain document: the summary as content, the rest as metadata."""
    metadata = hit.model_dump(mode="json", exclude={"summary"})
    metadata["source"] = f"episodic:{hit.entry_id}"
    return Document(page_content=hit.summary, metadata=metadata, id=hit.entry_id)


class EpisodicRetriever(BaseRetriever):
    """Ranked memories for a query, as LangChain documents (a thin adapter over `MemoryClient`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: MemoryClient | None = Field(default=None, description="sync client (invoke)")
    async_client: AsyncMemoryClient | None = Field(
        default=None, description="async client (ainvoke); without it ainvoke runs the sync client in a thread"
    )
    k: int = Field(default=5, ge=1, le=50)
    recall_fields: dict[str, Any] = Field(default_factory=dict, description="extra recall fields, e.g. mode")

    def _fields(self) -> dict[str, Any]:
        return {**self.recall_fields, "k": self.k}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.client is None:
            raise ValueError("client: EpisodicRetriever needs a MemoryClient for invoke (or use ainvoke)")
        return [to_document(h) for h in self.client.recall(query, **self._fields()).hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        answer = await self.async_client.recall(query, **self._fields())
        return [to_document(h) for h in answer.hits]
