"""Story time, place and point of view as the extractor and the curator write them, and the engine's normaliser.

A type whose schema switches `story` on gets these extra item fields: `story_time` (the label the story uses: "the
third night", "1893-10-04", "the morning after the fire"), `scene` (a short id for the scene; the same id continues
it), `flashback`, `region` (the primary place) with `region_path` (the wider places, widest first), `pov` (whose
point of view; empty = objective) and, when the schema has the `knows` relation, `known_by` (who witnessed it or was
told).

The engine turns the label into a sortable segment key: a named date becomes that day ("1893-10-04.0000"); a
relative or story-calendar label is placed right after the previous segment; a flashback keeps its date (or sits at
the start of the current day) and never moves "now". The stored segment is `key|scene|flashback`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from curator.dates import date_windows
from curator.schemas.model import STORY_FIELDS

__all__ = ["STORY_FIELDS", "StoryClock", "StoryInputError", "parse_segment", "region_path", "story_fields"]
KNOWS = "knows"  # the engine's relation: character -> memory they witnessed or were told
NO_DATE = "0000-00-00"
_KEY = re.compile(r"^(\d{4}-\d{2}-\d{2})\.(\d{4})$")
_DATE_LIKE = re.compile(r"\b(\d{3,4})-(\d{1,2})-(\d{1,2})\b")
_PATH_SPLIT = re.compile(r"\s*(?:>|/|→)\s*")


class StoryInputError(ValueError):
    """A story-time/place/POV value the engine cannot use; the message is meant for the model."""


_HINTS = {"story_time": "when, as the story names it ('1893-10-04', 'the third night')",
          "scene": "a short scene id, reused while the scene goes on",
          "flashback": "true for a remembered earlier time",
          "region": "where it happens", "region_path": "the wider places, widest first ('The Vale > Millbrook')",
          "pov": "the character whose belief this is; empty for what objectively happened",
          "known_by": "who saw it or was told; empty when anyone could know it"}


def story_fields(with_knowledge: bool, described: bool = False) -> dict[str, Any]:
    """The pydantic field definitions added to an item of a `story` type. The extractor's output model leaves the
    descriptions out (its user prompt says what they mean, see `story_prompt_lines`); the curator's write tools,
    whose only documentation is their schema, have them (`described`)."""
    def hint(name: str) -> dict[str, Any]:
        return {"description": _HINTS[name]} if described else {}

    fields: dict[str, Any] = {name: (str, Field(default="", **hint(name)))
                    for name in ("story_time", "scene", "region", "region_path", "pov")}
    fields["flashback"] = (bool, Field(default=False, **hint("flashback")))
    if with_knowledge:
        fields["known_by"] = (list[str], Field(default_factory=list, **hint("known_by")))
    return {name: fields[name] for name in STORY_FIELDS if name in fields}


def story_prompt_lines(with_knowledge: bool) -> list[str]:
    """How the extra fields read in the type's description in the user prompt (the system prompt is unchanged)."""
    lines = ["- story_time: when, as the story names it ('1893-10-04', 'the third night'); scene: a short id, "
             "reused while the scene goes on; flashback: true for a remembered earlier time",
             "- region: where; region_path: the wider places, widest first ('The Vale > Millbrook')",
             "- pov: the character whose belief this is; empty for what objectively happened"]
    if with_knowledge:
        lines.append("- known_by: who saw it or was told; empty when anyone could know it")
    return lines


@dataclass(frozen=True)
class Segment:
    key: str  # "YYYY-MM-DD.NNNN": sorts in story order
    scene: str | None = None
    flashback: bool = False

    def encode(self) -> str:
        return "|".join([self.key, self.scene or "", "flashback" if self.flashback else ""]).rstrip("|")

    @property
    def date(self) -> str:
        return self.key.split(".")[0]

    @property
    def ordinal(self) -> int:
        return int(self.key.split(".")[1])


def parse_segment(value: str | None) -> Segment | None:
    """A stored segment, or None when it is not one the normaliser wrote (imports may store any text)."""
    if not value:
        return None
    parts = value.split("|")
    if not _KEY.match(parts[0]):
        return None
    return Segment(parts[0], (parts[1] or None) if len(parts) > 1 else None, "flashback" in parts[2:])


def region_path(region: str | None, path: str | None) -> str | None:
    """The stored region: the wider places, widest first, then the primary place, joined by ' > '."""
    primary = " ".join((region or "").split())
    wider = [" ".join(p.split()) for p in _PATH_SPLIT.split(path or "") if p.strip()]
    if wider and not primary:
        raise StoryInputError("region_path is given without region: name the primary place in region "
                              "(and only the wider places in region_path)")
    if not primary:
        return None
    if wider and wider[-1].casefold() == primary.casefold():
        wider = wider[:-1]
    return " > ".join([*wider, primary])


def primary_region(stored: str | None) -> str | None:
    return stored.split(" > ")[-1] if stored else None


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


class StoryClock:
    """Places story-time labels in order, given the segments the chat already has."""

    def __init__(self, existing: Iterable[tuple[str | None, str | None]] = ()) -> None:
        """`existing`: (label, stored segment) of the chat's nodes."""
        self.by_scene: dict[str, Segment] = {}
        self.by_label: dict[str, Segment] = {}
        self.latest: Segment | None = None
        self.ordinals: dict[str, int] = {}  # date -> highest ordinal used
        for label, stored in existing:
            segment = parse_segment(stored)
            if segment is not None:
                self._remember(label, segment)

    def _remember(self, label: str | None, segment: Segment) -> None:
        if segment.scene:
            self.by_scene.setdefault(_norm(segment.scene), segment)
        if label and label.strip():
            self.by_label.setdefault(_norm(label), segment)
        self.ordinals[segment.date] = max(self.ordinals.get(segment.date, -1), segment.ordinal)
        if not segment.flashback and (self.latest is None or segment.key > self.latest.key):
            self.latest = segment

    def place(self, label: str | None, scene: str | None = None, flashback: bool = False) -> dict[str, Any] | None:
        """The story_time of one item ({label, segment}), or None when it gives no story time."""
        label = " ".join((label or "").split()) or None
        scene = " ".join((scene or "").replace("|", " ").split()) or None
        if label is None and scene is None:
            if flashback:
                raise StoryInputError("flashback is true but story_time is empty: say when the remembered scene "
                                      "happened (a date, or as the story names it)")
            return None
        known = self.by_scene.get(_norm(scene)) if scene else None
        if known is None and label:
            known = self.by_label.get(_norm(label))
        if known is not None:
            segment = Segment(known.key, scene or known.scene, flashback or known.flashback)
        elif label is None:
            raise StoryInputError(f"scene {scene!r} is new: give its story_time as well (when it happens)")
        else:
            segment = self._new(label, scene, flashback)
        self._remember(label, segment)
        return {"label": label, "segment": segment.encode()}

    def _new(self, label: str, scene: str | None, flashback: bool) -> Segment:
        day = _day(label)
        if day is not None:
            ordinal = self.ordinals.get(day, -1) + 1
            return Segment(f"{day}.{ordinal:04d}", scene, flashback)
        date = self.latest.date if self.latest else NO_DATE
        if flashback:  # remembered, date unknown: before everything of the current day
            return Segment(f"{date}.0000", scene, True)
        ordinal = max(self.ordinals.get(date, -1), self.latest.ordinal if self.latest else -1) + 1
        return Segment(f"{date}.{ordinal:04d}", scene, False)


def _day(label: str) -> str | None:
    """The first day a label names, as ISO text; a label that looks like a date but is none is an error."""
    windows = date_windows(label)
    for year, month, day in _DATE_LIKE.findall(label):
        try:
            dt.date(int(year), int(month), int(day))
        except ValueError:
            raise StoryInputError(f"story_time {label!r} looks like a date but is not one: write YYYY-MM-DD with "
                                  "a month 1-12 and a day that month has, or name the time as the story does") from None
    if not windows:
        return None
    return windows[0][0].isoformat().rjust(10, "0")
