"""What `episodic doctor` reports: one Check per component or role, each WARN and FAIL with its fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["OK", "WARN", "FAIL"]
LAG_WARN_RECORDS = 1000  # the same threshold as the EpisodicConsumerLagHigh alert (infra/alerts.yml)


@dataclass
class Check:
    name: str
    level: Level
    message: str
    fix: str | None = None
