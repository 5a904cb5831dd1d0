from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

import curator
from curator.schemas import load_preset

# The suite runs on SQLite (the default) or on PostgreSQL: `pytest --store-engine postgresql` (or
# CURATOR_TEST_ENGINE=postgresql) starts a throwaway cluster (tests/pg_cluster.py) unless CURATOR_TEST_STORE names a
# server to use (postgresql://user:password@host:port/database). Each data directory a test opens gets a fresh schema
# there (CURATOR_STORE and CURATOR_STORE_SCHEMA_PREFIX, which CLI subprocesses inherit), dropped after the test.
ENGINES = ("sqlite", "postgresql")

# The start cache (curator/startcache.py) of this run: its own folder, not the user's ~/.cache, shared by the tests
# and the CLI subprocesses they start; a test of the cache itself points it elsewhere.
_START_CACHE = tempfile.TemporaryDirectory(prefix="curator-test-cache-")
os.environ["CURATOR_CACHE_DIR"] = _START_CACHE.name


def pytest_addoption(parser):
    parser.addoption("--store-engine", choices=ENGINES, default=None,
                     help="the store engine every test runs on (default: $CURATOR_TEST_ENGINE or sqlite; "
                          "postgresql also when $CURATOR_TEST_STORE is set)")


def pytest_configure(config):
    config.addinivalue_line("markers", "engine(name, reason): the test only makes sense on this store engine")
    config.addinivalue_line("markers", "no_store: the test never opens a store (skipped on the PostgreSQL run)")
    config.addinivalue_line("markers", "once(reason): costly and the same on either engine: runs on one run only, the "
                                       "engine $CURATOR_TEST_ONCE_ENGINE names (default sqlite)")


def store_engine(config) -> str:
    chosen = config.getoption("--store-engine") or os.environ.get("CURATOR_TEST_ENGINE")
    return chosen or ("postgresql" if os.environ.get("CURATOR_TEST_STORE") else "sqlite")


def pytest_collection_modifyitems(config, items):
    engine = store_engine(config)
    once_on = os.environ.get("CURATOR_TEST_ONCE_ENGINE", "sqlite")
    for item in items:
        wanted = item.get_closest_marker("engine")
        if wanted and wanted.args[0] != engine:
            item.add_marker(pytest.mark.skip(reason=f"{wanted.args[0]} only: {wanted.kwargs.get('reason', '')}"))
        elif item.get_closest_marker("once") and engine != once_on:
            item.add_marker(pytest.mark.skip(reason=f"the same on either engine: the {once_on} run covers it"))
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


@pytest.fixture(autouse=True)
def store_engine_for_test(request, postgres_server, monkeypatch):
    """On the PostgreSQL run: every data directory the test opens (in this process or in a CLI subprocess, which
    inherits the environment) gets a fresh schema of its own, dropped afterwards."""
    if postgres_server is None:
        yield None
        return
    import psycopg

    prefix = f"t_{uuid.uuid4().hex[:12]}_"
    # application_name tags the test's sessions, so its leftovers (a store never closed, a server subprocess) can
    # be ended before its schemas are dropped, and no other session is touched.
    tagged = f"{postgres_server}{'&' if '?' in postgres_server else '?'}application_name={prefix}"
    monkeypatch.setenv("CURATOR_STORE", tagged)
    monkeypatch.setenv("CURATOR_STORE_SCHEMA_PREFIX", prefix)
    yield tagged
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (prefix,))
        for (schema,) in admin.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                                       (prefix,)).fetchall():
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


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
