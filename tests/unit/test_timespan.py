"""The times a query names (episodic.domain.timespan): table cases and properties."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodic.domain.timespan import MONTHS, Span, spans

NOW = datetime(2024, 3, 13, 15, 0, tzinfo=UTC)  # a Wednesday


def days(query: str) -> list[tuple[str, str]]:
    return [(s.start.date().isoformat(), s.end.date().isoformat()) for s in spans(query, NOW)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Mel paint in July 2023?", [("2023-07-01", "2023-08-01")]),
        ("What happened on 7 July, 2023?", [("2023-07-07", "2023-07-08")]),
        ("Where was James on July 12, 2022?", [("2022-07-12", "2022-07-13")]),
        ("the 3rd of May 2021", [("2021-05-03", "2021-05-04")]),
        ("deploy of 2023-05-08", [("2023-05-08", "2023-05-09")]),
        ("in Sept. 2023", [("2023-09-01", "2023-10-01")]),
        ("How many times did she go to the beach in 2023?", [("2023-01-01", "2024-01-01")]),
        ("What did we decide last May?", [("2023-05-01", "2023-06-01")]),
        ("What did we decide last February?", [("2024-02-01", "2024-03-01")]),
        ("What did I buy last month?", [("2024-02-01", "2024-03-01")]),
        ("this year", [("2024-01-01", "2025-01-01")]),
        ("last week", [("2024-03-04", "2024-03-11")]),
        ("yesterday", [("2024-03-12", "2024-03-13")]),
        ("two weeks ago", [("2024-02-21", "2024-03-06")]),
        ("3 days ago", [("2024-03-09", "2024-03-11")]),
        ("a year ago", [("2023-01-01", "2024-01-01")]),
        ("between June 2022 and August 2022", [("2022-06-01", "2022-07-01"), ("2022-08-01", "2022-09-01")]),
        # nothing guessed: a month without a year, a number that is not a year after a preposition, no time
        ("What did she paint in May?", []),
        ("upgrade to version 2022.3 of room 2022", []),
        ("Why was the checkout service OOM-killed?", []),
        ("on 31 February 2023", [("2023-02-01", "2023-03-01")]),  # no such day: its month
    ],
)
def test_the_times_a_query_names(query: str, expected: list[tuple[str, str]]) -> None:
    assert days(query) == expected


def test_a_day_hides_the_month_inside_it() -> None:
    assert days("on 7 July 2023, not the rest of July 2023") == [
        ("2023-07-07", "2023-07-08"),
        ("2023-07-01", "2023-08-01"),
    ]


def test_a_span_holds_its_start_not_its_end_and_widens_at_its_end() -> None:
    s = Span(datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))
    assert s.holds(s.start) and not s.holds(s.end)
    assert s.widened(timedelta(days=3)).holds(datetime(2023, 6, 2, tzinfo=UTC))


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31)), st.booleans())
def test_any_written_day_is_read_as_that_day(d: date, comma: bool) -> None:
    text = f"what happened on {d.day} {MONTHS[d.month - 1].title()}{',' if comma else ''} {d.year}?"
    (only,) = spans(text, NOW)
    assert only.start == datetime(d.year, d.month, d.day, tzinfo=UTC)
    assert only.end - only.start == timedelta(days=1)


@given(st.text(max_size=200))
def test_any_text_gives_well_formed_spans(text: str) -> None:
    for s in spans(text, NOW):
        assert s.start < s.end
        assert s.start.tzinfo is not None
