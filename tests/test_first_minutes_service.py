"""The service as a new user meets it: `/` leads to the panel, `/docs` works offline, a busy port is one line, a
job that fails for an expected reason logs one line."""

from __future__ import annotations

import logging
import re
import socket

import httpx2

import curator
from curator.service.jobs import ChatLocks, JobFailed, JobKind, JobRunner
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.store.store import Store
from test_first_minutes import run


def test_root_leads_to_the_panel_and_docs_need_no_cdn(tmp_path):
    memory = curator.open(tmp_path / "data")
    with ThreadedServer(create_app(memory, ServiceConfig(token="t0ken"))) as server, \
            httpx2.Client(base_url=server.url, timeout=30) as client:
        root = client.get("/")  # a browser cannot send the token: `/` is open and only redirects
        assert root.status_code in (302, 307) and root.headers["location"] == "/panel/"
        assert client.get("/", follow_redirects=True).text.count("<html") == 1
        docs = client.get("/docs", headers={"authorization": "Bearer t0ken"})
        assert docs.status_code == 200
        assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", docs.text)
        assert assets and not [a for a in assets if "://" in a]  # nothing from another host
        for asset in assets:
            got = client.get(asset, headers={"authorization": "Bearer t0ken"})
            assert got.status_code == 200 and len(got.content) > 1000, asset
        assert "swagger-ui-bundle.js" in docs.text
    memory.close()


def test_serve_on_a_busy_port_is_one_line_without_the_banner(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = run("serve", "--port", str(port), data=tmp_path, check=False)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port N" in " ".join(proc.stderr.split())
    assert "service on" not in proc.stderr and "Traceback" not in proc.stderr


def test_an_expected_job_failure_logs_one_line(tmp_path, default_schema, caplog):
    store = Store(tmp_path)
    store.create_chat("c", default_schema)

    def capped(ctx):
        raise JobFailed("curation of floor 3 failed: the request cap (16) was reached")

    def broken(ctx):
        raise KeyError("a bug")

    runner = JobRunner(store, ChatLocks(), {"curate": JobKind(capped), "extract": JobKind(broken)})
    with caplog.at_level(logging.WARNING, logger="curator.jobs"):
        expected = runner.wait(runner.submit("c", "curate")["id"])
        bug = runner.wait(runner.submit("c", "extract")["id"])
    assert expected["state"] == bug["state"] == "failed" and "request cap" in expected["error"]
    lines = {r.getMessage(): r for r in caplog.records if r.name == "curator.jobs"}
    one = next(r for m, r in lines.items() if "request cap" in m)
    assert one.exc_info is None and one.levelno == logging.WARNING and "\n" not in one.getMessage()
    assert any(r.exc_info for r in lines.values())  # an unexpected error keeps its traceback
    runner.shutdown()
    store.close()


def test_the_service_loads_the_embedding_models_when_it_starts(tmp_path, monkeypatch):
    """So that the first recall after `curator serve` does not wait for e5 and the static vectors (~0.7 CPU-s)."""
    import threading

    from curator.service.server import app as app_module

    asked, done = [], threading.Event()
    monkeypatch.setattr(app_module, "warm_up", lambda profile: (asked.append(profile), done.set()))
    memory = curator.open(tmp_path / "data")
    with ThreadedServer(create_app(memory, ServiceConfig(token="t0ken"))):
        assert done.wait(30)
    assert asked == [memory.settings.embedding]
    memory.close()


def test_a_warm_up_that_fails_is_logged_and_the_service_still_answers(tmp_path, monkeypatch, caplog):
    import time

    from curator.errors import CuratorError
    from curator.service.server import app as app_module

    def broken(profile):
        raise CuratorError("the static-e5 embedder's vectors are not installed")

    monkeypatch.setattr(app_module, "warm_up", broken)
    memory = curator.open(tmp_path / "data")
    with caplog.at_level(logging.ERROR, logger="curator.server"), \
            ThreadedServer(create_app(memory, ServiceConfig(token="t0ken"))) as server, \
            httpx2.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/api/v1/chats", headers={"authorization": "Bearer t0ken"}).status_code == 200
        for _ in range(300):
            if "could not load the embedding models" in caplog.text:
                break
            time.sleep(0.1)
    assert "vectors are not installed" in caplog.text
    memory.close()


def test_serve_answers_health_while_the_app_loads_and_then_hands_every_request_over():
    """`curator serve` listens before its app is loaded (curator/service/early.py): health answers at once, other
    requests wait for the app, whose lifespan has started by then; a load that fails stops the server."""
    import threading

    from fastapi import FastAPI

    from curator.service.early import EarlyApp, load_in_background

    release, started, errors = threading.Event(), [], []

    def load():
        release.wait(30)
        real = FastAPI(lifespan=_lifespan(started))

        @real.get("/api/v1/chats")
        def chats() -> dict:
            return {"chats": [], "lifespan_started": bool(started)}

        @real.get("/api/v1/health")
        def health() -> dict:
            return {"ok": True}

        return real

    early = EarlyApp(("127.0.0.1", "localhost"), on_error=errors.append)
    with ThreadedServer(early) as server:
        load_in_background(early, load)
        assert httpx2.get(server.url + "/api/v1/health").json() == {"ok": True, "ready": False}
        answers: dict = {}  # by request: once the app is there the two answers come in either order
        waiting = threading.Thread(target=lambda: answers.setdefault(
            "chats", httpx2.get(server.url + "/api/v1/chats", timeout=30)))
        waiting.start()
        waiting.join(0.3)
        assert not answers  # waits for the app
        # a page under a rebound name gets no early answer: it waits for the app's own Host check
        stranger = threading.Thread(target=lambda: answers.setdefault(
            "stranger", httpx2.get(server.url + "/api/v1/health", headers={"Host": "evil.example"}, timeout=30)))
        stranger.start()
        stranger.join(0.3)
        assert not answers
        release.set()
        waiting.join(30)
        stranger.join(30)
        assert answers["chats"].json() == {"chats": [], "lifespan_started": True}
        assert httpx2.get(server.url + "/api/v1/health").json() == {"ok": True}
    assert not errors

    failed = EarlyApp(("127.0.0.1",), on_error=errors.append)
    with ThreadedServer(failed) as server:
        load_in_background(failed, lambda: (_ for _ in ()).throw(RuntimeError("no app today")))
        answer = httpx2.get(server.url + "/api/v1/chats", timeout=30)
        assert answer.status_code == 503 and "no app today" in answer.json()["error"]["message"]
    assert [str(e) for e in errors] == ["no app today"]


def _lifespan(started: list):
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        started.append(True)
        yield

    return lifespan
