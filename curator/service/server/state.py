"""What the service's routes share: the Memory, the chat writer locks, the job runner, the extraction model."""

from __future__ import annotations

import threading
from functools import partial
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from curator.aio import run_sync
from curator.extract.extractor import due_floors
from curator.llm.access import NO_MODELS, Models
from curator.service.proxy_match import ShelvedCopies, Tail
from curator.service.event_log import EventLog
from curator.service.recall_log import RecallLog
from curator.store.messages import Message
from curator.service.jobs import ChatLocks, JobContext, JobFailed, JobKind, JobRunner
from curator.store.job_queue import DEFAULT_LEASE
from curator.api.memory import Memory
from curator.sync.history import HistoryReport, extract_due

if TYPE_CHECKING:
    from curator.extract.channel import FloorResult
    from curator.recall.engine import Recaller
    from curator.recall.injection import Injection


@dataclass
class Service:
    memory: Memory
    locks: ChatLocks
    jobs: JobRunner
    recall_lock: threading.RLock
    models: Models = NO_MODELS  # replace the configured models, per task (tests, scripted runs)
    recallers: dict[str, tuple[Recaller, threading.RLock]] = field(default_factory=dict)  # chat id -> its recaller
    recall_log: RecallLog = field(default_factory=RecallLog)  # the panel's last injection and recent recalls
    shelved_copies: ShelvedCopies = field(default_factory=ShelvedCopies)  # the proxy's copies of shelved replies
    request_tails: dict[str, Tail] = field(default_factory=dict)  # what each chat's ordinary proxy requests end with
    event_log: EventLog = field(default_factory=EventLog)  # what a front end's events did (routes_events)

    @contextmanager
    def writer(self, chat_id: str) -> Iterator[None]:
        """The chat's writer lock: one writer per chat at a time, chats in parallel."""
        with self.locks(chat_id):
            yield

    def sync(self, chat_id: str, messages: list[Any], start: int = 0, extract: bool = True, *, reason: str = "sync",
             max_revert: int | None = None, allow_empty: bool = True) -> tuple[HistoryReport, dict[str, Any] | None]:
        """Sync under the chat's writer lock, then queue re-extraction of what is due (one job per chat) when the
        chat's extraction channel includes the built-in extractor. `reason`, `max_revert`, `allow_empty`: as for
        `Memory.sync`."""
        with self.writer(chat_id):
            report = self.memory.sync(chat_id, messages, start, reason=reason, max_revert=max_revert,
                                      allow_empty=allow_empty)
            # one job writes what is due with the chat's channel (curator/extract/channel.py); `off`: nothing is due
            job = self.jobs.submit(chat_id, "extract", reuse_active=True) if extract and report.due else None
        return report, job

    def recall(self, chat_id: str, query: str, mode: str | None = None, user_floor: int | None = None,
               speaker: str | None = None, messages: list[Message] | None = None, at: str | int | None = None, *,
               record: bool = True) -> Injection:
        """Recall through the chat's own recaller, one request at a time per chat: its caches are not shared
        with other chats, so recalls of different chats run in parallel. `messages`: the recent turns. The
        injection becomes the chat's last one in the panel (`recall_log`) unless `record` is False (the panel's
        own experiments: not what the model saw)."""
        recaller, lock = self._recaller(chat_id)
        with lock:
            recaller.settings = self.memory.settings  # config.yaml may have changed (read again by the library)
            # the chat's own recall settings (a fixed `speaker` among them wins over the front end's)
            options = self.memory.recall_settings(chat_id)
            if speaker and not options.speaker:
                options = options.model_copy(update={"speaker": speaker})
            if at is not None:  # the memory as it was at a point in story time (curator/recall/as_of.py)
                from curator.recall.as_of import recall_at

                injection = recall_at(recaller, chat_id, query, at, options, recaller.prompts)
            else:
                injection = recaller.recall(chat_id, query, mode=mode, user_floor=user_floor, options=options,
                                            messages=messages)
        if record:
            self.recall_log.record(chat_id, injection.to_dict())
        return injection

    def _recaller(self, chat_id: str) -> tuple[Recaller, threading.RLock]:
        from curator.recall.engine import Recaller

        self.memory.chat(chat_id)  # ChatNotFound: no recaller is kept for an unknown id
        with self.recall_lock:
            if chat_id not in self.recallers:
                recaller = Recaller(self.memory.store, self.memory.settings, self.memory.index)
                self.recallers[chat_id] = (recaller, threading.RLock())
            return self.recallers[chat_id]

    def evict_floors(self, chat_id: str, floor: int) -> None:
        """History sync dropped memory at or after `floor`: drop what the chat's recaller cached for it."""
        with self.recall_lock:
            entry = self.recallers.pop(chat_id, None) if floor == 0 else self.recallers.get(chat_id)
        if entry is not None and floor > 0:
            with entry[1]:
                entry[0].evict_floors(chat_id, floor)


def extraction_channel(memory: Memory, chat_id: str) -> str:
    """Who writes a chat's memory after each reply (`extraction.channel`): the built-in extractor (default),
    the curator agent (director mode), both (the curator after the extractor, seeing what it wrote) or neither."""
    return memory.settings.for_chat(memory.chat(chat_id).settings).extraction.channel


def build_service(memory: Memory, models: Models = NO_MODELS, workers: int = 4,
                  job_lease: float | None = None) -> Service:
    locks = ChatLocks(memory.store)  # honoured by every process over this store
    recall_lock = threading.RLock()
    kinds: dict[str, JobKind] = {}  # filled below: the jobs run on the service they belong to
    jobs = JobRunner(memory.store, locks, kinds, workers=workers, lease=job_lease or DEFAULT_LEASE)
    service = Service(memory, locks, jobs, recall_lock, models)
    kinds.update({
        "extract": JobKind(lambda ctx: _extract_job(service, ctx), resumable=True),
        "rebuild": JobKind(lambda ctx: _rebuild_job(service, ctx), resumable=True),
        "vectors": JobKind(lambda ctx: _vectors_job(service, ctx), resumable=True),
        "curate": JobKind(lambda ctx: _curate_job(service, ctx), resumable=True),
        **{op: JobKind(partial(_maintenance_job, service, op=op)) for op in MAINTENANCE_OPS},
        "simulate": JobKind(lambda ctx: _simulate_job(service, ctx)),
    })
    # Open the shared parts now, not racily on the first concurrent requests.
    memory.history.on_floors_dropped.append(service.evict_floors)
    memory.index  # noqa: B018
    memory.recall_guard = recall_lock  # for the library's own recaller, if anything in-process uses it
    return service


def register_kind(service: Service, name: str, kind: JobKind) -> None:
    """Add a job kind (curate, compact, ...): `kind.run(ctx)` gets a JobContext, returns a JSON-able result."""
    service.jobs.kinds[name] = kind


MAINTENANCE_OPS = ("compact", "consolidate", "evolve", "summarize", "forget", "reflect", "plan")


def _maintenance_job(service: Service, ctx: JobContext, op: str) -> dict[str, Any]:
    """One maintenance operation (its own commits), under the chat's writer lock."""
    memory, params, model = service.memory, ctx.params, service.models.maintain
    calls = {
        "compact": lambda: memory.compact(ctx.chat_id, params.get("types"), model=model,
                                          progress=lambda d, t: ctx.progress(d, t)),
        "consolidate": lambda: memory.consolidate(ctx.chat_id, params.get("steps", 1), params.get("node_ids"), model),
        "evolve": lambda: memory.evolve(ctx.chat_id, params.get("steps", 1), params.get("node_ids"), model),
        "summarize": lambda: memory.summarize(ctx.chat_id, model=model),
        "forget": lambda: memory.forget(ctx.chat_id, dry_run=bool(params.get("dry_run"))),
        "reflect": lambda: memory.reflect(ctx.chat_id, model=model),
        "plan": lambda: memory.plan(ctx.chat_id, model=service.models.plan),
    }
    with ctx.writer:
        report = calls[op]()
    if not report.ok:
        raise JobFailed(f"{op} failed: {report.error}")
    return report.to_dict()


def _simulate_job(service: Service, ctx: JobContext) -> dict[str, Any]:
    """What a writer would commit, without committing (nothing is written, so no writer lock is held)."""
    params = ctx.params
    return service.memory.simulate(ctx.chat_id, params.get("draft_reply"), params.get("floor"), params.get("writer"),
                                   models=service.models)


def _curate_job(service: Service, ctx: JobContext) -> dict[str, Any]:
    """The memory_curator agent: for one floor (`params.floor`, director mode with `params.draft_reply`), or,
    with the `curator` channel, for every floor still due."""
    memory, params = service.memory, ctx.params
    if "floor" in params or "draft_reply" in params or extraction_channel(memory, ctx.chat_id) != "curator":
        floors = [params.get("floor")]
    else:
        floors = [f for f, _ in due_floors(memory.store, ctx.chat_id, memory.settings)]
    results = []
    for count, floor in enumerate(floors, start=1):
        if ctx.should_stop():
            break
        with ctx.writer:
            result = memory.curate(ctx.chat_id, floor, params.get("draft_reply"),
                                   dry_run=bool(params.get("dry_run")), models=service.models)
        results.append(result.to_dict())
        ctx.progress(count, len(floors), f"floor {result.floor}: {'ok' if result.ok else result.reason}")
        if not result.ok:
            raise JobFailed(f"curation of floor {result.floor} failed: {result.reason}")
    return {"runs": results}


def _extract_job(service: Service, ctx: JobContext) -> dict[str, Any]:
    """Write every floor still due with the chat's channel (extractor, curator or both), each floor followed by
    compression when a type is over its threshold."""
    memory = service.memory
    writer = memory.channel_writer(service.models)
    done: list[FloorResult] = []

    def on_step(result: FloorResult, count: int, total: int) -> None:
        done.append(result)
        ctx.progress(count, total, f"floor {result.floor}: {'ok' if result.ok else result.reason}")

    results = run_sync(extract_due(writer, ctx.chat_id, on_step=on_step, should_stop=ctx.should_stop,
                                      lock=ctx.writer, on_idle=ctx.retire))
    return _steps(results)


def _rebuild_job(service: Service, ctx: JobContext) -> dict[str, Any]:
    removed = None
    if not ctx.resumed:  # a resumed rebuild already cleared; it continues extracting
        with ctx.writer:
            removed = service.memory.history.clear(ctx.chat_id)
    return {"commits_removed": removed, **_extract_job(service, ctx)}


def _vectors_job(service: Service, ctx: JobContext) -> dict[str, Any]:
    full = bool(ctx.params.get("full"))
    report = service.memory.rebuild_vectors(ctx.chat_id, full=full and not ctx.resumed,
                                            progress=lambda d, t: ctx.progress(d, t))
    return report.to_dict()


def _steps(results: list[Any]) -> dict[str, Any]:
    from curator.llm.records import Usage

    usage = Usage()
    for r in results:
        usage.merge(r.usage)
    failed = next((r for r in results if not r.ok), None)
    if failed is not None:
        raise JobFailed(f"extraction of floor {failed.floor} failed: {failed.reason}")
    return {"steps_done": len(results), "floors": [r.floor for r in results],
            "extracted": [r.floor for r in results if r.extraction is not None],
            "curated": [r.floor for r in results if r.curation is not None],
            "compressed": sum(len(m.commits) for r in results for m in r.maintenance if m.op == "compact"),
            "usage": usage.to_dict()}
