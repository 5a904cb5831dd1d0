"""The jobs table as a queue shared by every service process over one store.

A worker takes a queued job atomically (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so two workers never wait on or
take the same row; SQLite: one `UPDATE ... RETURNING` inside a write transaction, which SQLite runs one at a time)
and holds it for a lease (`lease_until`) that it renews while the job runs. A running job whose lease ran out, or
whose worker was a process on this machine that no longer exists, is taken over with a compare-and-set on its
(worker, lease) pair, so exactly one worker takes it: again if its kind is resumable, failed visibly otherwise.
Every write a worker makes about a job it runs names the worker, so a worker that lost its job changes nothing.

Leases are wall-clock timestamps (UTC ISO text, which sorts as it compares): workers on several machines need
clocks that agree to well within a lease.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from curator.store.db import Row
from curator.store.chat_locks import postgres_url
from curator.store.store import Store, utc_now

DEFAULT_LEASE = 30.0  # seconds; a running job renews it every third of that
MAX_ATTEMPTS = 5  # a job that took down its worker this many times is failed rather than taken again

INTERRUPTED = ("interrupted by a restart of the service or the death of its worker process (its lease expired); "
               "nothing of its unfinished step was committed - submit it again")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def lease_end(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


def worker_is_gone(worker: str | None) -> bool:
    """True when `worker` names a process of this machine that no longer runs (so its lease need not be waited
    out); False when it may still run or is not ours to judge. Only POSIX can ask whether a process exists without
    touching it (`kill(pid, 0)`; on Windows `os.kill` would end it): elsewhere the lease runs out instead."""
    host, _, rest = (worker or "").partition(":")
    pid = rest.partition(":")[0]
    if os.name != "posix" or host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, but another user's
        return False
    return False


class JobQueue:
    def __init__(self, store: Store, worker: str | None = None, lease: float = DEFAULT_LEASE) -> None:
        self.store, self.worker, self.lease = store, worker or new_worker_id(), lease
        self._skip_locked = " FOR UPDATE SKIP LOCKED" if postgres_url(store) else ""

    def add(self, job_id: str, chat_id: str, kind: str, params: dict[str, Any]) -> None:
        now = utc_now()
        with self.store.transaction() as conn:
            conn.execute("INSERT INTO jobs (id, chat_id, kind, params_json, state, created_at, updated_at) "
                         "VALUES (?, ?, ?, ?, 'queued', ?, ?)", (job_id, chat_id, kind, json.dumps(params), now, now))

    def row(self, job_id: str) -> Row | None:
        row: Row | None = self.store.conn.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return row

    def rows(self, chat_id: str | None = None, limit: int = 100) -> list[Row]:
        """The newest jobs (of one chat), newest first."""
        sql = "SELECT * FROM jobs" + (" WHERE chat_id=?" if chat_id else "") + " ORDER BY created_at DESC LIMIT ?"
        return self.store.conn.execute(sql, ((chat_id,) if chat_id else ()) + (int(limit),)).fetchall()

    def active(self, chat_id: str, kind: str) -> str | None:
        """The newest queued or running job of this chat and kind that still takes work (any worker's)."""
        row = self.store.conn.execute(
            "SELECT id FROM jobs WHERE chat_id=? AND kind=? AND state IN ('queued', 'running') AND retired=0 "
            "AND cancel_requested=0 ORDER BY created_at DESC LIMIT 1", (chat_id, kind)).fetchone()
        return row[0] if row else None

    def claim(self, limit: int, kinds: Iterable[str]) -> list[Row]:
        """Take up to `limit` queued jobs of `kinds` (those this worker can run), oldest first; each row is the job
        as taken (state running, ours)."""
        kinds = sorted(kinds)
        if limit <= 0 or not kinds or not self.store.conn.execute(
                "SELECT 1 FROM jobs WHERE state='queued' LIMIT 1").fetchone():  # idle: no write transaction
            return []
        marks = ", ".join("?" * len(kinds))
        with self.store.transaction() as conn:
            rows = conn.execute(
                "UPDATE jobs SET state='running', worker=?, lease_until=?, attempts=attempts+1, updated_at=? "
                f"WHERE id IN (SELECT id FROM jobs WHERE state='queued' AND cancel_requested=0 AND kind IN ({marks}) "
                f"ORDER BY created_at LIMIT ?{self._skip_locked}) RETURNING *",
                (self.worker, lease_end(self.lease), utc_now(), *kinds, int(limit))).fetchall()
        return sorted(rows, key=lambda r: r["created_at"])

    def stranded(self) -> list[Row]:
        """Running jobs whose lease ran out or whose worker is a process of this machine that is gone."""
        rows = self.store.conn.execute(
            "SELECT * FROM jobs WHERE state='running' AND COALESCE(worker, '') <> ?", (self.worker,)).fetchall()
        now = utc_now()
        return [r for r in rows if r["lease_until"] is None or r["lease_until"] < now or worker_is_gone(r["worker"])]

    def take_over(self, row: Row, message: str) -> Row | None:
        """Take a stranded job for this worker; the row as taken, or None when another worker was first."""
        with self.store.transaction() as conn:
            taken: Row | None = conn.execute(
                "UPDATE jobs SET worker=?, lease_until=?, attempts=attempts+1, message=?, updated_at=? "
                "WHERE id=? AND state='running' AND COALESCE(worker, '')=? AND COALESCE(lease_until, '')=? "
                "RETURNING *", (self.worker, lease_end(self.lease), message, utc_now(), row["id"],
                                row["worker"] or "", row["lease_until"] or "")).fetchone()
        return taken

    def fail_stranded(self, row: Row, error: str) -> bool:
        with self.store.transaction() as conn:
            return conn.execute(
                "UPDATE jobs SET state='failed', error=?, worker=?, lease_until=NULL, updated_at=? "
                "WHERE id=? AND state='running' AND COALESCE(worker, '')=? AND COALESCE(lease_until, '')=? "
                "RETURNING id", (error, self.worker, utc_now(), row["id"], row["worker"] or "",
                                 row["lease_until"] or "")).fetchone() is not None

    def renew(self, job_ids: list[str]) -> dict[str, tuple[bool, bool]]:
        """Extend the leases of our running jobs; per job: (still ours, cancel requested)."""
        if not job_ids:
            return {}
        marks = ", ".join("?" * len(job_ids))
        with self.store.transaction() as conn:
            conn.execute(f"UPDATE jobs SET lease_until=? WHERE worker=? AND state='running' AND id IN ({marks})",
                         (lease_end(self.lease), self.worker, *job_ids))
            rows = conn.execute(f"SELECT id, worker, state, cancel_requested FROM jobs WHERE id IN ({marks})",
                                tuple(job_ids)).fetchall()
        found = {r["id"]: (r["worker"] == self.worker and r["state"] == "running", bool(r["cancel_requested"]))
                 for r in rows}
        return {job_id: found.get(job_id, (False, False)) for job_id in job_ids}

    def cancel_requests(self) -> set[str]:
        """Our running jobs that someone (any process) asked to stop."""
        return {r[0] for r in self.store.conn.execute(
            "SELECT id FROM jobs WHERE worker=? AND state='running' AND cancel_requested=1", (self.worker,))}

    def update(self, job_id: str, values: dict[str, Any], mine: bool = True) -> bool:
        """Set columns of a job; with `mine`, only while this worker holds it (a progress report also renews the
        lease). False when nothing was changed."""
        sets, params = ["updated_at=?"], [utc_now()]
        for column, value in values.items():
            sets.append(f"{column}=?")
            params.append(value)
        where = "id=?"
        params.append(job_id)
        if mine:
            if "lease_until" not in values:
                sets.append("lease_until=?")
                params.insert(-1, lease_end(self.lease))
            where += " AND worker=?"
            params.append(self.worker)
        with self.store.transaction() as conn:
            return conn.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE {where} RETURNING id",
                                tuple(params)).fetchone() is not None

    def release(self, job_id: str, message: str, result: str | None) -> None:
        """Give a job back to the queue (a resumable job stopped by a shutdown): any worker takes it next."""
        with self.store.transaction() as conn:
            conn.execute("UPDATE jobs SET state='queued', worker=NULL, lease_until=NULL, message=?, "
                         "result_json=COALESCE(?, result_json), updated_at=? WHERE id=? AND worker=?",
                         (message, result, utc_now(), job_id, self.worker))

    def request_cancel(self, job_id: str) -> None:
        """Ask whichever worker runs the job to stop it; a job nobody took yet is cancelled at once."""
        now = utc_now()
        with self.store.transaction() as conn:
            conn.execute("UPDATE jobs SET cancel_requested=1, message='cancel requested', updated_at=? "
                         "WHERE id=? AND state IN ('queued', 'running')", (now, job_id))
            conn.execute("UPDATE jobs SET state='cancelled', updated_at=? WHERE id=? AND state='queued'",
                         (now, job_id))
