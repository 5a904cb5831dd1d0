from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

import curator
from curator.schemas import load_preset

# The suite runs on SQLite (the default) or on PostgreSQL: `pytest --store-engine postgresql` (or
# CURATOR_TEST_ENGINE=postgresql) starts a throwaway cluster (tests/pg_cluster.py) unless CURATOR_TEST_STORE names a
# server to use (postgresql://user:password@host:port/database). Each test gets a fresh schema there, passed to the
# store (and to CLI subprocesses, which inherit it) as CURATOR_STORE with `options=-csearch_path=<schema>`.
ENGINES = ("sqlite", "postgresql")


def pytest_addoption(parser):
    parser.addoption("--store-engine", choices=ENGINES, default=None,
                     help="the store engine every test runs on (default: $CURATOR_TEST_ENGINE or sqlite; "
                          "postgresql also when $CURATOR_TEST_STORE is set)")


def pytest_configure(config):
    config.addinivalue_line("markers", "engine(name, reason): the test only makes sense on this store engine")
    config.addinivalue_line("markers", "no_store: the test never opens a store (skipped on the PostgreSQL run)")


def store_engine(config) -> str:
    chosen = config.getoption("--store-engine") or os.environ.get("CURATOR_TEST_ENGINE")
    return chosen or ("postgresql" if os.environ.get("CURATOR_TEST_STORE") else "sqlite")


def pytest_collection_modifyitems(config, items):
    engine = store_engine(config)
    for item in items:
        wanted = item.get_closest_marker("engine")
        if wanted and wanted.args[0] != engine:
            item.add_marker(pytest.mark.skip(reason=f"{wanted.args[0]} only: {wanted.kwargs.get('reason', '')}"))
        elif engine != "sqlite" and item.get_closest_marker("no_store"):
            item.add_marker(pytest.mark.skip(reason="never opens a store; the SQLite run covers it"))


@pytest.fixture(scope="session")
def postgres_server(request):
    """The PostgreSQL server URL of this run (None on the SQLite run)."""
    if store_engine(request.config) != "postgresql":
        yield None
        return
    if os.environ.get("CURATOR_TEST_STORE"):
        yield os.environ["CURATOR_TEST_STORE"]
        return
    from pg_cluster import binaries, start, stop

    if binaries() is None:
        pytest.exit("--store-engine postgresql: no PostgreSQL binaries (apt-get install postgresql), and "
                    "CURATOR_TEST_STORE is not set", returncode=2)
    folder = Path(tempfile.mkdtemp(prefix="curator-pg-"))  # not under pytest's tmp: the postgres user must reach it
    try:
        yield start(folder)
    finally:
        stop(folder)


def with_schema(url: str, schema: str) -> str:
    """`url` with the connection option that makes `schema` the search path."""
    option = quote(f"-csearch_path={schema}")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


@pytest.fixture(autouse=True)
def store_engine_for_test(request, postgres_server, monkeypatch):
    """On the PostgreSQL run: a fresh schema for this test, made the store of everything it opens."""
    if postgres_server is None:
        yield None
        return
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    monkeypatch.setenv("CURATOR_STORE", with_schema(postgres_server, schema))
    yield os.environ["CURATOR_STORE"]
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        # A test's leftover connections (a server subprocess, a store never closed) must not hold the drop up.
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                      "AND query_start IS NOT NULL AND datname = current_database() AND state = 'idle in transaction'")
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def memory(tmp_path):
    with curator.open(tmp_path / "data") as mem:
        yield mem


@pytest.fixture
def chat(memory):
    """A chat on the default schema with two characters, a place and an event linked together."""
    memory.create_chat("road", "default")
    memory.commit("road", [
        {"op": "create_node", "id": "n_eileen", "type": "character_sheet",
         "fields": {"name": "Eileen", "aliases": "the healer, Eli", "identity": "travelling healer"}},
        {"op": "create_node", "id": "n_rowan", "type": "character_sheet", "fields": {"name": "Rowan"}},
        {"op": "create_node", "id": "n_bridge", "type": "location_state",
         "fields": {"name": "Brannoch's Bridge", "controller": "Captain Brannoch"}},
        {"op": "create_node", "id": "n_ev1", "type": "event", "title": "Summary 1",
         "fields": {"summary": "Rowan gives Eileen his last salve; she promises to repay him."}},
        {"op": "link", "source": "n_eileen", "target": "n_ev1", "relation": "involved_in"},
        {"op": "link", "source": "n_rowan", "target": "n_ev1", "relation": "involved_in"},
        {"op": "link", "source": "n_ev1", "target": "n_bridge", "relation": "occurred_at"},
    ], anchor_floor=3, origin="test")
    return "road"


@pytest.fixture(scope="session")
def default_schema():
    return load_preset("default")
