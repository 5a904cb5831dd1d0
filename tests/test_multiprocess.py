"""Several OS processes over one store: the chat writer lock holds across them, the jobs queue gives each job to
exactly one worker, and a job whose worker was killed is taken over once its lease ran out (or failed visibly)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curator.store.chat_locks import ChatBusy, ChatLocks
from curator.store.job_queue import JobQueue
from curator.store.store import Store

WORKER = Path(__file__).with_name("mp_worker.py")
HANG_GUARD = 600  # seconds; the work of every child is bounded


def child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], stdout=subprocess.PIPE, text=True)


def wait_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline().strip()
    assert line == expected, f"child said {line!r} (exit {proc.poll()})"


def stop(data: Path, procs) -> None:
    """Ask the runner children to stop; any that does not within the hang guard is killed (never left behind)."""
    (data / "stop").touch()
    for proc in procs:
        if proc is None:
            continue
        try:
            proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(check, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def test_two_processes_never_hold_a_chat_writer_lock_together(tmp_path):
    data, log = tmp_path / "data", tmp_path / "lock.log"
    Store(data).close()
    procs = [child("lock", data, "chat one", 40, log) for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=HANG_GUARD) == 0
    steps = [tuple(line.split()) for line in log.read_text().splitlines()]
    assert len(steps) == 160
    # every "start" is followed by the same process's "end" before anyone else starts: no interleaving
    assert all(kind == "start" for kind, _ in steps[0::2]) and all(kind == "end" for kind, _ in steps[1::2])
    assert all(steps[i][1] == steps[i + 1][1] for i in range(0, len(steps), 2))
    assert len({pid for _, pid in steps}) == 2  # both processes took it


def test_a_chat_held_by_another_process_makes_a_writer_wait_then_fail_clearly(tmp_path):
    data = tmp_path / "data"
    store = Store(data)
    holder = child("hold", data, "c", 30)
    try:
        wait_line(holder, "held")
        locks = ChatLocks(store, timeout=0.3)
        with pytest.raises(ChatBusy, match="chat 'c' is being written by another process"):
            with locks("c"):
                pass
        with locks("another chat"):  # other chats are free
            pass
    finally:
        holder.kill()
        holder.wait(timeout=HANG_GUARD)
    with ChatLocks(store, timeout=HANG_GUARD)("c"):  # the kernel dropped the dead holder's lock
        pass
    store.close()


def test_two_runner_processes_share_the_queue_and_run_each_job_once(tmp_path):
    data, log = tmp_path / "data", tmp_path / "jobs.log"
    data.mkdir()  # on PostgreSQL the store does not make it; the stop file goes there
    store = Store(data)
    runners = [child("runner", data, log, 30, "-", 2) for _ in range(2)]
    try:
        for proc in runners:
            wait_line(proc, "ready")
        queue = JobQueue(store)
        ids = [f"job_{i:03d}" for i in range(40)]
        for job_id in ids:
            queue.add(job_id, "c", "work", {})
        wait_until(lambda: store.conn.execute("SELECT COUNT(*) FROM jobs WHERE state='done'").fetchone()[0] == 40,
                   "every job done")
    finally:
        stop(data, runners)
    done = [line.split() for line in log.read_text().splitlines()]
    assert sorted(job for job, _, _ in done) == ids  # each exactly once
    workers = {worker for _, worker, _ in done}
    assert len(workers) == 2  # the work was shared
    rows = store.conn.execute("SELECT worker, attempts FROM jobs").fetchall()
    assert {r["worker"] for r in rows} == workers and {r["attempts"] for r in rows} == {1}
    store.close()


def test_a_killed_workers_jobs_are_taken_over_after_the_lease_or_failed_visibly(tmp_path, default_schema):
    data, log = tmp_path / "data", tmp_path / "jobs.log"
    data.mkdir()  # on PostgreSQL the store does not make it; the stop file goes there
    store = Store(data)
    store.create_chat("c", default_schema)  # a job of a deleted chat is failed, never resumed
    # The first worker says it runs elsewhere, so only its lease (1.5 s) can free its jobs, not its missing pid.
    first = child("runner", data, log, 1.5, "elsewhere:1:abc", 2)
    second = None
    try:
        wait_line(first, "ready")
        queue = JobQueue(store)
        queue.add("job_stuck", "c", "stuck", {})
        queue.add("job_fragile", "c", "fragile", {})
        wait_until(lambda: log.exists() and len(log.read_text().splitlines()) == 2, "both jobs started")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=HANG_GUARD)
        killed_at = time.monotonic()
        second = child("runner", data, log, 30, "-", 2)
        wait_line(second, "ready")
        state = lambda job: store.conn.execute("SELECT * FROM jobs WHERE id=?", (job,)).fetchone()  # noqa: E731
        wait_until(lambda: state("job_stuck")["state"] == "done" and state("job_fragile")["state"] == "failed",
                   "the takeover")
        assert time.monotonic() - killed_at >= 1.0  # not before the lease ran out (it was 1.5 s from a renewal)
    finally:
        first.kill()  # already killed, unless the test failed before
        stop(data, [first, second])
    resumed = state("job_stuck")
    assert resumed["attempts"] == 2 and resumed["worker"] != "elsewhere:1:abc"
    assert "interrupted by a restart of the service or the death of its worker" in state("job_fragile")["error"]
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [(job, how) for job, _, how in lines if how != "started"] == [("job_stuck", "resumed")]  # once
    store.close()


def test_a_job_is_cancelled_from_another_process_and_unknown_kinds_are_left_to_others(tmp_path, default_schema):
    data, log = tmp_path / "data", tmp_path / "jobs.log"
    data.mkdir()
    store = Store(data)
    store.create_chat("c", default_schema)
    runner = child("runner", data, log, 30, "-", 2)
    try:
        wait_line(runner, "ready")
        queue = JobQueue(store)
        queue.add("job_stuck", "c", "stuck", {})
        queue.add("job_alien", "c", "a kind no runner knows", {})
        wait_until(lambda: log.exists() and "job_stuck" in log.read_text(), "the job started")
        queue.request_cancel("job_stuck")  # this process does not run it: the runner child hears of it
        state = lambda job: store.conn.execute("SELECT * FROM jobs WHERE id=?", (job,)).fetchone()  # noqa: E731
        wait_until(lambda: state("job_stuck")["state"] == "cancelled", "the cancel", timeout=60)
        assert state("job_alien")["state"] == "queued" and state("job_alien")["worker"] is None
    finally:
        stop(data, [runner])
    store.close()


def test_the_locks_use_no_posix_only_call(monkeypatch):
    """Chat locks go through filelock (fcntl on POSIX, msvcrt on Windows); a dead worker is recognised by
    `kill(pid, 0)` on POSIX only (on Windows `os.kill` would end the process), elsewhere its lease runs out."""
    import inspect
    import socket

    from curator.store import chat_locks, job_queue

    assert "fcntl" not in inspect.getsource(chat_locks)

    def kill(*args):
        raise AssertionError("os.kill called")

    monkeypatch.setattr(job_queue.os, "kill", kill)
    monkeypatch.setattr(job_queue.os, "name", "nt")
    assert job_queue.worker_is_gone(f"{socket.gethostname()}:999999:abcdef") is False
