"""LoCoMo's dev half through the real pipeline and the recall API, by the dataset's protocol (`eval.pipeline`).

    python -m eval.locomo [--limit N] [--clients 4] [--restart COLUMN] [--env KEY=VALUE]

The protocol (../shared/datasets/locomo-dev/README.md): one journal entry per turn (``summary`` =
"Speaker: text", + " [shares <blip_caption>]" when an image was shared; ``id`` = ``locomo-<conversation>-<dia_id>``;
``workspace_id`` = ``locomo-<conversation>``; one agent; ``run_id`` = ``<conversation>-session_N``; ``ts`` =
the session's date and time plus j seconds for its j-th turn; ``summary.generated``, severity info), all
through the gate and the consumer of an ``episodic up`` stack; once every memory has its dense vector, each
question with evidence is one ``POST /v1/recall`` (scope own, that agent, k 10) from 4 concurrent clients, in
modes dense, sparse and hybrid. R@k = |evidence ∩ the top k hits' turns| / |evidence|, a hit standing for its
own turn and the turns folded into it, averaged over the questions; by category (1 to 5), over the dev
conversations (26, 41, 47: choices are made there), the holdout ones (43, 49: the final check only) and all.

Writes eval/results/locomo-<ts>.json (``python -m eval.compare`` reads it).
"""

from __future__ import annotations

import sys

from eval.data import load
from eval.pipeline import arguments, run


def main(argv: list[str] | None = None) -> int:
    ap = arguments("LoCoMo (dev half) recall@5/@10 through the pipeline and the recall API")
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations")
    a = ap.parse_args(argv)
    return run(a, {"locomo": load("locomo", limit=a.limit)}, name="locomo")


if __name__ == "__main__":
    sys.exit(main())
