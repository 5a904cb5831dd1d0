"""What `Memory` and `AsyncMemory` share: the store, settings, vector index, recaller and history sync of one data
directory, and every operation once. The store's operations are plain functions (they block on the database);
the operations that wait for a model (extraction, curation, maintenance) are coroutines. `Memory` calls the first
directly and runs the second to their end; `AsyncMemory` awaits the second and runs the first in a worker thread,
so an event loop never waits on the store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from curator.api.settings_ops import SettingsOps
from curator.api.story_ops import StoryOps

from curator.extract.chatfile import read_chat
from curator.store.messages import MessageLike, as_messages
from curator.errors import ChatExists
from curator.paths import data_dir as resolve_data_dir
from curator.store.queries import GraphView
from curator.store.store import Chat, CommitRecord, RollbackResult, Store, UndoResult
from curator.store.trash import Retention, TrashBatch
from curator.store.vector_rows import indexed_profile
from curator.llm.access import NO_MODELS, Models

# Model access (pydantic-ai), the extractor, settings (which name the embedders) and the vector index load when an
# operation needs them: `curator show` or `curator chats` reads the store and nothing else.
if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from curator.schemas import Schema

    from curator.extract.channel import AfterExtraction, AfterFloor, ChannelWriter
    from curator.extract.extractor import ExtractionResult
    from curator.extract.ingest import IngestReport
    from curator.settings import RecallSettings, Settings
    from curator.extract.curator_agent import CurateResult
    from curator.recall.injection import Injection
    from curator.maintenance import Maintainer, MaintenanceReport
    from curator.recall.engine import Recaller
    from curator.sync.history import HistoryReport, HistorySync
    from curator.store.exchange import ImportMode
    from curator.vectors.index import VectorIndex
    from curator.vectors.writes import SyncReport
    from curator.store.forks import ForkResult


C = TypeVar("C", bound=type)


def documented(source: type) -> Callable[[C], C]:
    """Give a face's methods that have no docstring the one of the same name on `source`: each operation is
    described once, where it is implemented."""

    def apply(cls: C) -> C:
        for name, value in vars(cls).items():
            original = getattr(source, name, None)
            if callable(value) and not value.__doc__ and original is not None and original.__doc__:
                value.__doc__ = original.__doc__
        return cls

    return apply


class MemoryCore(SettingsOps, StoryOps):
    """Memory for every chat under one data directory: the state and the operations behind both faces (the
    settings and prompts ones in `settings_ops.py`, the story and orchestrator ones in `story_ops.py`)."""

    def __init__(self, data_dir: str | Path | None = None, settings: Settings | None = None,
                 store: str | None = None) -> None:
        # store: a PostgreSQL URL (default: $CURATOR_STORE, `store:` in config.yaml, else SQLite in data_dir)
        self.store = Store(resolve_data_dir(data_dir), store=store)
        self._settings: Settings | None = None
        self._settings_given = settings is not None  # given settings are never replaced by config.yaml's
        self._config_stamp: tuple[int, int] | None = None  # config.yaml's (mtime, size) when read
        self._config_checked = 0.0
        self._index: VectorIndex | None = None
        self._recaller: Recaller | None = None
        self._compress_failures: dict[str, int] = {}  # chat -> floor of its last failed compression (pipeline)
        self._summary_backoff: dict[str, tuple[int, int]] = {}  # chat -> (seq, failures in a row) of its synopses
        self._history: HistorySync | None = None
        # the HTTP service sets a lock here: recall caches are shared by its request threads
        self.recall_guard: AbstractContextManager[object] | None = None
        if settings is not None:
            self._use(settings)

    @property
    def settings(self) -> Settings:
        """Model profiles and extraction settings (`<data>/config.yaml` and the environment). Read again when the
        file changes (the panel, `curator settings`, an editor; looked at once a second at most), so every process
        over the data directory follows it; what is read at start (embedder, vector server, store) stays."""
        if self._settings is None:
            return self._reload_settings()
        if not self._settings_given and time.monotonic() - self._config_checked > 1.0:
            self._config_checked = time.monotonic()
            if self._stamp() != self._config_stamp:
                return self._reload_settings()
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        """Replace the settings (the index keeps the embedder it opened with)."""
        self._settings_given = True
        self._use(settings)

    def _use(self, settings: Settings) -> None:
        """Put settings in effect: the store's retention of the trash follows them, and so do the parts that keep a
        reference to them."""
        self._settings = settings
        self.store.retention = Retention(settings.history.keep_days, settings.history.keep_batches)
        self._spread_settings()

    @property
    def data_dir(self) -> Path:
        return self.store.data_dir

    def close(self) -> None:
        self._write_access()
        if self._index is not None:
            self._index.close()
        self.store.close()

    # chats
    def create_chat(self, chat_id: str, schema: Schema | str | Path = "default", settings: dict[str, Any] | None = None,
                    *, exist_ok: bool = False) -> Chat:
        """Create a chat using a schema object, a preset name or a schema file path. With `exist_ok`, a chat that
        already exists with a schema of that name is returned as it is (a script can run again); one with another
        schema is still an error (ChatExists)."""
        from curator.schemas import Schema, load_schema  # not at import: a read-only command needs no schema

        if not isinstance(schema, Schema):
            schema = load_schema(schema)
        try:
            return self.store.create_chat(chat_id, schema, settings)
        except ChatExists:
            if not exist_ok:
                raise
            chat = self.store.chat(chat_id)
            if chat.schema.name != schema.name:
                raise ChatExists(f"chat {chat_id!r} already exists with schema {chat.schema.name!r}, not "
                                 f"{schema.name!r}", "Use another chat id, or the schema the chat was made with.")\
                    from None
            return chat

    def chats(self) -> list[str]:
        return self.store.chats()

    def chat(self, chat_id: str) -> Chat:
        return self.store.chat(chat_id)

    def graph(self, chat_id: str) -> GraphView:
        self._write_access()
        return self.store.graph(chat_id)

    def _write_access(self) -> None:
        """Recall keeps its access counts in memory for a few recalls (`Recaller.write_access`): what reads the
        graph sees them written."""
        if self._recaller is not None:
            self._recaller.write_access()

    def set_messages(self, chat_id: str, messages: Iterable[MessageLike]) -> None:
        """Store the chat's whole history: `Message`s or plain dicts ({"role", "name", "content"})."""
        self.store.set_messages(chat_id, as_messages(messages))

    def load_chat_file(self, chat_id: str, path: str | Path) -> int:
        """Store the messages of a SillyTavern .jsonl or plain JSONL file as the chat's history."""
        messages = read_chat(path).messages
        self.store.set_messages(chat_id, messages)
        return len(messages)

    # the commit log
    def commit(
        self, chat_id: str, ops: list[Any], anchor_floor: int, origin: str = "manual", note: str = ""
    ) -> CommitRecord:
        return self.store.commit(chat_id, ops, anchor_floor, origin, note)

    def rollback(self, chat_id: str, floor: int, reason: str = "rollback", detail: str = "") -> RollbackResult:
        """Revert every commit anchored at `floor` or later (the messages stay); what it reverts is kept in the
        trash as `result.batch`, which `undo` puts back."""
        self.settings  # noqa: B018 - the retention of the trash; a config that cannot be read stops here
        result = self.store.rollback(chat_id, floor, reason=reason, detail=detail)
        if result.batch is not None:
            self.history.floors_dropped(chat_id, floor)
        return result

    # the trash of the commit log: every rollback can be undone (curator/store/trash.py, docs/safety.md)
    def trash(self, chat_id: str) -> list[TrashBatch]:
        """The chat's reverted batches, newest first: what each rollback, sync, proxy edit, ingest, rebuild or undo
        took away, why and when."""
        return self.store.trash(chat_id)

    def undo(self, chat_id: str, batch_id: int) -> UndoResult:
        """Put a reverted batch back exactly: its commits (graph equal to before the rollback) and the floors it
        replaced. What was committed since (e.g. the re-extraction of an edited floor) is reverted first and kept as
        a batch of its own, so the undo can be undone too."""
        self.settings  # noqa: B018
        result = self.store.undo(chat_id, batch_id)
        self.history.shelf.drop(chat_id, result.floor)  # shelved replies rested on the floors that changed
        self.history.floors_dropped(chat_id, result.floor)
        return result

    def purge_trash(self, chat_id: str, batch_ids: list[int] | None = None,
                    older_than_days: float | None = None) -> int:
        """Drop reverted batches for good (those named, those older than a number of days, or all of the chat's)."""
        return self.store.purge_trash(chat_id, batch_ids, older_than_days)

    # extraction
    async def extract(self, chat_id: str, floor: int | None = None, model: Model | None = None, *,
                      models: Models | None = None) -> list[ExtractionResult]:
        """Extract the reply at `floor`, or every reply still due; stops at the first failure. The built-in
        extractor only, whatever the channel (`extract_due` follows the channel). After each step, compression
        of the types over their threshold and the scheduled maintenance (reports in `result.maintenance`), see
        `_after_step` and `_compress_after`. `model` replaces the extraction model, `models` those of any task
        (`curator.llm.access.Models`)."""
        from curator.extract.extractor import Extractor

        models = (models or NO_MODELS).with_task("extract", model)
        scheduled = self._after_step(models)
        compress = self._compress_after(models)

        async def after_step(result: ExtractionResult) -> list[Any]:
            return [*(await scheduled(result) if scheduled else []),
                    *(await compress(chat_id, result.floor) if compress else [])]

        extractor = Extractor(self.store, self.settings, model=models.extract)
        floors = [floor] if floor is not None else extractor_due(self.store, chat_id, self.settings)
        results = []
        for f in floors:
            results.append(await extractor.extract(chat_id, f))
            if results[-1].ok:
                results[-1].maintenance = await after_step(results[-1])
            if not results[-1].ok:
                break
        return results

    async def ingest(self, chat_id: str, path: str | Path, schema: Schema | str = "default",
                     model: Model | None = None, on_step: Callable[..., Any] | None = None, limit: int | None = None, *,
                     models: Models | None = None) -> IngestReport:
        """Replay a chat file into memory, extracting floor by floor; a rerun continues where it stopped.
        The chat's `extraction.channel` says whether the extractor, the curator agent or both write; after each
        floor, compression of the types over their threshold, and scheduled maintenance (see `channel_writer`)."""
        from curator.extract.ingest import ingest

        writer = self.channel_writer((models or NO_MODELS).with_task("extract", model))
        return await ingest(self.store, chat_id, path, self.settings, schema=schema, on_step=on_step, limit=limit,
                            write=writer)

    def channel_writer(self, models: Models = NO_MODELS) -> ChannelWriter:
        """Who writes memory after a reply, as the chat's `extraction.channel` says (extractor, curator, both or
        off), then compression in the pipeline (`_compress_after`) and the scheduled maintenance (`_after_step`).
        `models` replace the configured ones (tests, scripted runs)."""
        from curator.extract.channel import ChannelWriter

        return ChannelWriter(self.store, self.settings, models=models,
                             curator_index=lambda: self._curator_index_for(),
                             after_extraction=self._after_step(models), after_floor=self._compress_after(models))

    def _curator_index_for(self) -> VectorIndex | None:
        return self.index if indexed_profile(self.store) is not None else None

    def _compress_after(self, models: Models) -> AfterFloor | None:
        """Compression in the pipeline (`curator/maintenance/pipeline.py`): after a floor's commits, the types
        over their threshold are compressed in the same job with the `summarize` model. With models given but no
        `summarize` one it does not run (a model given for one task is never reused for another, nor is the
        configured one mixed into a scripted run)."""
        if models.given() and models.summarize is None:
            return None
        from curator.maintenance.pipeline import compress_due

        maintainer = self.maintainer(models.summarize)

        failures = self._compress_failures

        async def run(chat_id: str, floor: int) -> list[MaintenanceReport]:
            report = await compress_due(maintainer, chat_id, floor, failures)
            return [report] if report is not None else []

        return run

    def usage(self, chat_id: str) -> dict[str, Any]:
        """LLM calls, tokens and latency of a chat, per task and in all, and the failed extraction steps."""
        from curator.llm.usage import extraction_failures, usage_totals

        self.store.chat(chat_id)
        return {"usage": usage_totals(self.store, chat_id), "failed_steps": extraction_failures(self.store, chat_id)}

    # vectors and recall
    @property
    def index(self) -> VectorIndex:
        """The vector index (opened on first use). While it is open, every commit and rollback is followed by
        an incremental sync; recall also syncs first when the graph changed, so the index is never read stale."""
        if self._index is None:
            from curator.vectors.index import VectorIndex

            index = self._index = VectorIndex(self.store, self.settings.embedding, self.settings.vectors_url)

            def follow(chat_id: str) -> None:
                index.sync(chat_id)

            self.store.on_change.append(follow)
        return self._index

    def rebuild_vectors(self, chat_id: str, full: bool = False, floors: tuple[int, int] | None = None,
                        progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Re-embed what is missing or stale (`full`: everything; `floors`: the nodes of a floor range)."""
        self.store.chat(chat_id)
        return self.index.sync(chat_id, full=full, floors=floors, progress=progress)

    def recall(self, chat_id: str, query: str = "", mode: str | None = None, user_floor: int | None = None,
               messages: Iterable[MessageLike] | None = None, **options: Any) -> Injection:
        """The injection for the next generation: persistent and recalled memory within the token budget.
        Give `user_floor` (the floor of the user message being answered) to reuse the result on a swipe, and
        `messages` (the recent turns, the message answered last; `Message`s or plain dicts) to build the query
        from the conversation. `at` (a story time the memory uses, "day 5", a date, or a floor) recalls over the
        memory as it was then (`curator/recall/as_of.py`); the other options override the chat's recall settings."""
        at = options.pop("at", None)
        turns = as_messages(messages) if messages is not None else None
        if self._recaller is None:
            self.store.chat(chat_id)  # a missing chat is told before the index and recall load
            from curator.recall.engine import Recaller

            self._recaller = Recaller(self.store, self.settings, self.index)
        opts = self.recall_settings(chat_id).model_copy(update=options) if options else None
        if at is not None:
            from curator.recall.as_of import recall_at

            return recall_at(self._recaller, chat_id, query, at, opts or self.recall_settings(chat_id),
                             self._recaller.prompts)
        return self._recaller.recall(chat_id, query, mode=mode, user_floor=user_floor, options=opts, messages=turns)

    def recall_settings(self, chat_id: str) -> RecallSettings:
        """The recall settings of a chat: its own over config.yaml's."""
        return self.settings.for_chat(self.store.chat(chat_id).settings).recall

    def world_info(self, chat_id: str) -> dict[str, Any]:
        """The chat's memory as a SillyTavern World Info (lorebook) file."""
        from curator.recall.worldinfo import export_world_info

        chat = self.store.chat(chat_id)
        latest = max((n.floor_to for n in self.store.graph(chat_id).nodes(archived=None)), default=0)
        messages = self.store.messages(chat_id)
        return export_world_info(self.store.graph(chat_id), chat.schema, max(latest, len(messages) - 1))

    # import / export
    def export(self, chat_id: str) -> dict[str, Any]:
        from curator.store.exchange import export_graph

        self._write_access()
        return export_graph(self.store, chat_id)

    def import_(self, chat_id: str, path: str | Path, mode: ImportMode = "restore", floor: int | None = None,
                max_bytes: int | None = None) -> CommitRecord:
        """Import a graph file into `chat_id` (created with the file's schema when new) as one commit."""
        from curator.store.exchange import import_graph, read_graph_file

        graph, schema, source = read_graph_file(path, **({"max_bytes": max_bytes} if max_bytes else {}))
        return import_graph(self.store, chat_id, graph, schema, mode, floor, source)

    # ---- the memory_curator agent (issue 5) ----------------------------------------------------------------
    async def curate(self, chat_id: str, floor: int | None = None, draft_reply: str | None = None, *,
                     dry_run: bool = False, max_requests: int | None = None, model: Model | None = None,
                     models: Models | None = None, scouts: str | None = None) -> CurateResult:
        """Run the memory_curator agent for the reply at `floor` (default: the newest) or for a reply the
        orchestrator drafted (`draft_reply`, at the floor it will take). Its writes land as one commit anchored
        at that floor (none with `dry_run`: the result lists the ops it would commit); the result is the run's
        trace: tool calls, model requests, tokens, latency, ops. `model` replaces the `curate` profile's."""
        from curator.extract.curator_agent import Curator

        self.store.chat(chat_id)
        has_vectors = indexed_profile(self.store, chat_id) is not None
        models = (models or NO_MODELS).with_task("curate", model)
        curator = Curator(self.store, self.settings, model=models.curate, index=self.index if has_vectors else None)
        compress = self._compress_after(models)

        result = await curator.curate(chat_id, floor, draft_reply, dry_run=dry_run, max_requests=max_requests,
                                      scouts=scouts)
        if result.ok and result.commit is not None and compress is not None:
            result.maintenance = await compress(chat_id, result.floor)
        return result

    # ---- maintenance (issue 6): consolidation, compression, summaries, forgetting, reflection, evolution ----
    # Each returns a MaintenanceReport (changes, commits, LLM calls and tokens); each step that changes the graph
    # is its own commit (origin `maintenance`) anchored at the chat's current floor, so a rollback undoes it.
    def maintainer(self, model: Model | None = None) -> Maintainer:
        """The maintenance jobs of this store; `model` replaces the configured `maintain` profile."""
        from curator.maintenance import Maintainer

        self._write_access()  # forgetting weighs them
        return Maintainer(self.store, self.settings, model=model, index=lambda: self.index,
                          backoff=self._summary_backoff)

    def _after_step(self, models: Models) -> AfterExtraction | None:
        """Scheduled maintenance after an extraction step, when the chat's settings turn it on
        (`maintenance.auto`). With models given but no `maintain` one it does not run: a model given for
        extraction is never reused for other tasks."""
        if models.given() and models.maintain is None and models.plan is None:
            return None
        from curator.maintenance.scheduling import after_extraction

        maintainer = self.maintainer(models.maintain)
        maintainer.plan_model = models.plan
        maintainer.scripted = models.given()  # a scripted run: only the passes it gave a model for
        return lambda result: after_extraction(maintainer, result)

    async def compact(self, chat_id: str, types: list[str] | None = None, model: Model | None = None,
                      progress: Callable[[int, int], None] | None = None) -> MaintenanceReport:
        """Hierarchical compression of every type (or the types named) whose compression mode is hierarchical."""
        return await self.maintainer(model).compact(chat_id, types, progress)

    async def consolidate(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                          model: Model | None = None) -> MaintenanceReport:
        """Dedupe/merge the new nodes of the newest `steps` extraction steps (or `node_ids`), gate first."""
        return await self.maintainer(model).consolidate(chat_id, steps, node_ids)

    async def evolve(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                     model: Model | None = None) -> MaintenanceReport:
        """Force evolution of recent nodes against their neighbours (consolidation without the gate)."""
        return await self.maintainer(model).evolve(chat_id, steps, node_ids)

    async def summarize(self, chat_id: str, model: Model | None = None, force: bool = True) -> MaintenanceReport:
        """Write a small summary of the extractions since the last one, then roll summaries up."""
        return await self.maintainer(model).summarize(chat_id, force=force)

    async def forget(self, chat_id: str, dry_run: bool = False) -> MaintenanceReport:
        """One sleep cycle: archive the nodes whose retention fell below the threshold (`dry_run`: list them)."""
        return await self.maintainer().forget(chat_id, dry_run=dry_run)

    def node_history(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        """Every commit that changed a node, with its title and fields before (evolution keeps old texts here)."""
        from curator.maintenance.history import node_history

        return node_history(self.store, chat_id, node_id)

    async def reflect(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        """Let the model write a reflection (a long-term pattern) linked to the memories it rests on."""
        return await self.maintainer(model).reflect(chat_id)

    # ---- history sync, swipe shelf, rebuild (issue 7) --------------------------------------------------------
    @property
    def history(self) -> HistorySync:
        """History sync for every chat (opened on first use); its rollbacks drop the recall results cached for
        the floors they remove."""
        if self._history is None:
            from curator.store.shelf import Shelf
            from curator.sync.history import HistorySync

            def evict(chat_id: str, floor: int) -> None:
                if self._recaller is not None:
                    with self.recall_guard or nullcontext():
                        self._recaller.evict_floors(chat_id, floor)

            self._history = HistorySync(self.store, self.settings, Shelf(self.store), [evict])
        return self._history

    def sync(self, chat_id: str, messages: Iterable[MessageLike], start: int = 0, *, reason: str = "sync",
             max_revert: int | None = None, allow_empty: bool = True) -> HistoryReport:
        """Follow the chat: `messages` are its floors from `start` to the end. Memory made at or after the
        earliest changed floor is rolled back (or restored from the swipe shelf); the report's `due` lists the
        floors still to write. What it reverts is kept in the trash (`report.batch`, see `undo`). It is refused
        (RollbackRefused, nothing changed) when it would revert more than `max_revert` commits, or, unless
        `allow_empty`, empty the chat."""
        return self.history.sync(chat_id, as_messages(messages), start, reason=reason, max_revert=max_revert,
                                 allow_empty=allow_empty)

    def due(self, chat_id: str) -> list[int]:
        """The floors still to write with the chat's channel."""
        from curator.extract.extractor import due_floors

        return [f for f, _ in due_floors(self.store, chat_id, self.settings)]

    async def extract_due(self, chat_id: str, model: Model | None = None, on_step: Callable[..., Any] | None = None,
                          should_stop: Callable[[], bool] | None = None, *,
                          models: Models | None = None) -> list[Any]:
        """Write every floor still due with the chat's channel (extractor, curator, both; nothing for off),
        floor by floor, each followed by compression when due; stops at the first failure or when
        `should_stop()`. Returns a `FloorResult` per floor (`ok`, `floor`, `reason`, `usage`, the writers' results).
        `model` replaces the extraction model, `models` those of any task."""
        writer = self.channel_writer((models or NO_MODELS).with_task("extract", model))
        return await writer.write_due(chat_id, on_step=on_step, should_stop=should_stop)

    def rebuilt(self, chat_id: str, removed: int, results: list[Any]) -> dict[str, Any]:
        """What `rebuild` reports: the commits it removed, the floors written, the first failure, what is due."""
        from curator.llm.records import Usage

        usage = Usage()
        for r in results:
            usage.merge(r.usage)
        failed = next((r for r in results if not r.ok), None)
        return {"chat": chat_id, "commits_removed": removed, "steps_done": sum(r.ok for r in results),
                "failed": failed.to_dict() if failed else None, "due": self.due(chat_id), "usage": usage.to_dict()}

    def fork(self, parent_id: str, chat_id: str, floor: int) -> ForkResult:
        from curator.store.forks import fork_chat

        self._write_access()
        return fork_chat(self.store, parent_id, chat_id, floor)

    def delete_chat(self, chat_id: str) -> None:
        """Delete a chat: its messages, memory, costs and vectors."""
        from curator.store.shelf import delete_chat_rows

        self.store.delete_chat(chat_id)
        with self.store.transaction(chat_id) as conn:
            delete_chat_rows(conn, chat_id)
        self.history.floors_dropped(chat_id, 0)
        if self._index is not None:
            self._index.drop(chat_id)


def extractor_due(store: Store, chat_id: str, settings: Settings) -> list[int]:
    """The floors the built-in extractor has still to do, whatever the channel: every `extract_every` replies
    after its own pointer."""
    from curator.extract.extractor import assistant_floors, last_extracted_floor

    every = settings.for_chat(store.chat(chat_id).settings).extraction.extract_every
    pointer = last_extracted_floor(store, chat_id, "extract")
    return [f for seq, f in enumerate(assistant_floors(store.messages(chat_id)), start=1)
            if f > pointer and seq % every == 0]

