"""The client distribution alone: what a fresh venv with `pip install ./clients/python` holds and imports.

Run from such a venv (`make test-client`): in the engine's venv this fails, as it should, since torch is there.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import re
import sys

import pytest

import episodic_client

# The engine's heavy packages and its own ones: none may be installed alongside the client alone.
ENGINE = ("torch", "faust", "qdrant_edge", "qdrant_client", "onnxruntime", "sentence_transformers", "msgspec",
          "aiokafka", "fastapi", "episodic", "schemas", "stack", "recall")  # fmt: skip
EXTRAS = ("langchain_core", "mcp")  # the extras, not asked for here


@pytest.mark.parametrize("name", ENGINE + EXTRAS)
def test_the_venv_has_no_engine(name: str) -> None:
    assert importlib.util.find_spec(name) is None, f"{name} is installed with episodic-client alone"


def test_the_distribution_asks_for_httpx_pydantic_and_tenacity_only() -> None:
    dist = importlib.metadata.distribution("episodic-client")
    required = {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                for r in dist.requires or [] if "extra ==" not in r}  # fmt: skip
    assert required == {"httpx", "pydantic", "tenacity"}
    assert dist.version == episodic_client.__version__


def test_every_module_imports_without_the_engine() -> None:
    """Every module but the extras' imports here; none of them pulls in an engine package."""
    names = [m.name for m in pkgutil.walk_packages(episodic_client.__path__, "episodic_client.")]
    plain = [n for n in names if n != "episodic_client.langchain" and not n.startswith("episodic_client.mcp.")]
    assert "episodic_client.models" in plain and "episodic_client.client" in plain
    for name in plain:
        importlib.import_module(name)
    assert not {m.split(".")[0] for m in sys.modules} & set(ENGINE)


EXTRA_MODULES = [("episodic_client.langchain", "langchain"), ("episodic_client.mcp.tools", "mcp"),
                 ("episodic_client.mcp.cli", "mcp")]  # fmt: skip


@pytest.mark.parametrize(("module", "extra"), EXTRA_MODULES)
def test_an_extra_without_its_packages_names_what_to_install(module: str, extra: str) -> None:
    with pytest.raises(ImportError, match=re.escape(f"pip install 'episodic-client[{extra}]'")):
        importlib.import_module(module)
