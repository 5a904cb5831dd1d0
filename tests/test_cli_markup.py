"""What a chat holds is printed as it is: role-play text is full of brackets ("[ooc: ...]", "[System note]") that rich
would read as markup, and "[/]" made `curator show` and `curator recall` fail with a MarkupError."""

from __future__ import annotations

from typer.testing import CliRunner

import curator
from curator.cli.main import app
from curator.paths import example_file

BRACKETS = "[/] the [ooc: keep this] [red]dragon[/red] of [bold] :smile:"


def _data(tmp_path):
    where = tmp_path / "data"
    with curator.open(where) as memory:
        memory.import_("road", example_file("lantern_road.graph.json"))
        memory.commit("road", [{"op": "create_node", "id": "n_brackets", "type": "event", "title": BRACKETS,
                                "fields": {"summary": f"Eileen wrote {BRACKETS}"}}], 30, "test")
    return where


def _run(*argv: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "250", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def test_show_prints_brackets_as_they_are(tmp_path):
    data = _data(tmp_path)
    code, out, err = _run("--data", str(data), "show", "--chat", "road")
    assert code == 0, err
    assert BRACKETS in out
    assert f"summary: Eileen wrote {BRACKETS}" in out


def test_recall_prints_the_query_and_titles_as_they_are(tmp_path):
    data = _data(tmp_path)
    query = "what did Eileen write on the toll bridge [/]"
    code, out, err = _run("--data", str(data), "recall", "--chat", "road", "--query", query)
    assert code == 0, err
    assert query in out
    assert BRACKETS in out


def test_a_curator_run_prints_the_model_text_as_it_is(monkeypatch, capsys):
    from curator.cli import console, curate
    from curator.extract.curator_agent import CurateResult
    from curator.tools import ToolCall

    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delitem(console._consoles, "out", raising=False)  # made anew, as the CLI makes it, on stdout
    calls = [ToolCall("create_event", {"title": BRACKETS}, {"ok": True}, True, 1.0),
             ToolCall("edit_event", {"id": "e1"}, {"error": "no node [/e1]"}, False, 1.0)]
    curate._print(CurateResult("road", 3, 1, ["event"], True, reply=f"kept {BRACKETS}", tool_calls=calls))
    text = capsys.readouterr().out
    assert BRACKETS.replace('"', '\\"') in text and "— no node [/e1]" in text and f"curator: kept {BRACKETS}" in text


def test_a_maintenance_report_prints_titles_as_they_are(monkeypatch, capsys):
    from curator.cli import console, maintain
    from curator.maintenance.common import MaintenanceReport

    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delitem(console._consoles, "out", raising=False)
    report = MaintenanceReport("consolidate", "road", 3, changes=[{"action": "merge", "node": "e1", "title": BRACKETS}])
    maintain._show(report, json_=False)
    assert f"merge e1: title={BRACKETS}" in capsys.readouterr().out
