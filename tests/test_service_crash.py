"""Kill -9 of `curator serve` during commits and during a job, then a restart: the store is consistent, nothing is
half-applied, and the interrupted extraction job resumes and finishes exactly once per floor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2

import curator
from curator.testing.scripted import scripted_chat
from curator.testing import FakeOpenAI, one_event

CLIENT = {"x-curator-client": "test"}  # state-changing requests need it (or a JSON body)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


START_GUARD = 600  # seconds: a hang guard over a bounded start, not a speed limit


def start_service(data: Path, fake_url: str, *serve_args: str, new_session: bool = False
                  ) -> tuple[subprocess.Popen, str]:
    """`curator serve` (plus `serve_args`) in a child process against a fake model; returns it and its API URL."""
    port = _free_port()
    exe = Path(sys.executable).with_name("curator")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "curator"]
    env = {**os.environ, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake_url, "CURATOR_API_KEY": "k"}
    log = (data.parent / f"serve-{port}.log").open("wb")
    proc = subprocess.Popen(cmd + ["--data", str(data), "serve", "--port", str(port), *serve_args], env=env,
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=new_session)
    url = f"http://127.0.0.1:{port}/api/v1"
    deadline = time.monotonic() + START_GUARD
    while time.monotonic() < deadline:
        try:
            if httpx2.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx2.TransportError:
            pass
        if proc.poll() is not None:
            raise AssertionError(Path(log.name).read_text())
        time.sleep(0.05)
    raise AssertionError("service did not start")


def kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def consistent(data: Path, chat: str) -> dict:
    """The projection equals a replay of the commit log, and SQLite finds no damage."""
    with curator.open(data) as memory:
        if memory.store.engine == "sqlite":
            assert memory.store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        before = memory.graph(chat).snapshot()
        memory.store.rebuild_projection(chat)
        assert memory.graph(chat).snapshot() == before
        return before


def test_kill_during_commits_leaves_whole_commits_only(tmp_path):
    data = tmp_path / "data"
    with FakeOpenAI() as fake:
        proc, url = start_service(data, fake.base_url)
        client = httpx2.Client(headers=CLIENT, base_url=url, timeout=10)
        client.post("/chats", json={"id": "c"})
        acked: list[int] = []
        stop = threading.Event()

        def hammer(worker: int):
            with httpx2.Client(headers=CLIENT, base_url=url, timeout=10) as own:
                for i in range(10_000):
                    if stop.is_set():
                        return
                    try:
                        answer = own.post("/chats/c/nodes", json={"type": "character_sheet",
                                                                  "fields": {"name": f"P{worker}-{i}"}})
                    except httpx2.TransportError:
                        return
                    if answer.status_code == 201:
                        acked.append(answer.json()["commit"])

        threads = [threading.Thread(target=hammer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        while len(acked) < 40:
            time.sleep(0.01)
        kill9(proc)
        stop.set()
        for t in threads:
            t.join()
        client.close()
    snapshot = consistent(data, "c")
    with curator.open(data) as memory:
        commits = memory.store.commits("c")
        assert set(acked) <= {c.id for c in commits}  # every acknowledged commit survived
        assert len(snapshot["nodes"]) == len(commits)  # and every surviving commit is whole: one node each


def test_kill_during_a_job_then_restart_resumes_it(tmp_path):
    data = tmp_path / "data"
    chat = scripted_chat(60)

    def slow(body):
        time.sleep(0.03)
        return one_event(body)

    with FakeOpenAI(slow) as fake:
        proc, url = start_service(data, fake.base_url)
        with httpx2.Client(headers=CLIENT, base_url=url, timeout=10) as client:
            client.post("/chats", json={"id": "c"})
            messages = [{"role": m.role, "name": m.name, "text": m.text} for m in chat]
            job = client.post("/chats/c/sync", json={"messages": messages}).json()["job"]
            for _ in range(500):
                if client.get(f"/jobs/{job['id']}").json()["progress"]["done"] >= 5:
                    break
                time.sleep(0.02)
        kill9(proc)
        consistent(data, "c")
        with curator.open(data) as memory:
            done_before = len([c for c in memory.store.commits("c") if c.origin == "extract"])
        assert 5 <= done_before < 30
        proc, url = start_service(data, fake.base_url)
        try:
            with httpx2.Client(headers=CLIENT, base_url=url, timeout=10) as client:
                for _ in range(1000):
                    state = client.get(f"/jobs/{job['id']}").json()
                    if state["state"] not in ("queued", "running"):
                        break
                    time.sleep(0.02)
                assert state["state"] == "done", state
                assert state["result"]["steps_done"] == 30 - done_before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    consistent(data, "c")
    with curator.open(data) as memory:
        commits = memory.store.commits("c")
        assert [c.anchor_floor for c in commits if c.origin == "extract"] == list(range(1, 60, 2))
        assert {c.origin for c in commits} <= {"extract", "maintenance"}  # and the compression that runs itself
