"""`AsyncMemory`: the library for async code (a FastAPI app, a pydantic-ai agent, a notebook). The same operations
as `Memory`, each awaited: those that wait for a model run on the caller's loop; those that wait for the store or
the embedder run in a worker thread, so the loop keeps serving while they work.

    async with curator.AsyncMemory("./data") as memory:
        await memory.create_chat("notes", "default")
        injection = await memory.recall("notes", "Where is the lantern?")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar

from curator.api.core import MemoryCore, documented

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from curator.api.scouts import ScoutReport
    from curator.extract.curator_agent import CurateResult
    from curator.extract.extractor import ExtractionResult
    from curator.extract.ingest import IngestReport
    from curator.llm.access import Models
    from curator.maintenance import MaintenanceReport
    from curator.prompts import Prompts
    from curator.recall.injection import Injection
    from curator.schemas import Schema
    from curator.settings import RecallSettings, Settings
    from curator.store.exchange import ImportMode
    from curator.store.forks import ForkResult
    from curator.store.messages import MessageLike
    from curator.store.queries import GraphView
    from curator.store.store import Chat, CommitRecord, RollbackResult, Store, UndoResult
    from curator.store.trash import TrashBatch
    from curator.sync.history import HistoryReport
    from curator.vectors.writes import SyncReport

P = ParamSpec("P")
T = TypeVar("T")


async def _off_loop(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (the store, the embedder) in the loop's worker threads. The store gives each thread its
    own connection, and the default executor reuses its threads, so connections are not opened per call."""
    import asyncio  # here: `Memory` imports this module, and the store's operations need no event loop

    return await asyncio.to_thread(function, *args, **kwargs)


@documented(MemoryCore)
class AsyncMemory:
    """Memory for every chat under one data directory, for async code. `Memory` is its synchronous twin; both
    may share one state (`Memory.aio`)."""

    def __init__(self, data_dir: str | Path | None = None, settings: Settings | None = None,
                 store: str | None = None, *, core: MemoryCore | None = None) -> None:
        # store: a PostgreSQL URL (default: $CURATOR_STORE, `store:` in config.yaml, else SQLite in data_dir)
        self._core = core if core is not None else MemoryCore(data_dir, settings, store)

    # the state both faces share
    @property
    def store(self) -> Store:
        return self._core.store

    @property
    def settings(self) -> Settings:
        return self._core.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self._core.settings = settings

    @property
    def data_dir(self) -> Path:
        return self._core.data_dir

    async def aclose(self) -> None:
        await _off_loop(self._core.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # settings and prompts
    async def chat_settings(self, chat_id: str) -> dict[str, Any]:
        return await _off_loop(self._core.chat_settings, chat_id)

    async def update_chat_settings(self, chat_id: str, patch: dict[str, Any], replace: bool = False) -> dict[str, Any]:
        return await _off_loop(self._core.update_chat_settings, chat_id, patch, replace)

    async def global_settings(self) -> dict[str, Any]:
        return await _off_loop(self._core.global_settings)

    async def recall_settings(self, chat_id: str) -> RecallSettings:
        return await _off_loop(self._core.recall_settings, chat_id)

    async def update_settings(self, patch: dict[str, Any]) -> dict[str, Any]:
        return await _off_loop(self._core.update_settings, patch)

    @property
    def prompts(self) -> Prompts:
        return self._core.prompts

    # chats and the commit log
    async def create_chat(self, chat_id: str, schema: Schema | str | Path = "default",
                          settings: dict[str, Any] | None = None, *, exist_ok: bool = False) -> Chat:
        return await _off_loop(self._core.create_chat, chat_id, schema, settings, exist_ok=exist_ok)

    async def chats(self) -> list[str]:
        return await _off_loop(self._core.chats)

    async def chat(self, chat_id: str) -> Chat:
        return await _off_loop(self._core.chat, chat_id)

    async def graph(self, chat_id: str) -> GraphView:
        return await _off_loop(self._core.graph, chat_id)

    async def set_messages(self, chat_id: str, messages: Iterable[MessageLike]) -> None:
        await _off_loop(self._core.set_messages, chat_id, messages)

    async def load_chat_file(self, chat_id: str, path: str | Path) -> int:
        return await _off_loop(self._core.load_chat_file, chat_id, path)

    async def commit(self, chat_id: str, ops: list[Any], anchor_floor: int, origin: str = "manual",
                     note: str = "") -> CommitRecord:
        return await _off_loop(self._core.commit, chat_id, ops, anchor_floor, origin, note)

    async def rollback(self, chat_id: str, floor: int, reason: str = "rollback", detail: str = "") -> RollbackResult:
        return await _off_loop(self._core.rollback, chat_id, floor, reason, detail)

    async def trash(self, chat_id: str) -> list[TrashBatch]:
        return await _off_loop(self._core.trash, chat_id)

    async def undo(self, chat_id: str, batch_id: int) -> UndoResult:
        return await _off_loop(self._core.undo, chat_id, batch_id)

    async def purge_trash(self, chat_id: str, batch_ids: list[int] | None = None,
                          older_than_days: float | None = None) -> int:
        return await _off_loop(self._core.purge_trash, chat_id, batch_ids, older_than_days)

    async def delete_chat(self, chat_id: str) -> None:
        await _off_loop(self._core.delete_chat, chat_id)

    async def fork(self, parent_id: str, chat_id: str, floor: int) -> ForkResult:
        """A new chat `chat_id` sharing the parent's floors 0..`floor` and its memory of them (a copied commit
        log: `curator/store/forks.py`); the parent is untouched. No model call."""
        return await _off_loop(self._core.fork, parent_id, chat_id, floor)

    # extraction and the curator agent
    async def extract(self, chat_id: str, floor: int | None = None, model: Model | None = None, *,
                      models: Models | None = None) -> list[ExtractionResult]:
        return await self._core.extract(chat_id, floor, model, models=models)

    async def ingest(self, chat_id: str, path: str | Path, schema: Schema | str = "default",
                     model: Model | None = None, on_step: Callable[..., None] | None = None,
                     limit: int | None = None, *, models: Models | None = None) -> IngestReport:
        return await self._core.ingest(chat_id, path, schema, model, on_step, limit, models=models)

    async def curate(self, chat_id: str, floor: int | None = None, draft_reply: str | None = None, *,
                     dry_run: bool = False, max_requests: int | None = None, model: Model | None = None,
                     models: Models | None = None, scouts: str | None = None) -> CurateResult:
        return await self._core.curate(chat_id, floor, draft_reply, dry_run=dry_run, max_requests=max_requests,
                                       model=model, models=models, scouts=scouts)

    async def scout(self, chat_id: str, message: str, speaker: str | None = None, recall: bool = True) -> ScoutReport:
        return await _off_loop(self._core.scout, chat_id, message, speaker, recall)

    async def simulate(self, chat_id: str, draft_reply: str | None = None, floor: int | None = None,
                       writer: str | None = None, models: Models | None = None) -> dict[str, Any]:
        return await self._core.simulate(chat_id, draft_reply, floor, writer, models)

    async def usage(self, chat_id: str) -> dict[str, Any]:
        return await _off_loop(self._core.usage, chat_id)

    # vectors and recall
    async def rebuild_vectors(self, chat_id: str, full: bool = False, floors: tuple[int, int] | None = None,
                              progress: Callable[[int, int], None] | None = None) -> SyncReport:
        return await _off_loop(self._core.rebuild_vectors, chat_id, full, floors, progress)

    async def recall(self, chat_id: str, query: str = "", mode: str | None = None, user_floor: int | None = None,
                     messages: Iterable[MessageLike] | None = None, **options: Any) -> Injection:
        return await _off_loop(self._core.recall, chat_id, query, mode, user_floor, messages, **options)

    async def facts_at(self, chat_id: str, name: str, at: str | int) -> dict[str, Any]:
        return await _off_loop(self._core.facts_at, chat_id, name, at)

    async def fact_spans(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        return await _off_loop(self._core.fact_spans, chat_id, node_id)

    async def contradictions(self, chat_id: str) -> list[dict[str, Any]]:
        return await _off_loop(self._core.contradictions, chat_id)

    async def resolve_contradiction(self, chat_id: str, contradiction_id: str, action: str) -> CommitRecord:
        return await _off_loop(self._core.resolve_contradiction, chat_id, contradiction_id, action)

    async def world_info(self, chat_id: str) -> dict[str, Any]:
        return await _off_loop(self._core.world_info, chat_id)

    # import / export
    async def export(self, chat_id: str) -> dict[str, Any]:
        return await _off_loop(self._core.export, chat_id)

    async def import_(self, chat_id: str, path: str | Path, mode: ImportMode = "restore", floor: int | None = None,
                      max_bytes: int | None = None) -> CommitRecord:
        return await _off_loop(self._core.import_, chat_id, path, mode, floor, max_bytes)

    # maintenance
    async def compact(self, chat_id: str, types: list[str] | None = None, model: Model | None = None,
                      progress: Callable[[int, int], None] | None = None) -> MaintenanceReport:
        return await self._core.compact(chat_id, types, model, progress)

    async def consolidate(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                          model: Model | None = None) -> MaintenanceReport:
        return await self._core.consolidate(chat_id, steps, node_ids, model)

    async def evolve(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                     model: Model | None = None) -> MaintenanceReport:
        return await self._core.evolve(chat_id, steps, node_ids, model)

    async def summarize(self, chat_id: str, model: Model | None = None, force: bool = True) -> MaintenanceReport:
        return await self._core.summarize(chat_id, model, force)

    async def forget(self, chat_id: str, dry_run: bool = False) -> MaintenanceReport:
        return await self._core.forget(chat_id, dry_run)

    async def reflect(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        return await self._core.reflect(chat_id, model)

    async def plan(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        return await self._core.plan(chat_id, model)

    async def current_plan(self, chat_id: str) -> dict[str, Any] | None:
        return await _off_loop(self._core.current_plan, chat_id)

    async def node_history(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        return await _off_loop(self._core.node_history, chat_id, node_id)

    # history sync and rebuild
    async def sync(self, chat_id: str, messages: Iterable[MessageLike], start: int = 0, extract: bool = False,
                   model: Model | None = None, *, models: Models | None = None, reason: str = "sync",
                   max_revert: int | None = None, allow_empty: bool = True) -> HistoryReport:
        """Follow the chat: `messages` are its floors from `start` to the end. Memory made at or after the
        earliest changed floor is rolled back (or restored from the swipe shelf); `extract` then writes what
        is due with the chat's channel (the report's `due` lists those floors either way). `model` and
        `models` as for `extract_due`. What it reverts is kept in the trash (`report.batch`, see `undo`); it is
        refused (RollbackRefused) when it would revert more than `max_revert` commits, or, unless `allow_empty`,
        empty the chat."""
        report = await _off_loop(lambda: self._core.sync(chat_id, messages, start, reason=reason,
                                                         max_revert=max_revert, allow_empty=allow_empty))
        if extract and report.due:
            await self._core.extract_due(chat_id, model, models=models)
            report.due = await _off_loop(self._core.due, chat_id)
        return report

    async def extract_due(self, chat_id: str, model: Model | None = None,
                          on_step: Callable[..., None] | None = None,
                          should_stop: Callable[[], bool] | None = None, *,
                          models: Models | None = None) -> list[Any]:
        return await self._core.extract_due(chat_id, model, on_step, should_stop, models=models)

    async def rebuild(self, chat_id: str, model: Model | None = None, on_step: Callable[..., None] | None = None,
                      should_stop: Callable[[], bool] | None = None, *,
                      models: Models | None = None) -> dict[str, Any]:
        """Clear the chat's memory and write every floor again with the chat's channel (`curator rebuild`)."""
        removed = await _off_loop(self._core.history.clear, chat_id)
        results = await self._core.extract_due(chat_id, model, on_step, should_stop, models=models)
        return await _off_loop(self._core.rebuilt, chat_id, removed, results)
