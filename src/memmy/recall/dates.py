"""Dates named in a query, as time ranges a memory's own time (``created_at``) can fall into.

Rule-based, English and Chinese: full dates ("October 13, 2023", "13 October 2023", "2023-10-13", "2023年10月13日"),
months with or without a year ("October 2023", "in June"), years ("in 2023"), and dates relative to the moment of
the query ("yesterday", "last week", "last month", "last year", "昨天", "上周", "上个月", "去年"). A month without a
year matches that month in any year. The recall pipeline counts a memory whose time falls in a named range as
date evidence; nothing is filtered out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|"
    r"jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I)
_IN_MONTH = re.compile(rf"\b(?:in|during|since|until|last)\s+{_MONTH}(?![\w-])(?!\s*\d)", re.I)
_YEAR = re.compile(r"\b(?:in|during|since|of|from|year)\s+((?:19|20)\d\d)\b", re.I)
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d{1,2})-(\d{1,2})\b")
_CJK_DATE = re.compile(r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月(?:\s*(\d{1,2})\s*[日号])?")
_RELATIVE: dict[str, tuple[str, int]] = {
    "yesterday": ("day", 1),
    "昨天": ("day", 1),
    "last week": ("week", 1),
    "上周": ("week", 1),
    "上个星期": ("week", 1),
    "last month": ("month", 1),
    "上个月": ("month", 1),
    "last year": ("year", 1),
    "去年": ("year", 1),
    "today": ("day", 0),
    "今天": ("day", 0),
    "this week": ("week", 0),
    "本周": ("week", 0),
    "这周": ("week", 0),
}


@dataclass(frozen=True)
class DateRange:
    """``[start, end)`` in UTC; ``month_only`` ranges match that month of any year."""

    start: datetime
    end: datetime
    month_only: int = 0

    def contains(self, moment: datetime) -> bool:
        """True when ``moment`` falls inside the range."""
        if self.month_only:
            return moment.month == self.month_only
        return self.start <= moment < self.end


def _month_range(year: int, month: int) -> DateRange:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return DateRange(start, end)


def _day_range(year: int, month: int, day: int) -> DateRange | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return DateRange(start, start + timedelta(days=1))


def _relative(kind: str, back: int, now: datetime) -> DateRange:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if kind == "day":
        start = today - timedelta(days=back)
        return DateRange(start, start + timedelta(days=1))
    if kind == "week":
        monday = today - timedelta(days=today.weekday())
        start = monday - timedelta(weeks=back)
        return DateRange(start, start + timedelta(weeks=1))
    if kind == "month":
        year, month = today.year, today.month - back
        while month < 1:
            year, month = year - 1, month + 12
        return _month_range(year, month)
    start = datetime(today.year - back, 1, 1, tzinfo=UTC)
    return DateRange(start, datetime(today.year - back + 1, 1, 1, tzinfo=UTC))


def date_ranges(text: str, now: datetime | None = None) -> list[DateRange]:
    """Every date or period the text names (most specific first per mention), relative ones against ``now``."""
    now = now or datetime.now(UTC)
    found: list[DateRange] = []
    taken: list[tuple[int, int]] = []

    def free(match: re.Match[str]) -> bool:
        span = match.span()
        if any(span[0] < end and start < span[1] for start, end in taken):
            return False
        taken.append(span)
        return True

    for match in _ISO.finditer(text):
        if free(match) and (day := _day_range(int(match[1]), int(match[2]), int(match[3]))):
            found.append(day)
    for match in _CJK_DATE.finditer(text):
        if free(match):
            year, month = int(match[1]), int(match[2])
            if 1 <= month <= 12:
                exact = _day_range(year, month, int(match[3])) if match[3] else None
                found.append(exact or _month_range(year, month))
    for match in _DAY_MONTH_YEAR.finditer(text):
        if free(match) and (day := _day_range(int(match[3]), MONTHS[match[2].lower()], int(match[1]))):
            found.append(day)
    for match in _MONTH_DAY_YEAR.finditer(text):
        if free(match) and (day := _day_range(int(match[3]), MONTHS[match[1].lower()], int(match[2]))):
            found.append(day)
    for match in _MONTH_YEAR.finditer(text):
        if free(match):
            found.append(_month_range(int(match[2]), MONTHS[match[1].lower()]))
    for match in _IN_MONTH.finditer(text):
        if free(match):
            month = MONTHS[match[1].lower()]
            found.append(DateRange(datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), month))
    for match in _YEAR.finditer(text):
        if free(match):
            year = int(match[1])
            found.append(DateRange(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))
    lowered = text.lower()
    for phrase, (kind, back) in _RELATIVE.items():
        if phrase in lowered:
            found.append(_relative(kind, back, now))
    return found


def parse_moment(value: str | None) -> datetime | None:
    """An ISO-8601 timestamp as an aware datetime, or None."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
