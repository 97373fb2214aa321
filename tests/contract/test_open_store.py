"""The factory: the embedded store by default, the server adapter when EPISODIC_QDRANT_URL is set."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import SecretStr

from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from stack.stores import open_store


def test_default_is_edge_under_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, qdrant_url=None, collection="mem")
    store = open_store(settings, dim=8)
    try:
        assert isinstance(store, EdgeStore)
        assert store.backend == "qdrant-edge"
        assert store.path == tmp_path / "qdrant-edge" / "mem"
        assert store.count() == 0  # ensured and usable
        assert any(store.path.iterdir())
    finally:
        store.close()


def test_the_long_running_stack_indexes_the_embedded_store_in_the_background_and_commands_do_not(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, qdrant_url=None, collection="mem", edge_index_after=5000)
    stack = open_store(settings, dim=8, background_index=True)
    try:
        assert isinstance(stack, EdgeStore) and stack.indexer is not None and stack.index_after == 5000
    finally:
        stack.close()
    command = open_store(settings, dim=8)  # export, reindex: one-off, never copies the shard
    try:
        assert isinstance(command, EdgeStore) and command.indexer is None
    finally:
        command.close()
    off = open_store(Settings(data_dir=tmp_path, qdrant_url=None, collection="mem", edge_index_after=0), dim=8,
                     background_index=True)  # fmt: skip
    try:
        assert isinstance(off, EdgeStore) and off.indexer is None
    finally:
        off.close()


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_server_url_selects_the_server_adapter_and_wraps_connection_errors() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(qdrant_url=f"http://127.0.0.1:{port}", qdrant_api_key=SecretStr("secret"))
    with pytest.raises(StoreUnavailable):
        open_store(settings, dim=8)
