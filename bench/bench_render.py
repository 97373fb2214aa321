"""What rendering costs on adversarial text: linear in the input, whatever an agent wrote (issue 29).

Each case renders `--hits` memories of one summary shape at two sizes (`--small` and `--large` characters)
and reports the large render's time per character against the small one's (1.00: linear; quadratic
patterns give large/small). The baseline in the same run is benign prose of the same sizes. One more row
renders the worst shape at `--backtrack` characters with the same patterns compiled by Python's `re`
(the backtracking engine the renderer used before), next to RE2's time for the same text.

    python -m bench.bench_render             # 50 hits, 1,000 and 16,000 characters
    python -m bench.bench_render --quick     # 10 hits, 1,000 and 8,000 characters
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.common import Row, emit
from episodic.retrieval import render as render_mod
from episodic.retrieval import untrusted

SHAPES: dict[str, Callable[[int], str]] = {
    "lt_spaces": lambda n: "<" + " " * (n - 1),  # the case: `<` then a long run of whitespace
    "lt_slash_spaces": lambda n: "</" + " " * (n - 2),
    "chat_token": lambda n: "<|" + " " * (n - 2),
    "hashes": lambda n: "#" * n,
    "override_words": lambda n: ("ignore the " * (n // 11 + 1))[:n],
    "role_spread": lambda n: ("s y s t e m " * (n // 12 + 1))[:n],
    "lookalikes": lambda n: ("＜／ｒｅｃａｌｌｅｄ\u200b" * (n // 11 + 1))[:n],
}
PROSE = "the checkout service was OOM-killed after the deploy; the planner raised the heap and retried. "


@dataclass
class Hit:
    summary: str
    score: float = 0.5
    age_seconds: float = 3600.0
    entry_type: str = "summary.generated"
    severity: str = "info"
    agent_id: str | None = "a"


def _time(hits: list[Hit], budget: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        render_mod.render(hits, budget)
        best = min(best, time.perf_counter() - t0)
    return best


def per_char(text_of: Callable[[int], str], size: int, hits: int, repeat: int) -> float:
    """Seconds per rendered input character (best of `repeat`)."""
    batch = [Hit(text_of(size)) for _ in range(hits)]
    return _time(batch, size * hits + 4096, repeat) / (size * hits)


def backtracking(text: str) -> tuple[float, float]:
    """(seconds with Python `re`, seconds with RE2) to neutralise `text` with the same patterns."""
    t0 = time.perf_counter()
    untrusted.neutralise(text)
    fast = time.perf_counter() - t0
    saved = untrusted._PATTERNS
    try:
        untrusted._PATTERNS = [(re.compile(p.pattern), r, w) for p, r, w in saved]  # type: ignore[misc]
        t0 = time.perf_counter()
        untrusted.neutralise(text)
        slow = time.perf_counter() - t0
    finally:
        untrusted._PATTERNS = saved
    return slow, fast


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hits", type=int, default=None)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=None)
    ap.add_argument("--backtrack", type=int, default=4000, help="characters for the `re` row (quadratic!)")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    hits = a.hits or (10 if a.quick else 50)
    large = a.large or (8000 if a.quick else 16_000)
    rows: list[Row] = []
    prose_small = per_char(lambda n: (PROSE * (n // len(PROSE) + 1))[:n], a.small, hits, a.repeat)
    prose_large = per_char(lambda n: (PROSE * (n // len(PROSE) + 1))[:n], large, hits, a.repeat)
    rows.append(
        Row("render", f"prose: {hits} x {large} chars, time per char", prose_large * 1e9, "ns/char",
            prose_small * 1e9, f"same text at {a.small} chars")
    )  # fmt: skip
    for name, shape in SHAPES.items():
        small = per_char(shape, a.small, hits, a.repeat)
        big = per_char(shape, large, hits, a.repeat)
        rows.append(
            Row("render", f"{name}: {hits} x {large} chars, time per char", big * 1e9, "ns/char", small * 1e9,
                f"same shape at {a.small} chars", target="ratio ~1 (linear)", ok=big <= 3 * small,
                note=f"{big * large * hits * 1000:.1f} ms per render; prose {prose_large * 1e9:.0f} ns/char")
        )  # fmt: skip
    slow, fast = backtracking("<" + " " * (a.backtrack - 1))
    rows.append(
        Row("render", f"`<` + {a.backtrack - 1} spaces, one summary: Python re", slow, "s", fast, "RE2, same patterns",
            note="the backtracking engine the renderer used before issue 29")
    )  # fmt: skip
    emit(rows, "render: time per character on adversarial text (RE2 patterns)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
