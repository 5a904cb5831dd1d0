"""A second OS process for tests/test_multiprocess.py: `python mp_worker.py lock|runner DATA ...`.

lock DATA CHAT ROUNDS LOG: take the chat's writer lock ROUNDS times (re-entering it once each time) and write
  "start PID" / "end PID" lines to LOG inside it, with a pause in between, so interleaving would show.
hold DATA CHAT SECONDS: take the chat's writer lock, print "held", keep it SECONDS.
runner DATA LOG LEASE WORKER_ID THREADS: run a job runner over the store until DATA/stop exists; its kinds append
  "job_id worker" lines to LOG ("work" is quick and not resumable; "stuck" blocks until killed or cancelled and
  is resumable, "fragile" blocks and is not).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from curator.store.chat_locks import ChatLocks
from curator.service.jobs import JobKind, JobRunner
from curator.store.store import Store


def _append(log: Path, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())  # one write with O_APPEND: lines of two processes never mix
    finally:
        os.close(fd)


def lock(data: str, chat: str, rounds: str, log: str) -> None:
    locks = ChatLocks(Store(data))
    for _ in range(int(rounds)):
        with locks(chat):
            _append(Path(log), f"start {os.getpid()}")
            with locks(chat):  # re-entrant in a thread
                time.sleep(0.005)
            _append(Path(log), f"end {os.getpid()}")


def hold(data: str, chat: str, seconds: str) -> None:
    with ChatLocks(Store(data))(chat):
        print("held", flush=True)
        time.sleep(float(seconds))


def runner(data: str, log: str, lease: str, worker: str, threads: str) -> None:
    store = Store(data)
    me = None

    def work(ctx):
        time.sleep(0.02)
        _append(Path(log), f"{ctx.job_id} {me.worker} {'resumed' if ctx.resumed else 'new'}")
        return {"ok": True}

    def stuck(ctx):
        if ctx.resumed:
            return work(ctx)
        _append(Path(log), f"{ctx.job_id} {me.worker} started")
        deadline = time.monotonic() + 3600
        while not ctx.should_stop() and time.monotonic() < deadline:  # blocks until killed, stopped or cancelled
            time.sleep(0.05)
        ctx.check()
        return {}

    kinds = {"work": JobKind(work), "stuck": JobKind(stuck, resumable=True), "fragile": JobKind(stuck)}
    me = JobRunner(store, ChatLocks(store), kinds, workers=int(threads), lease=float(lease), poll=0.05,
                   worker=worker if worker != "-" else None)
    me.recover()
    print("ready", flush=True)
    while not (Path(data) / "stop").exists():
        time.sleep(0.05)
    me.shutdown()


if __name__ == "__main__":
    {"lock": lock, "hold": hold, "runner": runner}[sys.argv[1]](*sys.argv[2:])
