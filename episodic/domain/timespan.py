"""The times a query names ("in May 2023", "on 7 July, 2023", "last May", "in 2022", "two weeks ago") as spans of
time. Pure, no IO: recall reads them to favour the memories written then (`episodic.retrieval.engine`).

A span is [start, end) in UTC. What is read:

- a day: "7 July 2023", "7 July, 2023", "July 7, 2023", "July 7th 2023", "2023-07-07";
- a month: "July 2023", "July, 2023"; "last July" (the latest July before `now`'s month), "this month",
  "last month";
- a year: "in 2022", "during 2022", "of 2022" (a bare four-digit number after a preposition, 1900-2099, so
  that "2022" in "version 2022.3" or "room 2022" is not read), "last year", "this year";
- a few relative spans from `now`: "yesterday", "last week", "N days / weeks / months / years ago"
  (the span around that point: a day either side for days, a week for weeks, a month for months...).

Nothing else is guessed: a month without a year ("in May") is no span (which May?), nor is a weekday.
An event is often told some time after it happened ("last weekend I painted..."), so a reader of these
spans should let a memory shortly after a span count too (`widened`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_ABBR = {m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3, "several": 3}

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(p, re.IGNORECASE))
    for kind, p in (
        ("iso", r"\b(\d{4})-(\d{2})-(\d{2})\b"),
        ("dmy", rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b"),
        ("mdy", rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),
        ("my", rf"\b{_MONTH},?\s+{_YEAR}\b"),
        ("last_month_name", rf"\blast\s+{_MONTH}\b"),
        ("year", rf"\b(?:in|during|of|since|from|throughout|year)\s+{_YEAR}\b"),
        ("relative", r"\b(this|last|past|previous)\s+(week|month|year)\b"),
        ("yesterday", r"\byesterday\b"),
        ("ago", r"\b(\d+|a|an|one|two|three|four|five|six|few|several)\s+(day|week|month|year)s?\s+ago\b"),
    )
)


@dataclass(frozen=True, slots=True)
class Span:
    start: datetime
    end: datetime

    def widened(self, after: timedelta) -> Span:
        """The span with `after` more at its end (an event told some time after it happened)."""
        return Span(self.start, self.end + after)

    def holds(self, at: datetime) -> bool:
        return self.start <= at < self.end


def _month(token: str) -> int:
    t = token.lower().rstrip(".")
    return MONTHS.index(t) + 1 if t in MONTHS else _ABBR[t[:4] if t == "sept" else t[:3]]


def _month_span(year: int, month: int) -> Span:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Span(start, end)


def _day_span(year: int, month: int, day: int) -> Span | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return Span(start, start + timedelta(days=1))


def _year_span(year: int) -> Span:
    return Span(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def _around(at: datetime, half: timedelta) -> Span:
    return Span(at - half, at + half)


def spans(query: str, now: datetime) -> tuple[Span, ...]:
    """The spans of time `query` names, in the order it names them, each once; () when it names none.
    Relative ones ("last week", "two months ago") count from `now`."""
    now = now.astimezone(UTC)
    found: list[tuple[int, Span]] = []
    taken: list[tuple[int, int]] = []  # a longer match (a day) hides the shorter ones inside it (its month)
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(query):
            if any(a <= m.start() < b or a < m.end() <= b for a, b in taken):
                continue
            span = _read(kind, m, now)
            if span is not None:
                taken.append((m.start(), m.end()))
                found.append((m.start(), span))
    out: list[Span] = []
    for _, span in sorted(found, key=lambda p: p[0]):
        if span not in out:
            out.append(span)
    return tuple(out)


def _read(kind: str, m: re.Match[str], now: datetime) -> Span | None:
    g = m.groups()
    if kind == "iso":
        return _day_span(int(g[0]), int(g[1]), int(g[2])) if 1 <= int(g[1]) <= 12 else None
    if kind == "dmy":
        return _day_span(int(g[2]), _month(g[1]), int(g[0]))
    if kind == "mdy":
        return _day_span(int(g[2]), _month(g[0]), int(g[1]))
    if kind == "my":
        return _month_span(int(g[1]), _month(g[0]))
    if kind == "last_month_name":
        month = _month(g[0])
        year = now.year if month < now.month else now.year - 1
        return _month_span(year, month)
    if kind == "year":
        return _year_span(int(g[0]))
    if kind == "relative":
        which, unit = g[0].lower(), g[1].lower()
        back = 0 if which == "this" else 1
        if unit == "year":
            return _year_span(now.year - back)
        if unit == "month":
            y, mo = divmod(now.year * 12 + now.month - 1 - back, 12)
            return _month_span(y, mo + 1)
        monday = datetime(now.year, now.month, now.day, tzinfo=UTC) - timedelta(days=now.weekday())
        start = monday - timedelta(weeks=back)
        return Span(start, start + timedelta(weeks=1))
    if kind == "yesterday":
        day = datetime(now.year, now.month, now.day, tzinfo=UTC) - timedelta(days=1)
        return Span(day, day + timedelta(days=1))
    if kind == "ago":
        n = int(g[0]) if g[0].isdigit() else _NUMBERS[g[0].lower()]
        unit = g[1].lower()
        step = {"day": timedelta(days=1), "week": timedelta(weeks=1), "month": timedelta(days=30)}.get(unit)
        if step is None:  # years
            return _year_span(now.year - n)
        return _around(now - n * step, step)
    return None
