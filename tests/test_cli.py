"""The `curator` command as a user runs it: the installed entry point, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from curator.paths import example_file

EXAMPLE = str(example_file("lantern_road.graph.json"))


def _curator_exe() -> list[str]:
    exe = Path(sys.executable).with_name("curator")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("curator")
    return [found] if found else [sys.executable, "-m", "curator"]


def run(*args: str, data: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    cmd = _curator_exe() + (["--data", str(data)] if data else []) + list(args)
    # a hang guard, not a time limit: each command's work is small and bounded (no embedding), whatever the load
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_demo_runs_on_embedded_defaults(tmp_path):
    # --json loads the example without recall (no embedding); the plain demo, which embeds, is checked with a
    # bounded embedder in test_first_minutes.py
    stats = json.loads(run("demo", "--json", data=tmp_path).stdout)["stats"]
    assert stats["nodes_active"] == 18 and stats["edges"] == 38 and stats["messages"] >= 40


def test_init_import_show_export_rollback(tmp_path):
    run("init", "--chat", "blank", data=tmp_path)
    assert json.loads(run("chats", "--json", data=tmp_path).stdout)[0]["chat"] == "blank"
    imported = json.loads(run("import", EXAMPLE, "--chat", "road", "--json", data=tmp_path).stdout)
    assert imported["anchor_floor"] == 59
    shown = json.loads(run("show", "--chat", "road", "--json", data=tmp_path).stdout)
    assert shown["stats"]["nodes_archived"] == 9 and len(shown["nodes"]) == 18
    assert len(json.loads(run("show", "--chat", "road", "--archived", "--json", data=tmp_path).stdout)["nodes"]) == 27
    text = run("show", "--chat", "road", data=tmp_path).stdout
    assert "character_sheet (5)" in text and "owes" in text

    out = tmp_path / "road.json"
    run("export", "--chat", "road", "-o", str(out), data=tmp_path)
    assert json.loads(out.read_text(encoding="utf-8"))["format"] == "memory-curator/graph"
    assert json.loads(run("export", "--chat", "road", data=tmp_path).stdout)["nodes"]

    rolled = json.loads(run("rollback", "--chat", "road", "--floor", "10", "--json", data=tmp_path).stdout)
    assert rolled["reverted"] == [imported["commit"]]
    assert "nothing to roll back" in run("rollback", "--chat", "road", "--floor", "10", data=tmp_path).stdout
    run("import", str(out), "--chat", "again", "--mode", "bind_floor", "--floor", "4", data=tmp_path)


def test_schema_commands(tmp_path):
    assert {s["name"] for s in json.loads(run("schema", "list", "--json").stdout)} == {"default", "bme"}
    assert "pov_memory" in run("schema", "show", "bme").stdout
    yaml_text = run("schema", "show", "default", "--format", "yaml").stdout
    path = tmp_path / "mine.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    assert json.loads(run("schema", "validate", str(path), "--json").stdout)["valid"] is True
    path.write_text(yaml_text.replace("identity: latest_only", "identity: sometimes"), encoding="utf-8")
    proc = run("schema", "validate", str(path), check=False)
    assert proc.returncode == 1
    assert "type 'location_state', field 'identity'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (("show", "--chat", "nope"), "no chat 'nope'"),
    (("recall", "--chat", "nope", "--query", "who"), "no chat 'nope'"),
    (("import", "/nonexistent.json", "--chat", "x"), "cannot read"),
    (("import", EXAMPLE, "--chat", "x", "--mode", "sideways"), "unknown import mode"),
    (("init", "--chat", "x", "--schema", "/nonexistent.yaml"), "no such file"),
])
def test_errors_are_one_line_with_a_hint(tmp_path, args, message):
    run("init", data=tmp_path)  # a store without the chat (a missing store is its own error)
    proc = run(*args, data=tmp_path, check=False)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("Error:") and any(line.startswith("Hint:") for line in lines[1:]), proc.stderr


def test_debug_shows_the_traceback(tmp_path):
    proc = run("--debug", "show", "--chat", "nope", data=tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" in proc.stderr


@pytest.mark.engine("sqlite", reason="a damaged memory.db file")
def test_corrupt_database_error(tmp_path):
    (tmp_path / "memory.db").write_bytes(b"garbage" * 500)
    proc = run("chats", data=tmp_path, check=False)
    assert proc.returncode == 1 and "damaged" in proc.stderr and "Hint:" in proc.stderr


def test_usage_errors_exit_non_zero(tmp_path):
    proc = run("rollback", "--chat", "x", data=tmp_path, check=False)
    assert proc.returncode == 2 and "--floor" in proc.stderr


def test_recall_vectors_and_world_info(tmp_path):
    run("import", EXAMPLE, "--chat", "road", data=tmp_path)
    status = json.loads(run("vectors", "status", "--chat", "road", "--json", data=tmp_path).stdout)
    assert status["indexed"] == 0 and status["nodes"] == 27
    rebuilt = json.loads(run("vectors", "rebuild", "--chat", "road", "--json", data=tmp_path).stdout)
    assert rebuilt["embedded"] == 27 and rebuilt["failed"] == {}
    assert json.loads(run("vectors", "rebuild", "--chat", "road", "--floors", "0-11", "--json",
                          data=tmp_path).stdout)["embedded"] > 0
    injection = json.loads(run("recall", "--chat", "road", "--query", "Who holds the toll bridge?", "--json",
                               data=tmp_path).stdout)
    assert {row["id"] for row in injection["blocks"]["recalled"][:2]} == {"n_bridge", "n_brannoch"}
    assert injection["tokens"]["total"] <= 1500
    # the alias: the sheet of the Grey Hand is among the first three (with static documents it came second to the
    # summary that names him most), within a budget that holds both
    injection = json.loads(run("recall", "--chat", "road", "--query", "Who is the Grey Hand?", "--budget", "3000",
                               "--json", data=tmp_path).stdout)
    assert "n_grey_hand" in [row["id"] for row in injection["blocks"]["recalled"][:3]]
    text = run("recall", "--chat", "road", "-q", "the toll at the bridge", "--mode", "rag", data=tmp_path).stdout
    assert "mode rag" in text
    book = json.loads(run("export", "--chat", "road", "--format", "worldinfo", data=tmp_path).stdout)
    assert len(book["entries"]) == 18
    proc = run("recall", "--chat", "road", "-q", "x", "--mode", "psychic", data=tmp_path, check=False)
    assert proc.returncode == 1 and "unknown recall mode" in proc.stderr
