"""Ingestion: replay a chat file floor by floor, extracting as a live chat would.

Each step is its own commit, so an interrupted run loses at most the step in flight, and running the same
command again continues after the last extracted floor. If the file differs from what was ingested before,
memory is first rolled back to the first floor that changed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_ai.models import Model

from curator.schemas import Schema, load_schema

from curator.extract.chatfile import chat_messages
from curator.extract.extractor import ExtractionResult, due_floors
from curator.llm.access import NO_MODELS, Models
from curator.llm.records import Usage
from curator.store.messages import Message
from curator.settings import Settings
from curator.store.store import Store

if TYPE_CHECKING:
    from curator.extract.channel import ChannelWriter, FloorResult


@dataclass
class IngestReport:
    chat_id: str
    floors: int
    steps_due: int
    results: list[ExtractionResult] = field(default_factory=list)
    curated: list[Any] = field(default_factory=list)  # CurateResult of each curator run (channel curator or both)
    rolled_back_from: int | None = None
    seconds: float = 0.0
    maintenance: list[Any] = field(default_factory=list)  # reports of what ran after the steps (compression, ...)

    @property
    def failed(self) -> ExtractionResult | None:
        return next((r for r in (*self.results, *self.curated) if not r.ok), None)

    def usage(self) -> Usage:
        total = Usage()
        for r in (*self.results, *self.curated):
            total.merge(r.usage)
        for m in self.maintenance:
            total.merge(m.usage)
        return total

    def to_dict(self) -> dict[str, Any]:
        failed = self.failed
        return {"chat": self.chat_id, "floors": self.floors, "steps_due": self.steps_due,
                # a step is an extraction, or a curator run when the curator is the only channel
                "steps_done": sum(r.ok for r in (self.results or self.curated)),
                "curated": sum(r.ok for r in self.curated),
                "rolled_back_from": self.rolled_back_from,
                "failed": failed.to_dict() if failed else None, "usage": self.usage().to_dict(),
                "seconds": round(self.seconds, 3),
                "maintenance": [m.to_dict() for m in self.maintenance if not m.skipped or m.error]}


def first_changed_floor(stored: list[Message], incoming: list[Message]) -> int | None:
    """The first floor whose role, name, text or active swipe differs, or where one chat ends early."""
    for floor, (old, new) in enumerate(zip(stored, incoming)):
        if old.hash != new.hash:
            return floor
    if len(incoming) < len(stored):
        return len(incoming)
    return None


async def ingest(store: Store, chat_id: str, path: str | Path, settings: Settings, *,
                 schema: Schema | str = "default", model: Model | None = None,
                 on_step: Callable[[FloorResult, int, int], None] | None = None,
                 limit: int | None = None, models: Models = NO_MODELS,
                 after_step: Callable[[ExtractionResult], Awaitable[list[Any]]] | None = None,
                 write: ChannelWriter | None = None) -> IngestReport:
    """Ingest a SillyTavern .jsonl or plain JSONL chat into `chat_id` (created with `schema` if new). The chat's
    `extraction.channel` decides who writes each due floor (`write`: a `curator.extract.channel.ChannelWriter`,
    else one built from `model`, `models` and `after_step`, the scheduled maintenance after each
    successful extraction step)."""
    started = time.perf_counter()
    messages = chat_messages(Path(path))
    if not store.has_chat(chat_id):
        store.create_chat(chat_id, schema if isinstance(schema, Schema) else load_schema(schema))
    changed = first_changed_floor(store.messages(chat_id), messages)
    rolled_back = None
    if changed is not None:  # what the file no longer holds goes to the trash with its floors (`curator undo`)
        reverted = store.rollback(chat_id, changed, reason="ingest", detail=f"{path}: floor {changed} changed",
                                  messages=messages[changed:])
        rolled_back = changed if reverted.reverted else None
    else:
        store.set_messages(chat_id, messages)
    due = due_floors(store, chat_id, settings)
    report = IngestReport(chat_id, len(messages), len(due), rolled_back_from=rolled_back)
    now = due if limit is None else due[:limit]
    if write is None:
        from curator.extract.channel import ChannelWriter

        write = ChannelWriter(store, settings, models=models.with_task("extract", model), after_extraction=after_step)
    for done, (floor, _seq) in enumerate(now, start=1):
        result = await write.write(chat_id, floor, messages)  # the chat's channel: extractor, curator or both
        if result.extraction is not None:
            report.results.append(result.extraction)
        if result.curation is not None:
            report.curated.append(result.curation)
        report.maintenance += result.maintenance
        if on_step:
            on_step(result, done, len(now))
        if not result.ok:
            break  # the pointer stays before this floor; a rerun retries it
    report.seconds = time.perf_counter() - started
    return report
