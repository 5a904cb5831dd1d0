"""docs/quickstart-snippets.md, run as written: the library example (twice: a rerun must not fail), the curl
session against `curator serve`, and the MCP client configuration through the `mcp` package's client. The model is
a fake OpenAI-compatible endpoint (each reply becomes one event); only the port and the paths are changed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from curator.testing import FakeOpenAI

DOC = Path(__file__).resolve().parents[1] / "docs" / "quickstart-snippets.md"
pytestmark = pytest.mark.no_store  # the engine does not matter here: SQLite pass only


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _exe() -> str:
    found = Path(sys.executable).with_name("curator")
    return str(found) if found.exists() else "curator"


def _env(fake: FakeOpenAI) -> dict:
    bin_dir = str(Path(sys.executable).parent)  # the `curator` of this environment, as an activated venv has it
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CURATOR_")},
            "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake.base_url, "CURATOR_API_KEY": "x",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}


def test_the_library_example_runs_twice_and_prints_what_the_model_gets(tmp_path):
    (code,) = _blocks("python")
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    with FakeOpenAI() as fake:
        runs = [subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(fake), capture_output=True,
                               text=True, timeout=600) for _ in range(2)]
        extraction_calls = len(fake.requests)
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "still due: []" in run.stdout
        assert "[Memory" in run.stdout and "I will remember this" in run.stdout  # the reply's event, recalled
    assert runs[0].stdout == runs[1].stdout  # the rerun found the chat and its memory as they were
    assert extraction_calls >= 2  # two replies extracted, once: the rerun had nothing due


def test_the_curl_session_against_curator_serve(tmp_path):
    (script,) = [b for b in _blocks("bash") if "curl" in b]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = script.replace("curator serve", f"curator --data {tmp_path / 'data'} serve --port {port}")
    script = script.replace(":8787", f":{port}")
    with FakeOpenAI() as fake:
        shell = subprocess.Popen(["bash", "-e", "-c", script], cwd=tmp_path, env=_env(fake), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = shell.communicate(timeout=180)
        finally:  # the service it started goes with it, whatever happened
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)
    assert shell.returncode == 0, err
    assert '"id":"road"' in out  # the chat was created
    assert "[Memory" in out and "I will remember this" in out  # the recall's text


def test_the_mcp_client_configuration(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    import curator

    data = tmp_path / "data"
    with curator.open(data) as memory:
        memory.import_("road", curator.paths.example_file("lantern_road.graph.json"))
    (config,) = [json.loads(b) for b in _blocks("json")]
    server = config["mcpServers"]["memory-curator"]
    assert server["command"] == "curator" and server["args"][0] == "--data" and server["args"][-1] == "mcp"
    args = ["--data", str(data), *server["args"][2:]]  # the user's own data directory

    async def session() -> tuple[set, dict]:
        async with Client(StdioServerParameters(command=_exe(), args=args, env={**os.environ, "NO_COLOR": "1"})) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            answer = await c.call_tool("recall", {"chat": "road", "query": "What does Eileen owe Rowan?"})
            return tools, json.loads(answer.content[0].text)

    tools, recalled = asyncio.run(session())
    assert {"list_chats", "find_by_name", "get_node", "neighbours", "timeline", "recall"} <= tools
    assert recalled["blocks"]["persistent"] or recalled["blocks"]["recalled"]


def test_the_readme_shows_these_examples_as_they_are_tested():
    """The README's library example, curl session and MCP configuration are this page's, character for character,
    so what a reader copies from the README is what the tests above run."""
    readme = DOC.parents[1] / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md beside the tests")
    text = readme.read_text(encoding="utf-8")
    shown = [*_blocks("python"), *[b for b in _blocks("bash") if "curl" in b], *_blocks("json")]
    assert len(shown) == 3
    for block in shown:
        assert block in text, block.splitlines()[0]
