"""The choice protocol over two runs of the pipeline harness (`eval.noise`): does a change lose anywhere?

    python -m eval.compare BASE.json NEW.json [--column hybrid] [--part dev|holdout|all]
    python -m eval.compare RUN.json --base-column hybrid --column "rrf60 (seed)"      # two columns of one run

BASE and NEW are eval/results/*.json of ``eval.pipeline`` (or ``eval.locomo`` / ``eval.longmemeval``), asked
the same questions (one store served before and after a change, or the same corpora ingested by each
branch). Per set and part, whole and by question type or category: ΔR@5 and ΔR@10 in points with their
paired 95 % bootstrap intervals, and the verdict: a cell LOSES where an interval lies wholly below 0. A
change ships only if no dev cell of either set loses, and then no holdout cell (docs/quality.md).
Exit status 1 when a cell loses.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from eval.noise import differences, table, verdict


def _answers(path: Path, column: str) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    answers = data.get("answers", {})
    if column not in answers:
        raise SystemExit(f"{path}: no column {column!r} (has: {', '.join(answers)})")
    return list(answers[column])


def cells_of(answers: list[dict[str, Any]], part: str) -> dict[str, list[str]]:
    """'<set>/<part>' and '<set>/<part>/<type>' -> question ids ('all': both parts)."""
    out: dict[str, list[str]] = {}
    for a in answers:
        if part != "all" and a["part"] != part:
            continue
        out.setdefault(f"{a['set']}/{part}", []).append(a["id"])
        out.setdefault(f"{a['set']}/{part}/{a['type']}", []).append(a["id"])
    return dict(sorted(out.items(), key=lambda kv: (kv[0].count("/"), kv[0])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path, nargs="?", help="default: BASE (compare two columns of one run)")
    ap.add_argument("--column", default="hybrid", help="NEW's column")
    ap.add_argument("--base-column", default=None, help="BASE's column (default: --column)")
    ap.add_argument("--part", default="dev", choices=["dev", "holdout", "all"])
    a = ap.parse_args(argv)
    base = _answers(a.base, a.base_column or a.column)
    new = _answers(a.new or a.base, a.column)
    recalls = {x["id"]: (float(x["r5"]), float(x["r10"])) for x in base}
    after = {x["id"]: (float(x["r5"]), float(x["r10"])) for x in new}
    diffs = differences(recalls, after, cells_of(base, a.part))
    title = f"{a.new or a.base} [{a.column}] − {a.base} [{a.base_column or a.column}], {a.part}"
    print(table(diffs, title))
    return 0 if verdict(diffs).holds else 1


if __name__ == "__main__":
    sys.exit(main())
