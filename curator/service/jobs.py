"""Jobs: long work (re-extraction, ingest, rebuild, compaction) run in worker threads, with progress, cancel and a
result, kept in the store so every service process sees them and a restart shows what happened to each job.

One writer per chat: each job takes its chat's writer lock (`ChatLocks`, honoured across processes) for every
step it commits, so work on one chat is serialized while chats run in parallel. Every step is a commit of its own,
so a crash mid-job leaves no partial commit. The jobs table is a queue shared by the processes over one store
(`curator/store/job_queue.py`): each job is run by one worker holding a lease; when a worker dies, its jobs are
resumed by another worker (or its own restart) when their kind says it is safe (extraction continues from the
processed-floor pointer) and failed visibly otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from curator.errors import CuratorError, NotFound
from curator.store.chat_locks import ChatLock, ChatLocks
from curator.store.db import Row
from curator.store.job_queue import DEFAULT_LEASE, INTERRUPTED, MAX_ATTEMPTS, JobQueue
from curator.store.store import Store

__all__ = ["ChatLocks", "JobCancelled", "JobContext", "JobFailed", "JobKind", "JobRunner"]

log = logging.getLogger("curator.jobs")

ACTIVE = ("queued", "running")


class JobFailed(CuratorError):
    """A job's work reported a failure it expects (a request cap, a model error the step recorded): the job
    fails with the reason, and the log gets one line, not a traceback."""


class JobCancelled(Exception):
    """Raised inside a job by `JobContext.check` once the job was asked to stop."""


@dataclass
class JobContext:
    """What a running job sees: its id and chat, progress reporting, the cancel flag, the chat's writer lock."""

    job_id: str
    chat_id: str
    kind: str
    params: dict[str, Any]
    resumed: bool
    writer: ChatLock
    _runner: JobRunner
    cancelled: threading.Event = field(default_factory=threading.Event)
    retired: bool = False  # will take no more work: a new request for the same work needs a new job
    base: int = 0  # steps done before a restart: a resumed job's progress continues from there
    lost: bool = False  # another worker took the job over (this one's lease ran out): it writes nothing more

    def retire(self) -> None:
        """Take no more work (called under the chat's writer lock): every process's submit then queues anew."""
        self.retired = True
        self._runner._retire(self.job_id)

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        self._runner._update(self.job_id, done=self.base + done, total=None if total is None else self.base + total,
                             message=message)

    def should_stop(self) -> bool:
        return self.cancelled.is_set()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled()


# A job's work: gets its context, returns a JSON-able result.
JobFunction = Callable[[JobContext], dict[str, Any]]


@dataclass
class JobKind:
    run: JobFunction
    resumable: bool = False  # safe to run again from the start after a crash (it continues where it stopped)


class JobRunner:
    """Runs jobs on a thread pool; `kinds` maps a job kind to its function. Jobs come from the store's shared
    queue (`JobQueue`), so several runners (service processes) over one store share the work: each job runs once.
    A ticker thread takes queued jobs while threads are free, renews the leases of running ones (and hears of
    cancel requests made in other processes), and takes over jobs whose worker died."""

    def __init__(self, store: Store, locks: ChatLocks, kinds: dict[str, JobKind], workers: int = 4,
                 lease: float = DEFAULT_LEASE, poll: float = 0.2, worker: str | None = None) -> None:
        self.store, self.locks, self.kinds, self.workers = store, locks, kinds, workers
        self.queue = JobQueue(store, worker, lease)
        self.poll = poll
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="curator-job")
        self._live: dict[str, JobContext] = {}
        self._guard = threading.Lock()
        self._stopping = False
        self._wake, self._stop = threading.Event(), threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def worker(self) -> str:
        return self.queue.worker

    def recover(self) -> dict[str, list[str]]:
        """At start: take over the jobs whose worker is gone (resumed if their kind allows, failed visibly
        otherwise), then start taking jobs from the queue."""
        outcome = self._take_stranded()
        self.start()
        return outcome

    def start(self) -> None:
        with self._guard:
            if self._ticker is None and not self._stopping:
                self._ticker = threading.Thread(target=self._tick_loop, name="curator-jobs-ticker", daemon=True)
                self._ticker.start()

    def submit(
        self, chat_id: str, kind: str, params: dict[str, Any] | None = None, *, reuse_active: bool = False
    ) -> dict[str, Any]:
        """Queue a job; with `reuse_active`, an active job of the same kind and chat (in any process) is returned
        instead. Callers that must not race another process's submit hold the chat's writer lock."""
        if kind not in self.kinds:
            raise CuratorError(f"unknown job kind {kind!r}; one of: {', '.join(sorted(self.kinds))}")
        with self._guard:
            if reuse_active and (found := self.queue.active(chat_id, kind)) is not None:
                return self.get(found)
            job_id = "job_" + uuid.uuid4().hex[:12]
            self.queue.add(job_id, chat_id, kind, params or {})
        self.start()
        self._wake.set()
        return self.get(job_id)

    # ---- the ticker ------------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        renewed = stranded = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now - renewed >= self.queue.lease / 3:
                    renewed = now
                    self._renew()
                if now - stranded >= max(1.0, self.poll * 5):
                    stranded = now
                    self._take_stranded()
                    self._hear_cancels()
                self._take_queued()
            except Exception:  # noqa: BLE001 - a failed round (store busy, connection lost) is tried again
                log.exception("jobs ticker round failed; trying again")
            self._wake.wait(self.poll)
            self._wake.clear()

    def _take_queued(self) -> None:
        if self._stopping:
            return
        with self._guard:
            free = self.workers - len(self._live)
        for row in self.queue.claim(free, self.kinds):
            self._start(row, resumed=int(row["attempts"]) > 1, message=None)

    def _take_stranded(self) -> dict[str, list[str]]:
        outcome: dict[str, list[str]] = {"resumed": [], "failed": []}
        if self._stopping:
            return outcome
        for row in self.queue.stranded():
            kind = self.kinds.get(row["kind"])
            if (kind is not None and kind.resumable and int(row["attempts"]) < MAX_ATTEMPTS
                    and self.store.has_chat(row["chat_id"])):
                taken = self.queue.take_over(row, "resumed: its worker stopped")
                if taken is not None:
                    self._start(taken, resumed=True, message=None)
                    outcome["resumed"].append(row["id"])
            elif self.queue.fail_stranded(row, INTERRUPTED if int(row["attempts"]) < MAX_ATTEMPTS else
                                          f"its worker stopped {row['attempts']} times while running it; given up"):
                outcome["failed"].append(row["id"])
        if outcome["resumed"] or outcome["failed"]:
            log.warning("jobs whose worker stopped: %s", outcome)
        return outcome

    def _hear_cancels(self) -> None:
        """Cancel requests made in other processes reach the job within about a second."""
        with self._guard:
            if not self._live:
                return
        for job_id in self.queue.cancel_requests():
            ctx = self._live.get(job_id)
            if ctx is not None:
                ctx.cancelled.set()

    def _renew(self) -> None:
        with self._guard:
            live = dict(self._live)
        for job_id, (ours, cancel) in self.queue.renew(list(live)).items():
            ctx = live[job_id]
            if not ours:  # taken over by another worker (our lease ran out): stop, and write nothing more
                ctx.lost = True
                ctx.cancelled.set()
            elif cancel:
                ctx.cancelled.set()

    # ---- running ---------------------------------------------------------------------------------
    def _start(self, row: Row, resumed: bool, message: str | None) -> None:
        ctx = JobContext(row["id"], row["chat_id"], row["kind"], json.loads(row["params_json"]), resumed,
                         self.locks(row["chat_id"]), self, base=int(row["done"] or 0) if resumed else 0)
        if row["cancel_requested"]:
            ctx.cancelled.set()
        with self._guard:
            self._live[ctx.job_id] = ctx
        self._pool.submit(self._run, ctx, self.kinds[ctx.kind])

    def _run(self, ctx: JobContext, kind: JobKind) -> None:
        try:
            if ctx.cancelled.is_set():
                raise JobCancelled()
            result = kind.run(ctx)
            if ctx.cancelled.is_set() and self._stopping and kind.resumable:
                self.queue.release(ctx.job_id, "stopped by a shutdown; another worker or a restart resumes it",
                                   json.dumps(result, ensure_ascii=False))
            else:
                self._update(ctx.job_id, state="cancelled" if ctx.cancelled.is_set() else "done", result=result)
        except JobCancelled:
            if self._stopping and kind.resumable:
                self.queue.release(ctx.job_id, "stopped by a shutdown; another worker or a restart resumes it", None)
            else:
                self._update(ctx.job_id, state="cancelled")
        except Exception as exc:
            if isinstance(exc, CuratorError):  # a deliberate error says what went wrong: one line is enough
                log.warning("job %s (%s, chat %s) failed: %s", ctx.job_id, ctx.kind, ctx.chat_id, exc)
            else:
                log.exception("job %s failed", ctx.job_id)
            hint = getattr(exc, "hint", "")
            self._update(
                ctx.job_id, state="failed", error=f"{type(exc).__name__}: {exc}" + (f" ({hint})" if hint else "")
            )
        finally:
            with self._guard:
                self._live.pop(ctx.job_id, None)
            self._wake.set()  # a thread is free: take the next job now

    def cancel(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        if job["state"] not in ACTIVE:
            raise CuratorError(f"job {job_id} is {job['state']}; only queued or running jobs can be cancelled")
        self.queue.request_cancel(job_id)
        ctx = self._live.get(job_id)
        if ctx is not None:
            ctx.cancelled.set()
        return self.get(job_id)

    def _retire(self, job_id: str) -> None:
        self.queue.update(job_id, {"retired": 1})

    def _update(self, job_id: str, *, state: str | None = None, done: int | None = None, total: int | None = None,
                message: str | None = None, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        given: tuple[tuple[str, object], ...] = (("state", state), ("done", done), ("total", total),
                                                 ("message", message), ("error", error))
        values: dict[str, object] = {column: value for column, value in given if value is not None}
        if result is not None:
            values["result_json"] = json.dumps(result, ensure_ascii=False)
        if state is not None and state not in ACTIVE:
            values["lease_until"] = None
        if not self.queue.update(job_id, values):
            log.warning("job %s is no longer this worker's (%s): its update %s was dropped", job_id, self.worker,
                        sorted(values))

    def get(self, job_id: str) -> dict[str, Any]:
        row = self.queue.row(job_id)
        if row is None:
            raise NotFound(f"no job {job_id!r}", "List jobs with GET /api/v1/jobs.")
        return _job(row)

    def list(self, chat_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return [_job(r) for r in self.queue.rows(chat_id, limit)]

    def wait(self, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Block until the job is finished (tests, the CLI)."""
        deadline = time.monotonic() + timeout
        while (job := self.get(job_id))["state"] in ACTIVE and time.monotonic() < deadline:
            time.sleep(0.02)
        return job

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking jobs and stop the running ones; resumable ones go back to the queue for another worker."""
        self._stopping = True
        self._stop.set()
        self._wake.set()
        for ctx in list(self._live.values()):
            ctx.cancelled.set()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
        if self._ticker is not None and wait:
            self._ticker.join(timeout=30)

def _job(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "chat": row["chat_id"], "kind": row["kind"], "params": json.loads(row["params_json"]),
            "state": row["state"], "progress": {"done": row["done"], "total": row["total"]},
            "message": row["message"], "result": json.loads(row["result_json"]) if row["result_json"] else None,
            "error": row["error"], "created_at": row["created_at"], "updated_at": row["updated_at"],
            "worker": row["worker"], "attempts": row["attempts"]}
