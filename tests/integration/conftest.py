"""Integration fixtures: a scratch directory on tmpfs for the stores (see maint_helpers.fast_tmp_dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.maint_helpers import fast_tmp_dir


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    with fast_tmp_dir(tmp_path) as d:
        yield d
