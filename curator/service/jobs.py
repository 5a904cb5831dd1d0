"""Jobs: long work (re-extraction, ingest, rebuild, compaction) run in worker threads, with progress, cancel and a
result, kept in SQLite so a restart shows what happened to each job.

One writer per chat: each job takes its chat's writer lock (`ChatLocks`) for every step it commits, so work on
one chat is serialized while chats run in parallel. Every step is a commit of its own, so a crash mid-job leaves
no partial commit; on restart, jobs that were running are resumed when their kind says it is safe (extraction
continues from the processed-floor pointer) and failed visibly otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from curator.errors import CuratorError, NotFound
from curator.store.store import Store, utc_now

log = logging.getLogger("curator.jobs")

ACTIVE = ("queued", "running")


class JobFailed(CuratorError):
    """A job's work reported a failure it expects (a request cap, a model error the step recorded): the job
    fails with the reason, and the log gets one line, not a traceback."""


class JobCancelled(Exception):
    """Raised inside a job by `JobContext.check` once the job was asked to stop."""


class ChatLocks:
    """One writer lock per chat."""

    def __init__(self):
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    def __call__(self, chat_id: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(chat_id, threading.RLock())


@dataclass
class JobContext:
    """What a running job sees: its id and chat, progress reporting, the cancel flag, the chat's writer lock."""

    job_id: str
    chat_id: str
    kind: str
    params: dict
    resumed: bool
    writer: threading.RLock
    _runner: JobRunner
    cancelled: threading.Event = field(default_factory=threading.Event)
    retired: bool = False  # will take no more work: a new request for the same work needs a new job
    base: int = 0  # steps done before a restart: a resumed job's progress continues from there

    def retire(self) -> None:
        self.retired = True

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        self._runner._update(self.job_id, done=self.base + done, total=None if total is None else self.base + total,
                             message=message)

    def should_stop(self) -> bool:
        return self.cancelled.is_set()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled()


# A job's work: gets its context, returns a JSON-able result.
JobFunction = Callable[[JobContext], dict]


@dataclass
class JobKind:
    run: JobFunction
    resumable: bool = False  # safe to run again from the start after a crash (it continues where it stopped)


class JobRunner:
    """Runs jobs on a thread pool; `kinds` maps a job kind to its function."""

    def __init__(self, store: Store, locks: ChatLocks, kinds: dict[str, JobKind], workers: int = 4):
        self.store, self.locks, self.kinds = store, locks, kinds
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="curator-job")
        self._live: dict[str, JobContext] = {}
        self._guard = threading.Lock()
        self._stopping = False

    def recover(self) -> dict[str, list[str]]:
        """After a restart: resume the jobs that were queued or running if their kind allows, fail the rest."""
        rows = self.store.conn.execute(
            f"SELECT id, chat_id, kind, params_json, done FROM jobs WHERE state IN {ACTIVE} ORDER BY created_at"
        ).fetchall()
        outcome: dict[str, list[str]] = {"resumed": [], "failed": []}
        for row in rows:
            kind = self.kinds.get(row["kind"])
            if kind is not None and kind.resumable and self.store.has_chat(row["chat_id"]):
                self._update(row["id"], state="queued", message="resumed after a restart")
                self._start(row["id"], row["chat_id"], row["kind"], json.loads(row["params_json"]), resumed=True,
                            base=int(row["done"] or 0))
                outcome["resumed"].append(row["id"])
            else:
                self._update(row["id"], state="failed", error="interrupted by a restart of the service; "
                             "nothing of its unfinished step was committed - submit it again")
                outcome["failed"].append(row["id"])
        if rows:
            log.warning("jobs after restart: %s", outcome)
        return outcome

    def submit(self, chat_id: str, kind: str, params: dict | None = None, *, reuse_active: bool = False) -> dict:
        """Queue a job; with `reuse_active`, an active job of the same kind and chat is returned instead."""
        if kind not in self.kinds:
            raise CuratorError(f"unknown job kind {kind!r}; one of: {', '.join(sorted(self.kinds))}")
        with self._guard:
            if reuse_active:
                for ctx in self._live.values():
                    if (ctx.chat_id == chat_id and ctx.kind == kind and not ctx.retired
                            and not ctx.cancelled.is_set()):
                        return self.get(ctx.job_id)
            job_id = "job_" + uuid.uuid4().hex[:12]
            now = utc_now()
            with self.store.transaction() as conn:
                conn.execute("INSERT INTO jobs (id, chat_id, kind, params_json, state, created_at, updated_at) "
                             "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                             (job_id, chat_id, kind, json.dumps(params or {}), now, now))
            self._start(job_id, chat_id, kind, params or {}, resumed=False)
        return self.get(job_id)

    def _start(self, job_id: str, chat_id: str, kind: str, params: dict, resumed: bool, base: int = 0) -> None:
        ctx = JobContext(job_id, chat_id, kind, params, resumed, self.locks(chat_id), self, base=base)
        self._live[job_id] = ctx
        self._pool.submit(self._run, ctx, self.kinds[kind])

    def _run(self, ctx: JobContext, kind: JobKind) -> None:
        try:
            if ctx.cancelled.is_set():
                raise JobCancelled()
            self._update(ctx.job_id, state="running")
            result = kind.run(ctx)
            if ctx.cancelled.is_set() and self._stopping and kind.resumable:
                self._update(ctx.job_id, state="queued", message="stopped by a shutdown; resumes on restart",
                             result=result)
            else:
                self._update(ctx.job_id, state="cancelled" if ctx.cancelled.is_set() else "done", result=result)
        except JobCancelled:
            if self._stopping and kind.resumable:
                self._update(ctx.job_id, state="queued", message="stopped by a shutdown; resumes on restart")
            else:
                self._update(ctx.job_id, state="cancelled")
        except Exception as exc:
            if isinstance(exc, CuratorError):  # a deliberate error says what went wrong: one line is enough
                log.warning("job %s (%s, chat %s) failed: %s", ctx.job_id, ctx.kind, ctx.chat_id, exc)
            else:
                log.exception("job %s failed", ctx.job_id)
            hint = getattr(exc, "hint", "")
            self._update(ctx.job_id, state="failed", error=f"{type(exc).__name__}: {exc}" + (f" ({hint})" if hint else ""))
        finally:
            with self._guard:
                self._live.pop(ctx.job_id, None)

    def cancel(self, job_id: str) -> dict:
        job = self.get(job_id)
        ctx = self._live.get(job_id)
        if ctx is None:
            raise CuratorError(f"job {job_id} is {job['state']}; only queued or running jobs can be cancelled")
        ctx.cancelled.set()
        self._update(job_id, message="cancel requested")
        return self.get(job_id)

    def _update(self, job_id: str, *, state: str | None = None, done: int | None = None, total: int | None = None,
                message: str | None = None, result: dict | None = None, error: str | None = None) -> None:
        sets, params = ["updated_at=?"], [utc_now()]
        for column, value in (("state", state), ("done", done), ("total", total), ("message", message),
                              ("error", error)):
            if value is not None:
                sets.append(f"{column}=?")
                params.append(value)
        if result is not None:
            sets.append("result_json=?")
            params.append(json.dumps(result, ensure_ascii=False))
        with self.store.transaction() as conn:
            conn.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id=?", (*params, job_id))

    def get(self, job_id: str) -> dict:
        row = self.store.conn.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id!r}", "List jobs with GET /api/v1/jobs.")
        return _job(row)

    def list(self, chat_id: str | None = None, limit: int = 100) -> list[dict]:
        sql = "SELECT * FROM jobs" + (" WHERE chat_id=?" if chat_id else "") + " ORDER BY created_at DESC LIMIT ?"
        return [_job(r) for r in self.store.conn.execute(sql, ((chat_id,) if chat_id else ()) + (int(limit),))]

    def wait(self, job_id: str, timeout: float = 30.0) -> dict:
        """Block until the job is finished (tests, the CLI)."""
        import time

        deadline = time.monotonic() + timeout
        while (job := self.get(job_id))["state"] in ACTIVE and time.monotonic() < deadline:
            time.sleep(0.02)
        return job

    def shutdown(self, wait: bool = True) -> None:
        self._stopping = True
        for ctx in list(self._live.values()):
            ctx.cancelled.set()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)


def _job(row) -> dict:
    return {"id": row["id"], "chat": row["chat_id"], "kind": row["kind"], "params": json.loads(row["params_json"]),
            "state": row["state"], "progress": {"done": row["done"], "total": row["total"]},
            "message": row["message"], "result": json.loads(row["result_json"]) if row["result_json"] else None,
            "error": row["error"], "created_at": row["created_at"], "updated_at": row["updated_at"]}
