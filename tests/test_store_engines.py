"""The store on two engines: where it is chosen, what two stores over one database see of each other, the per-chat
write lock, and the errors a database server adds (unreachable, wrong password, newer schema, a connection lost in
the middle of a commit). Runs on whichever engine the run uses (tests/conftest.py); the PostgreSQL-only tests say so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

import curator
from curator.errors import StoreError, StoreLocked, StoreTooNew
from curator.schemas import load_preset
from curator.store import db
from curator.store.location import redact, store_url
from curator.store.store import Store

EVENT = {"op": "create_node", "type": "event", "title": "Summary", "fields": {"summary": "The bridge burned."}}
postgres_only = pytest.mark.engine("postgresql", reason="a database server's own behaviour")


def _event(i: int) -> dict:
    return {**EVENT, "id": f"ev{i}", "title": f"Summary {i}", "fields": {"summary": f"Scene {i}: the bridge burned."}}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


# ---- where the store is -----------------------------------------------------------------------------------
def test_the_store_url_comes_from_the_argument_then_the_environment_then_config(tmp_path, monkeypatch):
    monkeypatch.delenv("CURATOR_STORE", raising=False)
    monkeypatch.delenv("CURATOR_STORE_SCHEMA_PREFIX", raising=False)
    assert store_url(tmp_path) is None  # SQLite in the data directory
    (tmp_path / "config.yaml").write_text("store: postgresql://cfg@db/x\n")
    assert store_url(tmp_path) == "postgresql://cfg@db/x"
    monkeypatch.setenv("CURATOR_STORE", "postgresql://env@db/x")
    assert store_url(tmp_path) == "postgresql://env@db/x"
    assert store_url(tmp_path, "postgresql://arg@db/x") == "postgresql://arg@db/x"
    assert store_url(tmp_path, "sqlite") is None
    with pytest.raises(StoreError, match="unknown store 'mysql://u:\\*\\*\\*@db/x'"):
        store_url(tmp_path, "mysql://u:secret@db/x")
    monkeypatch.setenv("CURATOR_STORE_SCHEMA_PREFIX", "tenant_")  # many data directories in one database
    first, second = store_url(tmp_path / "a"), store_url(tmp_path / "b")
    assert first.startswith("postgresql://env@db/x?options=-csearch_path%3Dtenant_") and first != second
    assert store_url(tmp_path / "a") == first


def test_a_url_is_shown_without_its_password():
    assert redact("postgresql://ann:s3cret@db:5432/mem?sslmode=require") == "postgresql://ann:***@db:5432/mem?sslmode=require"
    assert redact("postgresql://db/mem?user=ann&password=s3cret") == "postgresql://db/mem?user=ann&password=***"
    assert redact("postgresql://ann@db/mem") == "postgresql://ann@db/mem"


def test_an_unreachable_server_is_one_clear_error_without_the_password(tmp_path):
    url = f"postgresql://ann:s3cret@127.0.0.1:{_closed_port()}/mem"
    with pytest.raises(StoreError) as caught:
        Store(tmp_path, store=url)
    message = str(caught.value)
    assert "s3cret" not in message and "postgresql://ann:***@127.0.0.1" in message and "cannot open" in message
    assert not (tmp_path / db.DB_FILENAME).exists()  # no SQLite file made instead


def test_the_cli_says_so_in_one_line_and_exits_1(tmp_path):
    url = f"postgresql://ann:s3cret@127.0.0.1:{_closed_port()}/mem"
    proc = subprocess.run(
        [sys.executable, "-m", "curator", "--data", str(tmp_path), "--store", url, "chats"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "400"},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "s3cret" not in proc.stderr + proc.stdout
    assert "postgresql://ann:***@127.0.0.1" in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("Hint")]
    assert len(error) == 1 and "Connection refused" in error[0], proc.stderr


@postgres_only
def test_a_wrong_password_is_one_clear_error_without_the_password(tmp_path, postgres_server):
    import psycopg
    from urllib.parse import urlsplit

    parts = urlsplit(postgres_server)
    wrong = f"postgresql://{parts.username}:not-the-password@{parts.hostname}:{parts.port}{parts.path}"
    try:
        psycopg.connect(wrong).close()
        pytest.skip("this server trusts the test host: no password is checked")
    except psycopg.OperationalError:
        pass
    with pytest.raises(StoreError) as caught:
        Store(tmp_path, store=wrong)
    assert "not-the-password" not in str(caught.value) and ":***@" in str(caught.value)
    assert "password authentication failed" in str(caught.value)


# ---- two stores over one database (two processes, as far as the store can tell) ---------------------------
def test_a_commit_through_one_store_is_seen_by_the_others_recall(tmp_path):
    from curator.recall.engine import Recaller

    with curator.open(tmp_path / "a") as first, curator.open(tmp_path / "a") as second:
        first.create_chat("c", "default")
        first.commit("c", [_event(1)], 1, "test")
        recaller = Recaller(second.store, second.settings, None)  # keeps its caches between recalls
        assert "Scene 2" not in recaller.recall("c", "what burned at scene 2").text
        version = second.store.graph_version("c")
        first.commit("c", [_event(2)], 2, "test")  # another process's commit: `second`'s change log never saw it
        assert second.store.graph_version("c") == version + 1  # read from the store, not from this process
        # `second` reads what that commit touched from the store's change log, so its caches follow it
        assert second.store.changes.graph_since("c", version, version + 1).nodes == {"ev2"}
        after = recaller.recall("c", "what burned at scene 2")
        assert "Scene 2" in after.text and after.graph_version == version + 1
        first.rollback("c", 2)
        assert "Scene 2" not in recaller.recall("c", "what burned at scene 2").text


def test_commits_and_rollbacks_from_two_stores_never_interleave(tmp_path):
    """Two writers (each its own store and connection) commit and roll back one chat at once; afterwards the log
    replays to exactly the graph there is (nothing lost, doubled or half-applied)."""
    with Store(tmp_path) as setup:
        setup.create_chat("c", load_preset("default"))
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            with Store(tmp_path, busy_timeout_ms=30_000) as store:
                for i in range(25):
                    floor = i + 1
                    store.commit("c", [{**_event(0), "id": f"{name}{i}", "title": f"{name} {i}"}], floor, "test")
                    if i % 5 == 4:
                        store.rollback("c", floor)  # undoes whatever either writer anchored at this floor or later
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with Store(tmp_path) as store:
        graph = store.graph("c")
        live = {n.id for n in graph.nodes(archived=None)}
        ids = [c.id for c in store.commits("c")]
        assert ids == sorted(set(ids))
        assert live == {op["id"] for c in store.commits("c") for op in c.ops}
        store.rebuild_projection("c")
        assert {n.id for n in store.graph("c").nodes(archived=None)} == live


@postgres_only
def test_a_commit_waits_for_its_chats_lock_and_only_for_it(tmp_path):
    with Store(tmp_path) as first, Store(tmp_path, busy_timeout_ms=300) as second:
        schema = load_preset("default")
        first.create_chat("c", schema)
        first.create_chat("d", schema)
        with first.transaction("c"):  # another process in the middle of a commit of chat c
            with pytest.raises(StoreLocked):
                second.commit("c", [_event(1)], 1, "test")
            second.commit("d", [_event(1)], 1, "test")  # another chat is not held up
        second.commit("c", [_event(1)], 1, "test")
        assert [len(second.commits(c)) for c in ("c", "d")] == [1, 1]


def test_a_newer_schema_version_is_refused(tmp_path):
    with Store(tmp_path) as store:
        store.conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreTooNew, match="version 99"):
        Store(tmp_path)


def test_migrating_again_changes_nothing(tmp_path):
    with Store(tmp_path) as store:
        assert db.migrate(store.conn) == db.latest_version()
        assert db.current_version(store.conn) == db.latest_version()


@postgres_only
def test_concurrent_migrators_are_serialised(tmp_path, store_engine_for_test):
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            Store(tmp_path).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with Store(tmp_path) as store:
        assert db.current_version(store.conn) == db.latest_version()


@postgres_only
def test_a_connection_lost_in_the_middle_of_a_commit_leaves_it_wholly_out(tmp_path, postgres_server, monkeypatch):
    import psycopg

    from curator.store import projection

    with Store(tmp_path) as store:
        store.create_chat("c", load_preset("default"))
        store.commit("c", [_event(1)], 1, "test")
        version, pid = store.graph_version("c"), store.conn.backend_pid()
        apply = projection.Applier.apply

        def apply_then_lose_the_connection(self, ops):
            done = apply(self, ops)  # the nodes are written inside the open transaction ...
            with psycopg.connect(postgres_server, autocommit=True) as admin:  # ... when the server drops us
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return done

        monkeypatch.setattr(projection.Applier, "apply", apply_then_lose_the_connection)
        with pytest.raises(StoreError, match="lost the connection") as caught:
            store.commit("c", [_event(2), _event(3)], 2, "test")
        assert "curator-test" not in str(caught.value)  # the test cluster's password
        monkeypatch.setattr(projection.Applier, "apply", apply)
        # The same store carries on over a new connection; nothing of the lost commit is there.
        assert store.graph_version("c") == version
        assert [len(c.ops) for c in store.commits("c")] == [1]
        assert {n.id for n in store.graph("c").nodes(archived=None)} == {"ev1"}
        store.commit("c", [_event(2)], 2, "test")
        assert {n.id for n in store.graph("c").nodes(archived=None)} == {"ev1", "ev2"}
