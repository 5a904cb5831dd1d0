"""`curator serve --workers 2`: two service processes over one store behind one port. Both answer (API and
panel), the jobs of several chats spread over both, and every chat's extraction lands once per floor."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx2
from test_service_crash import CLIENT, start_service

import curator
from curator.testing.scripted import scripted_chat
from curator.testing import FakeOpenAI, one_event

HANG_GUARD = 600


def start_workers(data: Path, fake_url: str, workers: int) -> tuple[subprocess.Popen, str]:
    proc, api = start_service(data, fake_url, "--workers", str(workers), "--job-threads", "2", new_session=True)
    return proc, api.removesuffix("/api/v1")


def test_two_worker_processes_share_one_store_its_jobs_and_its_chats(tmp_path):
    data = tmp_path / "data"
    chats = [f"chat-{i}" for i in range(6)]
    chat = scripted_chat(20)

    def slow(body):
        time.sleep(0.02)
        return one_event(body)

    with FakeOpenAI(slow) as fake:
        proc, url = start_workers(data, fake.base_url, 2)
        try:
            answered = set()
            for _ in range(400):  # a new connection each time: the kernel hands it to either process
                answered.add(httpx2.get(url + "/api/v1/health", timeout=10).json()["worker"])
                if len(answered) == 2:
                    break
            assert len(answered) == 2, answered
            messages = [{"role": m.role, "name": m.name, "text": m.text} for m in chat]
            jobs = []
            for chat_id in chats:
                with httpx2.Client(headers=CLIENT, base_url=url + "/api/v1", timeout=30) as client:
                    assert client.post("/chats", json={"id": chat_id}).status_code == 201
                    jobs.append(client.post(f"/chats/{chat_id}/sync", json={"messages": messages}).json()["job"])
            finished = {}
            deadline = time.monotonic() + HANG_GUARD
            while len(finished) < len(jobs) and time.monotonic() < deadline:
                for job in jobs:
                    state = httpx2.get(f"{url}/api/v1/jobs/{job['id']}", timeout=10).json()
                    if state["state"] not in ("queued", "running"):
                        finished[job["id"]] = state
                time.sleep(0.1)
            assert {s["state"] for s in finished.values()} == {"done"}, finished
            assert len({s["worker"] for s in finished.values()}) == 2  # the jobs spread over both processes
            panel = httpx2.get(url + "/", timeout=10, follow_redirects=True)
            assert panel.status_code == 200 and "<html" in panel.text.lower()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=HANG_GUARD)
    with curator.open(data) as memory:
        for chat_id in chats:
            anchors = [c.anchor_floor for c in memory.store.commits(chat_id) if c.origin == "extract"]
            assert anchors == list(range(1, 20, 2)), (chat_id, anchors)  # each floor once, in order
