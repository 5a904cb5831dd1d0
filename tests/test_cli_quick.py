"""`curator chats` and `curator show` answered without typer (curator/cli/quick.py): the same output and exit codes
as typer's app gives for the same words, anything but their plain forms left to typer, and a fresh listing that
loads neither typer, rich nor pydantic (what made it cost 0.3 CPU-s; bench/cold_start.py times it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from curator.cli import quick
from curator.cli.main import app
from curator.paths import example_file

EXAMPLE = str(example_file("lantern_road.graph.json"))


@pytest.fixture
def data(tmp_path):
    where = tmp_path / "data"
    result = CliRunner().invoke(app, ["--data", str(where), "import", EXAMPLE, "--chat", "road"])
    assert result.exit_code == 0, result.output
    return where


def _quick(argv: list[str]) -> subprocess.CompletedProcess:
    """The `curator` entry point in a fresh process, with what it imported on stdout's last line."""
    code = ("import sys\nfrom curator.cli.quick import run\ncode = run(sys.argv[1:])\nsys.stdout.flush()\n"
            "print(sorted(m for m in ('typer', 'rich', 'pydantic', 'click') if m in sys.modules))\n"
            "sys.exit(99 if code is None else code)\n")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=600,
                          check=False)


def _typer(argv: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("words", [
    ["chats"], ["chats", "--json"],
    ["show", "--chat", "road"], ["show", "-c", "road", "--archived"], ["show", "--json", "--chat=road"],
    ["show", "--chat", "road", "--archived", "--json"],
    ["show", "--chat", "nope"], ["show", "--chat", "nope", "--json"],
])
def test_the_listings_print_what_typer_prints(data, words):
    argv = ["--data", str(data), *words]
    proc = _quick(argv)
    assert proc.returncode != 99, "the quick path did not take a plain listing"
    *printed, imported = proc.stdout.splitlines(keepends=True)
    code, stdout, stderr = _typer(argv)
    assert (proc.returncode, "".join(printed), proc.stderr) == (code, stdout, stderr)
    if words[-1] == "--json" and "nope" not in words:
        assert json.loads("".join(printed))
    # no typer, rich or pydantic for a listing (show's tables need rich; an error needs none)
    assert imported.strip() == ("['rich']" if words[0] == "show" and "--json" not in words and "nope" not in words
                                else "[]")


def test_a_missing_store_is_the_same_error(tmp_path):
    argv = ["--data", str(tmp_path / "none"), "chats"]
    proc = _quick(argv)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: no memory store in ")
    assert (proc.returncode, proc.stderr) == _typer(argv)[::2]
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["chats", "--help"], ["show"], ["show", "--chat"], ["show", "--chat", "--json"],
    ["show", "-c=road"], ["show", "-croad"], ["show", "--chat", "a", "--chat", "b"], ["show", "--chat", ""],
    ["chats", "--json", "--json"], ["chats", "--data", "x"], ["chats", "extra"], ["--debug=1", "chats"],
    ["--data"], ["recall", "--chat", "road", "--turns", "t.jsonl"], ["recall", "-q", "who"],
    ["recall", "--chat", "road", "--budget", "300"], ["recall", "--chat", "road", "--archived"],
    ["--", "chats"], ["chats", "--archived"], ["--json", "chats"],
])
def test_anything_but_a_plain_listing_goes_to_typer(argv):
    assert quick.parse(argv) is None


def test_the_forms_it_reads():
    assert quick.parse(["--data", "d", "--debug", "--store=sqlite", "show", "--archived", "-c", "x"]) == (
        "show", {"data": "d", "debug": True, "store": "sqlite"}, {"archived": True, "chat": "x"})
    assert quick.parse(["chats"]) == ("chats", {}, {})
    assert quick.parse(["recall", "-c", "x", "-q", "Who?", "--mode=rag", "--at", "day 5", "--json"]) == (
        "recall", {}, {"chat": "x", "query": "Who?", "mode": "rag", "at": "day 5", "json_": True})


def test_debug_shows_the_traceback_on_the_quick_path(tmp_path):
    proc = _quick(["--data", str(tmp_path), "--debug", "show", "--chat", "nope"])
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "Error: no memory store" in proc.stderr


def test_a_recall_of_a_missing_chat_is_told_before_the_memory_api_loads(data):
    code = ("import sys\nfrom curator.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit as exit:\n    sys.stdout.flush()\n"
            "    print(exit.code, 'curator.api.memory' in sys.modules, 'curator.settings' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code, "--data", str(data), "recall", "--chat", "nope", "-q", "who"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.stderr.startswith("Error: no chat 'nope'") and proc.stdout.split() == ["1", "False", "False"]


def test_no_model_is_told_without_the_settings_as_the_default_settings_tell_it(tmp_path, monkeypatch):
    from curator.cli.base import no_model_configured
    from curator.cli.session import state
    from curator.errors import NoModelProfile
    from curator.settings import TASKS, load_settings, writers_of

    monkeypatch.delenv("CURATOR_MODEL", raising=False)
    monkeypatch.setitem(state, "data", tmp_path)
    assert no_model_configured()
    settings = load_settings(tmp_path)  # what the shortcut stands for: the defaults, no profile, the extractor
    assert writers_of(settings.extraction.channel) == ("extractor",) and "extract" in TASKS
    with pytest.raises(NoModelProfile) as raised:
        settings.profile_for("extract")
    assert (str(raised.value), raised.value.hint) == (str(NoModelProfile("default", "extract")),
                                                      NoModelProfile("default", "extract").hint)
    (tmp_path / "config.yaml").write_text("profiles: {}\n", encoding="utf-8")
    assert not no_model_configured()
    monkeypatch.setenv("CURATOR_MODEL", "m")
    (tmp_path / "config.yaml").unlink()
    assert not no_model_configured()


@pytest.mark.parametrize(("before", "given", "expected"), [
    ("", None, "4"),  # OpenBLAS's idle threads sleep soon: ~0.1 CPU-s less in a one-shot recall
    ("", "20", "20"),  # the user's own choice stays
    ("import numpy;", None, None),  # numpy loaded first: OpenBLAS has read its settings, nothing is set
])
def test_importing_curator_shortens_openblas_idle_spin_unless_told_or_too_late(before, given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    run = subprocess.run([sys.executable, "-c", f"{before}import os, curator; "
                          "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(expected)


@pytest.mark.parametrize("words", [
    ["recall", "--chat", "road", "-q", "Where did Eileen hide the ledger?"],
    ["recall", "-c", "road", "--query=Who is Rowan?", "--mode", "rag", "--json"],
    ["recall", "--chat", "nope", "-q", "who"], ["recall", "--chat", "road"], ["recall", "-c", "road", "--mode", "x"],
])
def test_a_plain_recall_prints_what_typer_prints_without_typer(data, words):
    argv = ["--data", str(data), *words]
    proc = _quick(argv)
    assert proc.returncode != 99, "the quick path did not take a plain recall"
    *printed, imported = proc.stdout.splitlines(keepends=True)
    code, stdout, stderr = _typer(argv)
    assert (proc.returncode, proc.stderr) == (code, stderr)
    if "--json" in words:  # the same injection; its timings differ from run to run
        quick_json, typer_json = json.loads("".join(printed)), json.loads(stdout)
        assert quick_json["text"] == typer_json["text"] and quick_json["text"]
    else:
        assert "".join(printed) == stdout
    assert "typer" not in imported  # (click may come with chromadb's client, through httpx: not the parser's)
