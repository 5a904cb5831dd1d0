"""The job runner on its own: resume or visible failure after a restart, cancel, one live job per chat and kind."""

from __future__ import annotations

import threading

from curator.service.jobs import ChatLocks, JobKind, JobRunner
from curator.store.store import Store, utc_now


def test_after_a_restart_resumable_jobs_resume_and_the_rest_fail_visibly(tmp_path, default_schema):
    store = Store(tmp_path)
    store.create_chat("c", default_schema)
    ran: list[bool] = []
    kinds = {"extract": JobKind(lambda ctx: ran.append(ctx.resumed) or {"ok": True}, resumable=True),
             "compact": JobKind(lambda ctx: {"ok": True})}
    runner = JobRunner(store, ChatLocks(), kinds)
    with store.transaction() as conn:  # what a kill -9 leaves behind
        for job_id, kind in (("job_a", "extract"), ("job_b", "compact")):
            conn.execute("INSERT INTO jobs (id, chat_id, kind, params_json, state, created_at, updated_at) "
                         "VALUES (?, 'c', ?, '{}', 'running', ?, ?)", (job_id, kind, utc_now(), utc_now()))
    assert runner.recover() == {"resumed": ["job_a"], "failed": ["job_b"]}
    assert runner.wait("job_a")["state"] == "done" and ran == [True]
    failed = runner.get("job_b")
    assert failed["state"] == "failed" and "interrupted by a restart" in failed["error"]
    runner.shutdown()
    store.close()


def test_one_live_job_per_chat_and_kind_and_cancel(tmp_path, default_schema):
    store = Store(tmp_path)
    store.create_chat("c", default_schema)
    gate = threading.Event()

    def blocked(ctx):
        gate.wait(10)
        ctx.check()
        return {"ok": True}

    runner = JobRunner(store, ChatLocks(), {"extract": JobKind(blocked)})
    first = runner.submit("c", "extract", reuse_active=True)
    assert runner.submit("c", "extract", reuse_active=True)["id"] == first["id"]
    assert runner.cancel(first["id"])["message"] == "cancel requested"
    assert runner.submit("c", "extract", reuse_active=True)["id"] != first["id"]  # a cancelled job takes no work
    gate.set()
    assert runner.wait(first["id"])["state"] == "cancelled"
    runner.shutdown()
    store.close()


def test_a_resumed_job_continues_its_progress_instead_of_restarting_from_zero(tmp_path, default_schema):
    store = Store(tmp_path)
    store.create_chat("c", default_schema)

    def rest(ctx):  # after the restart, two steps are left
        ctx.progress(1, 2)
        ctx.progress(2, 2)
        return {"ok": True}

    runner = JobRunner(store, ChatLocks(), {"extract": JobKind(rest, resumable=True)})
    with store.transaction() as conn:  # killed after 5 of 7 steps
        conn.execute("INSERT INTO jobs (id, chat_id, kind, params_json, state, done, total, created_at, updated_at) "
                     "VALUES ('job_a', 'c', 'extract', '{}', 'running', 5, 7, ?, ?)", (utc_now(), utc_now()))
    runner.recover()
    assert runner.wait("job_a")["progress"] == {"done": 7, "total": 7}
    runner.shutdown()
    store.close()
