"""Calendar dates named in text: a query's explicit dates become day windows, a story-time label its day.

English month names ("8 May, 2023", "May 8 2023", "May 2023"), ISO dates and CJK 年月日 are understood; relative
phrases ("last week") and story calendars ("Day 3") are not, and simply give no window."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"], 1)}
_MONTHS.update({name[:3]: number for name, number in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{3,4})"  # with a month beside it, any year (stories are set in 1893 or 3021 too)
_PATTERNS = [  # most specific first; a stretch of text is used by one pattern only
    (re.compile(rf"\b{_YEAR}-(\d{{1,2}})-(\d{{1,2}})\b"), "ymd"),
    (re.compile(r"(\d{3,4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), "ymd"),
    (re.compile(r"(\d{3,4})\s*年\s*(\d{1,2})\s*月"), "ym"),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\.?,?\s+{_YEAR}\b", re.IGNORECASE), "dmy"),
    (re.compile(rf"\b({_MONTH})\.?\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE), "mdy"),
    (re.compile(rf"\b({_MONTH})\.?,?\s+{_YEAR}\b", re.IGNORECASE), "my"),
    (re.compile(r"\b((?:19|20)\d\d)\b"), "y"),  # a bare number is a year only when it looks like a recent one
]

Window = tuple[dt.date, dt.date]


def date_windows(text: str) -> list[Window]:
    """Each explicit calendar reference in `text` as (first day, last day)."""
    out: list[Window] = []
    used: list[tuple[int, int]] = []
    for pattern, kind in _PATTERNS:
        for match in pattern.finditer(text):
            if any(a < match.end() and match.start() < b for a, b in used):
                continue
            try:
                window = _window(kind, match.groups())
            except (ValueError, KeyError):
                continue
            used.append((match.start(), match.end()))
            out.append(window)
    return out


def day_of(label: str | None) -> dt.date | None:
    """The one calendar day a label names ("1:56 pm on 8 May, 2023" -> 2023-05-08), if any."""
    if not label:
        return None
    days = [a for a, b in date_windows(label) if a == b]
    return days[0] if days else None


def within(day: dt.date | None, windows: list[Window], tolerance_days: int) -> bool:
    slack = dt.timedelta(days=tolerance_days)
    return day is not None and any(a - slack <= day <= b + slack for a, b in windows)


def _window(kind: str, g: tuple[Any, ...]) -> Window:
    if kind == "ymd":
        day = dt.date(int(g[0]), int(g[1]), int(g[2]))
        return day, day
    if kind == "ym":
        return dt.date(int(g[0]), int(g[1]), 1), _month_end(int(g[0]), int(g[1]))
    if kind == "dmy":
        day = dt.date(int(g[2]), _MONTHS[g[1].lower()], int(g[0]))
        return day, day
    if kind == "mdy":
        day = dt.date(int(g[2]), _MONTHS[g[0].lower()], int(g[1]))
        return day, day
    if kind == "my":
        year, month = int(g[1]), _MONTHS[g[0].lower()]
        return dt.date(year, month, 1), _month_end(year, month)
    return dt.date(int(g[0]), 1, 1), dt.date(int(g[0]), 12, 31)


def _month_end(year: int, month: int) -> dt.date:
    return dt.date(year + (month == 12), month % 12 + 1, 1) - dt.timedelta(days=1)
