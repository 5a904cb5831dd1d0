"""Every rollback can be undone: the trash of the commit log (curator/store/trash.py) through the library, the CLI and
the HTTP API, its retention and purge, and the guards of `sync` (a file with no messages, a revert of many commits).
The exactness of undo over random histories is property-tested in test_rollback_property.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from typer.testing import CliRunner

import curator
from curator.cli.main import app as cli_app
from curator.errors import CuratorError, RollbackRefused
from curator.testing.scripted import scripted_chat, scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.store import trash
from curator.store.trash import Retention

from store_dump import dump_store

FLOORS = 24
HEADER = {"user_name": "User", "character_name": "Narrator", "chat_metadata": {}}


def write_st(path, messages) -> None:
    """A SillyTavern .jsonl: its header line, then one line a message."""
    lines = [HEADER] + [{"name": m.name, "is_user": m.role == "user", "mes": m.text} for m in messages]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")


def state(memory, chat="c"):
    return memory.graph(chat).snapshot(), memory.store.messages(chat), [c.id for c in memory.store.commits(chat)]


@pytest.fixture
def extracted(tmp_path):
    """A data directory with chat `c`: FLOORS scripted floors, each reply extracted (one commit a reply)."""
    data = tmp_path / "data"
    with curator.open(data) as memory:
        memory.create_chat("c", "default")
        memory.sync("c", scripted_chat(FLOORS), extract=True, model=scripted_model())
        assert len(memory.store.commits("c")) == FLOORS // 2
    return data


def test_a_header_only_file_is_refused_and_a_cut_file_asks_then_is_undone(extracted, tmp_path, monkeypatch):
    runner = CliRunner()
    cli = ["--data", str(extracted)]
    with curator.open(extracted) as memory:
        before = state(memory)
    header = tmp_path / "header.jsonl"  # what a crash mid-save leaves
    header.write_text(json.dumps(HEADER) + "\n")
    refused = runner.invoke(cli_app, [*cli, "sync", str(header), "--chat", "c", "--yes"])
    assert refused.exit_code == 1 and "no chat messages" in refused.output
    cut = tmp_path / "cut.jsonl"
    write_st(cut, scripted_chat(10))
    monkeypatch.setattr("curator.cli.guards.os.isatty", lambda fd: True)
    declined = runner.invoke(cli_app, [*cli, "sync", str(cut), "--chat", "c", "--no-extract"], input="n\n")
    assert declined.exit_code == 1 and "revert 7 commits" in declined.output
    with curator.open(extracted) as memory:
        assert state(memory) == before
    done = runner.invoke(cli_app, [*cli, "sync", str(cut), "--chat", "c", "--no-extract"], input="y\n")
    assert done.exit_code == 0 and "kept as batch #1" in done.output, done.output
    with curator.open(extracted) as memory:
        assert len(memory.store.messages("c")) == 10 and len(memory.store.commits("c")) == 5
    listed = json.loads(runner.invoke(cli_app, [*cli, "history", "--chat", "c", "--json"]).stdout)["batches"]
    assert [(b["id"], b["reason"], b["floor"], b["reverted"], b["floors"]) for b in listed] == [
        (1, "sync", 10, 7, FLOORS - 10)]
    shown = runner.invoke(cli_app, [*cli, "history", "--chat", "c"])
    assert "#1" in shown.output and "sync" in shown.output and "curator undo --chat c N" in shown.output
    undone = runner.invoke(cli_app, [*cli, "undo", "--chat", "c"])
    assert undone.exit_code == 0 and "batch #1 restored: 7 commit(s) and 14 floor(s)" in undone.output
    with curator.open(extracted) as memory:
        assert state(memory) == before  # graph, floors and commit ids as before the sync
        assert [b.reason for b in memory.trash("c")] == ["undo"]  # the undo can be undone in turn


def test_a_sync_that_reverts_more_than_a_few_commits_needs_a_yes(extracted):
    with curator.open(extracted) as memory:
        before = dump_store(extracted)
        edited = list(scripted_chat(FLOORS))
        edited[5] = dataclasses.replace(edited[5], text="An edit far back.")
        with pytest.raises(RollbackRefused, match="revert 10 commits"):
            memory.sync("c", edited, max_revert=3)
        with pytest.raises(RollbackRefused, match="empty chat"):
            memory.sync("c", [], allow_empty=False)
        assert dump_store(extracted) == before
        report = memory.sync("c", edited, max_revert=10)
        assert len(report.reverted) == 10 and report.batch is not None


def test_the_http_api_lists_restores_and_purges(extracted):
    with curator.open(extracted) as memory:
        before = state(memory)
        with ThreadedServer(create_app(memory, ServiceConfig(model=scripted_model()))) as server, \
                httpx2.Client(base_url=server.url + "/api/v1", timeout=60, headers={"x-curator-client": "t"}) as http:
            stored = dump_store(extracted)
            empty = http.post("/chats/c/sync", json={"messages": []})
            assert empty.status_code == 409 and empty.json()["error"]["code"] == "rollback_refused"
            assert "allow_rollback" in empty.json()["error"]["hint"]
            edit = [{"role": m.role, "name": m.name, "text": m.text} for m in scripted_chat(FLOORS)]
            edit[9]["text"] = "An edit five replies back."
            far = http.post("/chats/c/sync", json={"messages": edit, "extract": False})
            assert far.status_code == 409 and "revert 8 commits" in far.json()["error"]["message"]
            assert dump_store(extracted) == stored  # refused: nothing changed
            meant = http.post("/chats/c/sync", json={"messages": edit, "allow_rollback": True, "extract": False})
            assert meant.status_code == 200 and meant.json()["batch"] == 1
            listed = http.get("/chats/c/trash").json()["batches"]
            assert listed[0]["id"] == 1 and listed[0]["reason"] == "sync" and listed[0]["detail"] == "floor 9 edited"
            shown = http.get("/chats/c/trash/1").json()
            assert len(shown["commits"]) == 8 and shown["messages"][0]["floor"] == 9
            restored = http.post("/chats/c/undo", json={"batch": 1})
            assert restored.status_code == 200 and restored.json()["messages"] == FLOORS - 9
            assert state(memory) == before
            redo = http.post("/chats/c/undo", json={})  # the newest: the undo's own batch, i.e. a redo
            assert redo.json()["batch"] == restored.json()["displaced_batch"] and redo.json()["due"][0] == 9
            gone = http.post("/chats/c/undo", json={"batch": 1})
            assert gone.status_code == 404 and "curator history" in gone.json()["error"]["hint"]
            for bad in ({"batch": True}, {"batch": "1"}, {"batch": 0}, {"batch": 2**63}):
                assert http.post("/chats/c/undo", json=bad).status_code == 422, bad
            newest = http.get("/chats/c/trash").json()["batches"][0]["id"]
            assert http.delete(f"/chats/c/trash/{newest}").json()["purged"] == 1
            assert http.post("/chats/c/rollback", json={"floor": 0}).json()["batch"] > newest
            assert http.delete("/chats/c/trash", params={"all": True}).json()["purged"] == 1
            assert http.get("/chats/c/trash").json()["batches"] == []
            assert http.delete("/chats/c/trash").status_code == 400


def test_retention_keeps_the_newest_batches_and_purge_is_explicit(memory):
    memory.create_chat("c", "default")
    memory.settings  # noqa: B018 - loaded first: it sets the retention from config.yaml
    memory.store.retention = Retention(days=30, batches=3)
    for floor in range(6):
        memory.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": f"N{floor}"}}], floor)
    for floor in (5, 4, 3, 2, 1):
        memory.rollback("c", floor)
    assert [b.floor for b in memory.trash("c")] == [1, 2, 3]  # the newest three
    old = (datetime.now(UTC) - timedelta(days=40)).isoformat()
    memory.store.conn.execute("UPDATE trash SET at=? WHERE floor=3", (old,))
    with memory.store.transaction("c") as conn:
        assert trash.prune(conn, "c", Retention(days=30, batches=0)) == 1
    assert [b.floor for b in memory.trash("c")] == [1, 2]
    at_floor_2 = memory.trash("c")[1].id
    assert memory.purge_trash("c", older_than_days=1) == 0 and memory.purge_trash("c", [at_floor_2]) == 1
    with pytest.raises(CuratorError, match=f"no reverted batch #{at_floor_2}"):
        memory.purge_trash("c", [at_floor_2])
    assert memory.purge_trash("c") == 1 and memory.trash("c") == []


def test_retention_comes_from_the_config(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("history: {keep_days: 7, keep_batches: 2, ask_above: 10}\n")
    with curator.open(data) as memory:
        memory.create_chat("c", "default")
        for floor in range(4):
            memory.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": f"N{floor}"}}],
                          floor)
        for floor in (3, 2, 1):
            memory.rollback("c", floor)
        assert memory.store.retention == Retention(7, 2) and len(memory.trash("c")) == 2


def test_a_rebuild_and_an_ingest_of_a_changed_file_are_undone(extracted, tmp_path):
    runner = CliRunner()
    with curator.open(extracted) as memory:
        before = state(memory)
        removed = memory.history.clear("c")
        assert removed == FLOORS // 2 and memory.graph("c").stats()["nodes_active"] == 0
        assert memory.trash("c")[0].reason == "rebuild"
        memory.undo("c", memory.trash("c")[0].id)
        assert state(memory) == before
    cut = tmp_path / "cut.jsonl"
    write_st(cut, scripted_chat(FLOORS - 4))
    assert runner.invoke(cli_app, ["--data", str(extracted), "ingest", str(cut), "--chat", "c", "--limit", "0"]
                         ).exit_code == 0
    with curator.open(extracted) as memory:
        batch = memory.trash("c")[0]
        assert (batch.reason, batch.floor, batch.summary["reverted"]) == ("ingest", FLOORS - 4, 2)
        memory.undo("c", batch.id)
        assert state(memory)[0] == before[0] and len(memory.store.messages("c")) == FLOORS


def test_purge_on_the_cli_asks_and_names_what_it_drops(extracted, monkeypatch):
    runner = CliRunner()
    cli = ["--data", str(extracted)]
    assert runner.invoke(cli_app, [*cli, "rollback", "--chat", "c", "--floor", "20", "--yes"]).exit_code == 0
    assert runner.invoke(cli_app, [*cli, "history", "purge", "--chat", "c"]).exit_code == 1  # say what
    monkeypatch.setattr("curator.cli.guards.os.isatty", lambda fd: True)
    declined = runner.invoke(cli_app, [*cli, "history", "purge", "--chat", "c", "--all"], input="n\n")
    assert declined.exit_code == 1 and "can no longer be undone" in declined.output
    done = runner.invoke(cli_app, [*cli, "history", "purge", "--chat", "c", "--batch", "1", "--json"])
    assert json.loads(done.stdout)["purged"] == 1
    nothing = runner.invoke(cli_app, [*cli, "undo", "--chat", "c"])
    assert nothing.exit_code == 1 and "nothing to undo" in nothing.output
