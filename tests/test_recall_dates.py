"""Dates named in a query (absolute, month-only, relative) and the date evidence they give the pipeline."""

from __future__ import annotations

from datetime import UTC, datetime

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.recall.dates import date_ranges

NOW = datetime(2026, 3, 11, 15, 0, tzinfo=UTC)  # a Wednesday


def spans(text: str) -> list[tuple[str, str, int]]:
    return [(str(d.start.date()), str(d.end.date()), d.month_only) for d in date_ranges(text, NOW)]


def test_absolute_dates_months_and_years() -> None:
    assert spans("What did we deploy on October 13, 2023?") == [("2023-10-13", "2023-10-14", 0)]
    assert spans("the outage of 1 February, 2023") == [("2023-02-01", "2023-02-02", 0)]
    assert spans("migrations done in October 2023") == [("2023-10-01", "2023-11-01", 0)]
    assert spans("releases in 2024") == [("2024-01-01", "2025-01-01", 0)]
    assert spans("logs from 2023-12-31") == [("2023-12-31", "2024-01-01", 0)]
    assert spans("2023年10月13日的部署") == [("2023-10-13", "2023-10-14", 0)]
    assert spans("2023年10月 的部署") == [("2023-10-01", "2023-11-01", 0)]


def test_a_month_without_a_year_matches_any_year_and_may_the_verb_is_no_month() -> None:
    (june,) = date_ranges("what broke in June?", NOW)
    assert june.month_only == 6
    assert june.contains(datetime(2019, 6, 30, tzinfo=UTC)) and not june.contains(datetime(2019, 7, 1, tzinfo=UTC))
    assert date_ranges("this may break the build", NOW) == []
    assert date_ranges("we may want to retry", NOW) == []


def test_relative_dates_count_from_the_query_time() -> None:
    assert spans("what did we fix yesterday") == [("2026-03-10", "2026-03-11", 0)]
    assert spans("the flaky test from last week") == [("2026-03-02", "2026-03-09", 0)]
    assert spans("last month's incident") == [("2026-02-01", "2026-03-01", 0)]
    assert spans("去年的迁移") == [("2025-01-01", "2026-01-01", 0)]


def test_a_query_date_lifts_memories_from_that_time(service) -> None:  # type: ignore[no-untyped-def]
    from memmy.namespace import Namespace

    ns = Namespace(source="claude_code")
    october = service.add_memory(
        AddMemory.from_json(
            {"content": "Rolled back the payments deploy after the cache bug", "createdAt": "2023-10-13T09:00:00Z"}
        ),
        ns,
    )["id"]
    march = service.add_memory(
        AddMemory.from_json(
            {
                "content": "Rolled back the payments deploy after the cache bug again",
                "createdAt": "2024-03-02T09:00:00Z",
            }
        ),
        ns,
    )["id"]
    service.indexer.drain()
    dated = service.search(
        SearchMemory.from_json({"query": "payments deploy rollback on October 13, 2023", "verbose": True}), ns
    )
    assert dated["sourceMemoryIds"][0] == october
    assert dated["debug"]["channels"][0]["calibrated"].get("date") == 1.0
    later = service.search(
        SearchMemory.from_json({"query": "payments deploy rollback in March 2024", "verbose": True}), ns
    )
    assert later["sourceMemoryIds"][0] == march
