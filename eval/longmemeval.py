"""LongMemEval turn-level evidence recall through the real pipeline and the recall API (`eval.pipeline`).

    python -m eval.longmemeval [--set oracle|s|both] [--limit N] [--s-limit N] [--url URL] [--no-baseline]

Every turn becomes a journal entry (``summary.generated``, severity info, ``summary = "role: content"``,
``run_id`` = the session id, ``ts`` from the haystack date), one workspace per corpus (oracle: one
pooled workspace; s: one per question), one agent, scope ``own``. Every question is asked through
``POST /v1/recall`` (k=10) in modes dense, sparse and hybrid, and hybrid with ``adjacent: true``. The other
columns are the same store served with other settings (``eval.pipeline.RESTARTS``: the stack is restarted on
the same data directory; nothing is re-ingested): the seed's equal-weight RRF k=60, the defaults before the
lexical confidence, the piece prior and the context leg, and the context leg alone.

Prints recall@5/@10 per set, dev and holdout (``eval.data.holdout``, as the sweeps), each by question type,
and writes eval/results/longmemeval-<ts>.json.
"""

from __future__ import annotations

import sys

from eval.data import load
from eval.pipeline import MODES, RESTARTS, arguments, run


def main(argv: list[str] | None = None) -> int:
    ap = arguments("LongMemEval recall@5/@10 through the pipeline and the recall API")
    ap.add_argument("--set", default="both", choices=["oracle", "s", "both"])
    ap.add_argument(
        "--limit", type=int, default=None, help="first N questions of each set (oracle: their sessions pooled)"
    )
    ap.add_argument(
        "--s-limit", type=int, default=None, help="first N s haystacks (types interleaved); default --limit"
    )
    a = ap.parse_args(argv)
    names = ["oracle", "s"] if a.set == "both" else [a.set]
    limits = {"oracle": a.limit, "s": a.s_limit if a.s_limit is not None else a.limit}
    sets = {n: load(n, limit=limits[n]) for n in names}
    return run(a, sets, name="longmemeval", modes=(*MODES, "hybrid+adjacent"), restarts=list(RESTARTS))


if __name__ == "__main__":
    sys.exit(main())
