"""The explorer's SVG pictures (recall/ui/charts.py): pure functions, escaped text, links for walking."""

from __future__ import annotations

import re

from recall.ui import charts


def test_health_chart_draws_a_bar_per_day_coloured_by_band_and_a_tick_for_a_missing_day() -> None:
    days = [
        charts.Day("2026-11-01", 82.0, "green"),
        charts.Day("2026-11-02", None),
        charts.Day("2026-11-03", 40.0, "red"),
    ]
    svg = str(charts.health_chart(days))
    rects = re.findall(r"<rect [^>]*>", svg)
    assert len(rects) == 3
    assert 'fill="#2e8b57"' in rects[0] and 'fill="#dddddd"' in rects[1] and 'fill="#c0392b"' in rects[2]
    assert "2026-11-02: no snapshot" in svg and "latest 40" in svg
    heights = [float(re.search(r'height="([\d.]+)"', r).group(1)) for r in (rects[0], rects[2])]  # type: ignore[union-attr]
    assert heights[0] > heights[1]  # 82 is taller than 40


def test_line_chart_marks_now_and_clamps_to_the_unit_range() -> None:
    svg = str(charts.line_chart([(0, 0.9), (100, 0.5), (200, 1.7)], marker=50, label="importance"))
    assert "<polyline" in svg and "<title>now</title>" in svg
    assert "(no data)" in str(charts.line_chart([], marker=None, label="importance"))


def test_relation_graph_links_each_neighbour_and_escapes_every_id() -> None:
    rels = [
        {"src": "m1", "dst": "<b>x</b>", "relation": "similar", "weight": 0.9},
        {"src": 'old"y', "dst": "m1", "relation": "supports", "weight": 1.0},
        {"src": "m1", "dst": "m1", "relation": "similar", "weight": 1.0},  # a self edge draws nothing
    ]
    svg = str(charts.relation_graph("m1", rels, lambda other: f"/ui/memory/{other}?workspace_id=w&x=1"))
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg and "old&#34;y" in svg
    links = re.findall(r'<a href="([^"]+)" class="node"', svg)
    assert len(links) == 2 and all("&amp;x=1" in x for x in links)
    assert svg.count("<line ") == 2 and "relations of m1: 2 memories" in svg


def test_relation_graph_draws_at_most_the_strongest_neighbours() -> None:
    rels = [{"src": "c", "dst": f"n{i:02d}", "relation": "similar", "weight": i / 100} for i in range(40)]
    svg = str(charts.relation_graph("c", rels, lambda o: f"/{o}"))
    assert svg.count('class="node"') == charts.MAX_NEIGHBOURS and f"+{40 - charts.MAX_NEIGHBOURS} not drawn" in svg
    assert 'href="/n39"' in svg and 'href="/n00"' not in svg  # the strongest kept
