"""Debian's `prometheus` package for the tests: promtool (alert rule unit tests) and the server.

Where a binary is absent the test skips and says how to install it, except under
EPISODIC_REQUIRE_PROMETHEUS=1 (set by .ci/run once it installed the package), where it fails.
"""

from __future__ import annotations

import os
import shutil

import pytest


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("EPISODIC_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{name} not found, and EPISODIC_REQUIRE_PROMETHEUS=1: install Debian's `prometheus`")
        pytest.skip(f"{name} not found: install Debian's `prometheus` package (apt-get install prometheus)")
    return path
