"""The explorer's pictures, drawn on the server as inline SVG: the 14-day health chart, a memory's importance
over time, and its relations as a small graph you walk by clicking.

Why SVG from Python and not a charting or graph library: each picture is a dozen to a few dozen shapes
(14 bars; one curve; a memory and at most `MAX_NEIGHBOURS` neighbours on a ring), which a 100-line
function draws exactly. A library (uPlot ~50 KB, cytoscape.js ~400 KB, vis-network ~700 KB) would ship
more bytes than the page it draws, need JavaScript to show anything, and lay the graph out differently on
every load; here the page is complete as it arrives, a neighbour is an ordinary link (Tab reaches it, Enter
follows it, the browser's history walks back), each shape carries a <title> tooltip, and a test can read
the picture as text. Colours are presentation attributes, not `style`, so the page's Content-Security-Policy
needs no inline styles.

Every function is pure: data in, `Markup` out, every text escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

BAND_COLOURS = {"red": "#c0392b", "yellow": "#d4a017", "green": "#2e8b57"}
RELATION_COLOURS = {"similar": "#2f6fad", "supports": "#2e8b57", "contradicts": "#c0392b"}
OTHER_RELATION = "#888888"
MAX_NEIGHBOURS = 24


@dataclass(frozen=True, slots=True)
class Day:
    date: str  # YYYY-MM-DD
    score: float | None  # None: no snapshot that day
    band: str | None = None


def _svg(width: int, height: int, label: str, body: list[str]) -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(label)}">'
    )
    return Markup(head + f"<title>{escape(label)}</title>" + "".join(body) + "</svg>")


def health_chart(days: Sequence[Day], *, width: int = 280, height: int = 80) -> Markup:
    """One bar per day (oldest left), its height the score 0–100, coloured by band; dashed lines at the band
    limits 50 and 75; an empty slot (a thin grey tick) for a day without a snapshot."""
    n = max(1, len(days))
    slot = width / n
    bar = max(2.0, slot - 3)
    body = [
        f'<line x1="0" x2="{width}" y1="{height * (1 - v / 100):.1f}" y2="{height * (1 - v / 100):.1f}" '
        f'stroke="#bbbbbb" stroke-dasharray="3 3"/>'
        for v in (50, 75)
    ]
    for i, d in enumerate(days):
        x = i * slot + (slot - bar) / 2
        if d.score is None:
            body.append(f'<rect x="{x:.1f}" y="{height - 2}" width="{bar:.1f}" height="2" fill="#dddddd">'
                        f"<title>{escape(d.date)}: no snapshot</title></rect>")  # fmt: skip
            continue
        h = max(1.0, height * min(100.0, max(0.0, d.score)) / 100)
        colour = BAND_COLOURS.get(d.band or "", OTHER_RELATION)
        body.append(
            f'<rect x="{x:.1f}" y="{height - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour}">'
            f"<title>{escape(d.date)}: {d.score:.0f} ({escape(d.band or '?')})</title></rect>"
        )
    scored = [d for d in days if d.score is not None]
    label = f"memory health, last {len(days)} days" + (f", latest {scored[-1].score:.0f}" if scored else ", no data")
    return _svg(width, height, label, body)


def line_chart(
    points: Sequence[tuple[float, float]], *, marker: float | None, label: str, width: int = 420, height: int = 120
) -> Markup:
    """A curve of (x, y) with y in [0, 1], x scaled to the width; a vertical line at `marker` (e.g. now)."""
    if not points:
        return _svg(width, height, label + " (no data)", [])
    pad = 4
    xs = [p[0] for p in points]
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1.0

    def sx(x: float) -> float:
        return pad + (width - 2 * pad) * (x - lo) / span

    def sy(y: float) -> float:
        return pad + (height - 2 * pad) * (1 - min(1.0, max(0.0, y)))

    body = [
        f'<line x1="{pad}" x2="{width - pad}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#dddddd"/>' for v in (0, 0.5, 1)
    ]
    path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    body.append(f'<polyline points="{path}" fill="none" stroke="#2f5d8a" stroke-width="2"/>')
    if marker is not None and lo <= marker <= hi:
        x = sx(marker)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height}" stroke="#c0392b"><title>now</title></line>')
    return _svg(width, height, label, body)


def _short(text: str, n: int = 14) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def relation_graph(
    center: str,
    relations: Sequence[dict[str, object]],
    href: Callable[[str], str],
    *,
    size: int = 360,
) -> Markup:
    """The memory in the middle, the memories it relates to on a ring around it (at most `MAX_NEIGHBOURS`,
    strongest first), one line per relation coloured by kind (an arrow's direction is in its tooltip:
    edges point new -> old). Every neighbour is a link to its own page."""
    weight: dict[str, float] = {}
    edges: list[tuple[str, str, str, float]] = []
    for r in relations:
        src, dst = str(r.get("src", "")), str(r.get("dst", ""))
        other = dst if src == center else src
        if not other or other == center:
            continue
        w = r.get("weight")
        wt = float(w) if isinstance(w, int | float) else 0.0
        weight[other] = max(weight.get(other, 0.0), wt)
        edges.append((src, dst, str(r.get("relation", "")), wt))
    neighbours = sorted(weight, key=lambda o: (-weight[o], o))[:MAX_NEIGHBOURS]
    c = size / 2
    radius = size / 2 - 40
    pos = {center: (c, c)}
    for i, other in enumerate(neighbours):
        angle = 2 * math.pi * i / max(1, len(neighbours)) - math.pi / 2
        pos[other] = (c + radius * math.cos(angle), c + radius * math.sin(angle))
    body: list[str] = []
    for src, dst, kind, wt in edges:
        other = dst if src == center else src
        if other not in pos:
            continue
        (x1, y1), (x2, y2) = pos[src], pos[dst]
        colour = RELATION_COLOURS.get(kind, OTHER_RELATION)
        body.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            f'stroke-width="{1 + 3 * max(0.0, min(1.0, wt)):.1f}"><title>{escape(src)} → {escape(dst)}: '
            f"{escape(kind)} {wt:.2f}</title></line>"
        )
    for node in [center, *neighbours]:
        x, y = pos[node]
        label = escape(_short(node))
        if node == center:
            body.append(f'<g class="node center"><circle cx="{x:.1f}" cy="{y:.1f}" r="14" fill="#2f5d8a"/>'
                        f'<text x="{x:.1f}" y="{y + 28:.1f}" text-anchor="middle" font-size="11">{label}</text>'
                        f"<title>{escape(node)} (this memory)</title></g>")  # fmt: skip
            continue
        body.append(
            f'<a href="{escape(href(node))}" class="node" aria-label="memory {escape(node)}">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="10" fill="#ffffff" stroke="#2f5d8a" stroke-width="2"/>'
            f'<text x="{x:.1f}" y="{y + 22:.1f}" text-anchor="middle" font-size="11">{label}</text>'
            f"<title>{escape(node)}</title></a>"
        )
    more = len(weight) - len(neighbours)
    caption = f"relations of {center}: {len(neighbours)} memories" + (f" (+{more} not drawn)" if more > 0 else "")
    return _svg(size, size, caption, body)
