"""`Memory`: the library's synchronous face, what `curator.open(data_dir)` returns. A thin wrapper over the state and
operations `AsyncMemory` awaits: the store's operations are called directly; those that wait for a model are run
to their end (`curator.aio.run_sync`), so every method works outside an event loop and inside one (a FastAPI
handler, a pydantic-ai tool, a Jupyter cell), where it blocks like any synchronous call."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from curator.api.async_memory import AsyncMemory
from curator.api.core import MemoryCore, documented
from curator.llm.access import NO_MODELS, Models

T = TypeVar("T")

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from pydantic_ai.models import Model

    from curator.extract.channel import ChannelWriter
    from curator.api.scouts import ScoutReport
    from curator.extract.curator_agent import CurateResult
    from curator.extract.extractor import ExtractionResult
    from curator.extract.ingest import IngestReport
    from curator.maintenance import Maintainer, MaintenanceReport
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
    from curator.sync.history import HistoryReport, HistorySync
    from curator.vectors.index import VectorIndex
    from curator.vectors.writes import SyncReport


def run_sync(operation: Coroutine[Any, Any, T]) -> T:
    """`curator.aio.run_sync`, imported with the first operation that waits for a model: asyncio is not loaded by
    the store's operations (`curator chats` and `show` stay quick)."""
    from curator.aio import run_sync as run

    return run(operation)


@documented(AsyncMemory)
class Memory:
    """Memory for every chat under one data directory."""

    def __init__(self, data_dir: str | Path | None = None, settings: Settings | None = None,
                 store: str | None = None) -> None:
        # store: a PostgreSQL URL (default: $CURATOR_STORE, `store:` in config.yaml, else SQLite in data_dir)
        self._core = MemoryCore(data_dir, settings, store)

    @property
    def aio(self) -> AsyncMemory:
        """The same memory for async code (one state: caches, index, store connections)."""
        return AsyncMemory(core=self._core)

    # the state front ends share: the store, settings, vector index, history sync, maintenance
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

    @property
    def index(self) -> VectorIndex:
        return self._core.index

    @property
    def history(self) -> HistorySync:
        return self._core.history

    @property
    def recall_guard(self) -> AbstractContextManager[object] | None:
        """A lock the library's own recaller takes (the HTTP service sets one: its request threads share it)."""
        return self._core.recall_guard

    @recall_guard.setter
    def recall_guard(self, guard: AbstractContextManager[object] | None) -> None:
        self._core.recall_guard = guard

    def maintainer(self, model: Model | None = None) -> Maintainer:
        return self._core.maintainer(model)

    def channel_writer(self, models: Models = NO_MODELS) -> ChannelWriter:
        return self._core.channel_writer(models)

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # settings and prompts
    def chat_settings(self, chat_id: str) -> dict[str, Any]:
        return self._core.chat_settings(chat_id)

    def update_chat_settings(self, chat_id: str, patch: dict[str, Any], replace: bool = False) -> dict[str, Any]:
        return self._core.update_chat_settings(chat_id, patch, replace)

    def global_settings(self) -> dict[str, Any]:
        return self._core.global_settings()

    def recall_settings(self, chat_id: str) -> RecallSettings:
        return self._core.recall_settings(chat_id)

    def update_settings(self, patch: dict[str, Any]) -> dict[str, Any]:
        return self._core.update_settings(patch)

    @property
    def prompts(self) -> Prompts:
        return self._core.prompts

    # chats and the commit log
    def create_chat(self, chat_id: str, schema: Schema | str | Path = "default",
                    settings: dict[str, Any] | None = None, *, exist_ok: bool = False) -> Chat:
        return self._core.create_chat(chat_id, schema, settings, exist_ok=exist_ok)

    def chats(self) -> list[str]:
        return self._core.chats()

    def chat(self, chat_id: str) -> Chat:
        return self._core.chat(chat_id)

    def graph(self, chat_id: str) -> GraphView:
        return self._core.graph(chat_id)

    def set_messages(self, chat_id: str, messages: Iterable[MessageLike]) -> None:
        self._core.set_messages(chat_id, messages)

    def load_chat_file(self, chat_id: str, path: str | Path) -> int:
        return self._core.load_chat_file(chat_id, path)

    def commit(self, chat_id: str, ops: list[Any], anchor_floor: int, origin: str = "manual",
               note: str = "") -> CommitRecord:
        return self._core.commit(chat_id, ops, anchor_floor, origin, note)

    def rollback(self, chat_id: str, floor: int, reason: str = "rollback", detail: str = "") -> RollbackResult:
        return self._core.rollback(chat_id, floor, reason, detail)

    def trash(self, chat_id: str) -> list[TrashBatch]:
        return self._core.trash(chat_id)

    def undo(self, chat_id: str, batch_id: int) -> UndoResult:
        return self._core.undo(chat_id, batch_id)

    def purge_trash(self, chat_id: str, batch_ids: list[int] | None = None,
                    older_than_days: float | None = None) -> int:
        return self._core.purge_trash(chat_id, batch_ids, older_than_days)

    def delete_chat(self, chat_id: str) -> None:
        self._core.delete_chat(chat_id)

    def fork(self, parent_id: str, chat_id: str, floor: int) -> ForkResult:
        return self._core.fork(parent_id, chat_id, floor)

    # extraction and the curator agent
    def extract(self, chat_id: str, floor: int | None = None, model: Model | None = None, *,
                models: Models | None = None) -> list[ExtractionResult]:
        return run_sync(self._core.extract(chat_id, floor, model, models=models))

    def ingest(self, chat_id: str, path: str | Path, schema: Schema | str = "default", model: Model | None = None,
               on_step: Callable[..., None] | None = None, limit: int | None = None, *,
               models: Models | None = None) -> IngestReport:
        return run_sync(self._core.ingest(chat_id, path, schema, model, on_step, limit, models=models))

    def curate(self, chat_id: str, floor: int | None = None, draft_reply: str | None = None, *,
               dry_run: bool = False, max_requests: int | None = None, model: Model | None = None,
               models: Models | None = None, scouts: str | None = None) -> CurateResult:
        return run_sync(self._core.curate(chat_id, floor, draft_reply, dry_run=dry_run, max_requests=max_requests,
                                          model=model, models=models, scouts=scouts))

    def scout(self, chat_id: str, message: str, speaker: str | None = None, recall: bool = True) -> ScoutReport:
        return self._core.scout(chat_id, message, speaker, recall)

    def simulate(self, chat_id: str, draft_reply: str | None = None, floor: int | None = None,
                 writer: str | None = None, models: Models | None = None) -> dict[str, Any]:
        return run_sync(self._core.simulate(chat_id, draft_reply, floor, writer, models))

    def usage(self, chat_id: str) -> dict[str, Any]:
        return self._core.usage(chat_id)

    # vectors and recall
    def rebuild_vectors(self, chat_id: str, full: bool = False, floors: tuple[int, int] | None = None,
                        progress: Callable[[int, int], None] | None = None) -> SyncReport:
        return self._core.rebuild_vectors(chat_id, full, floors, progress)

    def recall(self, chat_id: str, query: str = "", mode: str | None = None, user_floor: int | None = None,
               messages: Iterable[MessageLike] | None = None, **options: Any) -> Injection:
        return self._core.recall(chat_id, query, mode, user_floor, messages, **options)

    def facts_at(self, chat_id: str, name: str, at: str | int) -> dict[str, Any]:
        return self._core.facts_at(chat_id, name, at)

    def fact_spans(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        return self._core.fact_spans(chat_id, node_id)

    def contradictions(self, chat_id: str) -> list[dict[str, Any]]:
        return self._core.contradictions(chat_id)

    def resolve_contradiction(self, chat_id: str, contradiction_id: str, action: str) -> CommitRecord:
        return self._core.resolve_contradiction(chat_id, contradiction_id, action)

    def world_info(self, chat_id: str) -> dict[str, Any]:
        return self._core.world_info(chat_id)

    # import / export
    def export(self, chat_id: str) -> dict[str, Any]:
        return self._core.export(chat_id)

    def import_(self, chat_id: str, path: str | Path, mode: ImportMode = "restore", floor: int | None = None,
                max_bytes: int | None = None) -> CommitRecord:
        return self._core.import_(chat_id, path, mode, floor, max_bytes)

    # maintenance
    def compact(self, chat_id: str, types: list[str] | None = None, model: Model | None = None,
                progress: Callable[[int, int], None] | None = None) -> MaintenanceReport:
        return run_sync(self._core.compact(chat_id, types, model, progress))

    def consolidate(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                    model: Model | None = None) -> MaintenanceReport:
        return run_sync(self._core.consolidate(chat_id, steps, node_ids, model))

    def evolve(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
               model: Model | None = None) -> MaintenanceReport:
        return run_sync(self._core.evolve(chat_id, steps, node_ids, model))

    def summarize(self, chat_id: str, model: Model | None = None, force: bool = True) -> MaintenanceReport:
        return run_sync(self._core.summarize(chat_id, model, force))

    def forget(self, chat_id: str, dry_run: bool = False) -> MaintenanceReport:
        return run_sync(self._core.forget(chat_id, dry_run))

    def plan(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        return run_sync(self._core.plan(chat_id, model))

    def current_plan(self, chat_id: str) -> dict[str, Any] | None:
        return self._core.current_plan(chat_id)

    def reflect(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        return run_sync(self._core.reflect(chat_id, model))

    def node_history(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        return self._core.node_history(chat_id, node_id)

    # history sync and rebuild
    def sync(self, chat_id: str, messages: Iterable[MessageLike], start: int = 0, extract: bool = False,
             model: Model | None = None, *, models: Models | None = None, reason: str = "sync",
             max_revert: int | None = None, allow_empty: bool = True) -> HistoryReport:
        """Follow the chat: `messages` are its floors from `start` to the end. Memory made at or after the
        earliest changed floor is rolled back (or restored from the swipe shelf); `extract` then writes what
        is due with the chat's channel (the report's `due` lists those floors either way). What it reverts is
        kept in the trash (`report.batch`, see `undo`); it is refused (RollbackRefused, nothing changed) when it
        would revert more than `max_revert` commits, or, unless `allow_empty`, empty the chat."""
        report = self._core.sync(chat_id, messages, start, reason=reason, max_revert=max_revert,
                                 allow_empty=allow_empty)
        if extract and report.due:
            run_sync(self._core.extract_due(chat_id, model, models=models))
            report.due = self._core.due(chat_id)
        return report

    def extract_due(self, chat_id: str, model: Model | None = None, on_step: Callable[..., None] | None = None,
                    should_stop: Callable[[], bool] | None = None, *, models: Models | None = None) -> list[Any]:
        return run_sync(self._core.extract_due(chat_id, model, on_step, should_stop, models=models))

    def rebuild(self, chat_id: str, model: Model | None = None, on_step: Callable[..., None] | None = None,
                should_stop: Callable[[], bool] | None = None, *, models: Models | None = None) -> dict[str, Any]:
        removed = self._core.history.clear(chat_id)
        results = run_sync(self._core.extract_due(chat_id, model, on_step, should_stop, models=models))
        return self._core.rebuilt(chat_id, removed, results)


def open(data_dir: str | Path | None = None, store: str | None = None) -> Memory:
    """Open the memory store in `data_dir` (default: $CURATOR_DATA or ~/.local/share/memory-curator); with `store`
    (a postgresql:// URL; default $CURATOR_STORE or `store:` in config.yaml) the store lives in PostgreSQL and the
    data directory keeps the settings and the embedded vector index. In async code, `AsyncMemory(data_dir)`."""
    return Memory(data_dir, store=store)
