"""Who writes memory after a reply: one meaning of `extraction.channel` for every entry point (ingest, sync,
rebuild, the service's jobs, the proxy, the panel's operations).

- `extractor` (default): the built-in extractor, one commit per step (origin `extract`).
- `curator`: the memory_curator agent, one commit per run (origin `curate`).
- `both`: the extractor, then the curator (which is shown what the extractor wrote), in the same job.
- `off`: nobody writes; nothing is due.

Each writer keeps its own processed-floor pointer in the commit log (the newest floor it committed at), so a
floor is due until every writer of the channel has committed there: when the extractor succeeded and the
curator failed, the next run for that floor runs the curator only. After the writers, the entry point's
`after_floor` hook runs (compression in the pipeline); after a successful extraction, `after_extraction`
(the scheduled maintenance, when `maintenance.auto` is on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from curator.extract.extractor import ExtractionResult, Extractor, due_floors, last_extracted_floor
from curator.llm.access import NO_MODELS, Models
from curator.llm.records import Usage
from curator.settings import Settings, writers_of
from curator.store.messages import Message
from curator.store.store import CommitRecord, Store

if TYPE_CHECKING:
    from curator.extract.curator_agent import Curator, CurateResult
    from curator.vectors.index import VectorIndex

CHANNELS = ("extractor", "curator", "both", "off")




@dataclass
class FloorResult:
    """What the channel's writers did for one floor, and what it cost."""

    chat_id: str
    floor: int
    channel: str
    extraction: ExtractionResult | None = None
    curation: CurateResult | None = None
    maintenance: list[Any] = field(default_factory=list)  # reports of what ran after the writers (compression, ...)
    ok: bool = True
    reason: str | None = None

    @property
    def seq(self) -> int:
        step = self.extraction or self.curation
        return step.seq if step is not None else 0

    @property
    def commit(self) -> CommitRecord | None:
        """The newest writer commit of this floor (the curator's in `both`)."""
        if self.curation is not None and self.curation.commit is not None:
            return self.curation.commit
        return self.extraction.commit if self.extraction is not None else None

    @property
    def writers(self) -> list[str]:
        return [name for name, step in (("extractor", self.extraction), ("curator", self.curation)) if step]

    @property
    def usage(self) -> Usage:
        total = Usage()
        for step in (self.extraction, self.curation, *self.maintenance):
            if step is not None:
                total.merge(step.usage)
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"chat": self.chat_id, "floor": self.floor, "seq": self.seq, "channel": self.channel, "ok": self.ok,
                "reason": self.reason, "writers": self.writers,
                "commit": self.commit.id if self.commit else None,
                "extraction": self.extraction.to_dict() if self.extraction else None,
                "curation": _curation(self.curation),
                "maintenance": [m.to_dict() for m in self.maintenance], "usage": self.usage.to_dict()}


def _curation(result: CurateResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    data = result.to_dict()
    return {k: data[k] for k in ("floor", "seq", "ok", "commit", "reason", "model_requests", "usage")}


AfterFloor = Callable[[str, int], Awaitable[list[Any]]]
AfterExtraction = Callable[[ExtractionResult], Awaitable[list[Any]]]


class ChannelWriter:
    """The writers of the chats of one store. `models.extract` / `models.curate` replace the configured
    extraction and curator models (tests, scripted runs); `curator_index()` gives the vector index for the
    curator's search tool (or None)."""

    def __init__(self, store: Store, settings: Settings, *, models: Models = NO_MODELS,
                 curator_index: Callable[[], VectorIndex | None] | None = None,
                 after_extraction: AfterExtraction | None = None, after_floor: AfterFloor | None = None) -> None:
        self.store, self.settings = store, settings
        self.extractor = Extractor(store, settings, model=models.extract)
        self._curate_model, self._curator_index = models.curate, curator_index
        self._curator: Curator | None = None
        self.after_extraction, self.after_floor = after_extraction, after_floor

    def channel(self, chat_id: str) -> str:
        return self.settings.for_chat(self.store.chat(chat_id).settings).extraction.channel

    def due(self, chat_id: str) -> list[tuple[int, int]]:
        return due_floors(self.store, chat_id, self.settings)

    def curator(self) -> Curator:
        if self._curator is None:
            from curator.extract.curator_agent import Curator

            index = self._curator_index() if self._curator_index is not None else None
            self._curator = Curator(self.store, self.settings, model=self._curate_model, index=index)
        return self._curator

    async def write(self, chat_id: str, floor: int, messages: list[Message] | None = None) -> FloorResult:
        """Run the channel's writers that have not yet committed at `floor`, then the after-floor hook."""
        channel = self.channel(chat_id)
        result = FloorResult(chat_id, floor, channel)
        for writer in writers_of(channel):
            step: ExtractionResult | CurateResult
            if writer == "extractor" and floor > last_extracted_floor(self.store, chat_id, "extract"):
                extraction = result.extraction = await self.extractor.extract(chat_id, floor, messages)
                if extraction.ok and self.after_extraction is not None:
                    extraction.maintenance = await self.after_extraction(extraction)
                    result.maintenance += extraction.maintenance
                step = extraction
            elif writer == "curator" and floor > last_extracted_floor(self.store, chat_id, "curate"):
                step = result.curation = await self.curator().curate(chat_id, floor)
            else:
                continue
            if not step.ok:
                result.ok, result.reason = False, f"{writer}: {step.reason}"
                break
        if result.ok and result.writers and self.after_floor is not None:
            result.maintenance += await self.after_floor(chat_id, floor)
        return result

    async def write_due(
        self,
        chat_id: str,
        *,
        on_step: Callable[[FloorResult, int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        writer: AbstractContextManager[Any] | None = None,
        on_idle: Callable[[], None] | None = None,
        limit: int | None = None,
    ) -> list[FloorResult]:
        """Write every floor still due, one floor at a time, stopping at the first failure, after `limit` floors
        or when `should_stop` says so (checked before each floor). `writer` (the chat's writer lock) is held for
        each floor, so a sync of the same chat waits for the floor in flight; `on_idle` is called under that lock
        when nothing is left, so a sync deciding whether to queue more work never races the end."""
        results: list[FloorResult] = []
        total = len(self.due(chat_id))
        while limit is None or len(results) < limit:
            with writer if writer is not None else nullcontext():
                if should_stop is not None and should_stop():
                    break
                due = self.due(chat_id)
                if not due:
                    if on_idle is not None:
                        on_idle()
                    break
                total = max(total, len(results) + len(due))
                results.append(await self.write(chat_id, due[0][0]))
            if on_step is not None:
                on_step(results[-1], len(results), total if limit is None else min(total, limit))
            if not results[-1].ok:
                break
        return results
