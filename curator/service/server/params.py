"""Bounds of the query parameters every router shares: floors and offsets are non-negative and fit the store's
64-bit integers; a page is at most MAX_PAGE items (a negative limit is an error, not "no limit")."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

MAX_INT = 2**62  # below SQLite's 2^63, with room for floor arithmetic
MAX_PAGE = 5000

Floor = Annotated[int, Query(ge=0, le=MAX_INT)]
OptionalFloor = Annotated[int | None, Query(ge=0, le=MAX_INT)]
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]
Level = Annotated[int | None, Query(ge=0, le=1000)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
BatchId = Annotated[int, Path(ge=1, le=MAX_INT)]
