"""`curator store migrate`: a SQLite data directory into PostgreSQL and back, verified (counts, commit-log and
graph digests), refusing a non-empty target unless told, and leaving the target untouched on refusal."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

import curator
from curator.cli.main import app
from curator.store.location import with_schema
from curator.store.transfer import chat_digest


@pytest.fixture(scope="module")
def pg_server(request):
    """The run's PostgreSQL server, or a throwaway cluster of this module's own on the SQLite run."""
    from pg_cluster import binaries, start, stop

    from conftest import store_engine

    if store_engine(request.config) == "postgresql":
        yield request.getfixturevalue("postgres_server")
        return
    if binaries() is None:
        pytest.skip("no PostgreSQL binaries on this machine (CI installs them)")
    folder = Path(tempfile.mkdtemp(prefix="curator-pg-migrate-"))
    try:
        yield start(folder)
    finally:
        stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server):
    import psycopg

    schema = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    yield with_schema(pg_server, schema)
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def seeded(data: Path) -> dict:
    """Two chats with commits, a rollback, messages, a shelf entry's worth of history, usage and a job."""
    with curator.open(data, store="sqlite") as memory:
        for chat_id in ("road", "路上"):
            memory.create_chat(chat_id, "default")
            memory.set_messages(chat_id, [curator.Message("user", "U", f"line {f}") for f in range(12)])
            for floor in range(1, 12, 2):
                memory.commit(chat_id, [{"op": "create_node", "id": f"e{floor}", "type": "event",
                                         "title": f"Event {floor}", "fields": {"summary": f"it happened at {floor}"},
                                         "floor_from": floor, "floor_to": floor}], anchor_floor=floor)
            memory.rollback(chat_id, 9)
        conn = memory.store.conn
        with memory.store.transaction() as tx:
            tx.execute("INSERT INTO llm_calls (chat_id, task, model, input_tokens, output_tokens, latency_ms, ok, at) "
                       "VALUES ('road', 'extract', 'fake', 120, 30, 12.5, 1, '2026-01-01T00:00:00+00:00')")
            tx.execute("INSERT INTO jobs (id, chat_id, kind, params_json, state, created_at, updated_at) "
                       "VALUES ('job_x', 'road', 'extract', '{}', 'done', 'a', 'b')")
        assert conn.execute("SELECT COUNT(*) FROM commits").fetchone()[0] == 2 * 4  # rollback left 4 per chat
        return {c: chat_digest(memory.store, c) for c in memory.chats()}


def test_sqlite_to_postgresql_and_back(tmp_path, pg_url):
    data, back = tmp_path / "data", tmp_path / "back"
    before = seeded(data)
    result = run("--data", str(data), "--store", "sqlite", "store", "migrate", "--to", pg_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["verified"] and report["chats"] == before and report["rows"]["commits"] == 8
    assert "curator-test" not in result.output  # the password is never printed
    with curator.open(data, store=pg_url) as memory:  # the copy works as a store: a new commit gets a new id
        assert {c: chat_digest(memory.store, c) for c in memory.chats()} == before
        record = memory.commit("road", [{"op": "create_node", "id": "later", "type": "event", "title": "Later",
                                         "fields": {"summary": "after the move"}}], anchor_floor=11)
        assert record.id > max(c.id for c in memory.store.commits("路上"))
        after_commit = {c: chat_digest(memory.store, c) for c in memory.chats()}

    result = run("--data", str(data), "store", "migrate", "--from", pg_url, "--to", str(back))
    assert result.exit_code == 0, result.output
    assert "copied 2 chat(s)" in result.output and "verified" in result.output
    with curator.open(back, store="sqlite") as memory:
        assert {c: chat_digest(memory.store, c) for c in memory.chats()} == after_commit
        assert memory.graph("road").get("later").title == "Later"


def test_a_non_empty_target_is_refused_unless_replace(tmp_path, pg_url):
    data = tmp_path / "data"
    before = seeded(data)
    assert run("--data", str(data), "--store", "sqlite", "store", "migrate", "--to", pg_url).exit_code == 0
    with curator.open(data, store=pg_url) as memory:
        memory.delete_chat("路上")
        held = {c: chat_digest(memory.store, c) for c in memory.chats()}
    refused = run("--data", str(data), "--store", "sqlite", "store", "migrate", "--to", pg_url)
    assert refused.exit_code == 1 and "already holds 1 chat(s); nothing was copied" in refused.output
    assert "--replace" in refused.output
    with curator.open(data, store=pg_url) as memory:
        assert {c: chat_digest(memory.store, c) for c in memory.chats()} == held  # untouched
    replaced = run("--data", str(data), "--store", "sqlite", "store", "migrate", "--to", pg_url, "--replace",
                   "--json")
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(replaced.output)["chats"] == before and json.loads(replaced.output)["replaced"] == 1


def test_a_missing_source_creates_nothing(tmp_path):
    missing, target = tmp_path / "nothing-here", tmp_path / "target"
    result = run("store", "migrate", "--from", str(missing), "--to", str(target))
    assert result.exit_code == 1 and "no memory store in" in result.output
    assert not missing.exists() and not target.exists()
