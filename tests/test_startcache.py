"""The start cache (curator/startcache.py): what a process would rebuild at every start, kept on disk."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from curator import startcache
from curator.llm import tokens
from curator.vectors import e5_runtime
from curator.vectors.e5_tokenizer import E5Tokenizer
from curator.vectors.e5_weights import shipped_weights

pytestmark = pytest.mark.no_store


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("CURATOR_CACHE_DIR", str(folder))
    return folder


def _counting(data: bytes):
    built: list[int] = []

    def build() -> bytes:
        built.append(1)
        return data
    return build, built


def test_a_file_is_built_once_then_read(cache):
    build, built = _counting(b"table")
    assert startcache.cached("thing", "k1", build, bytes) == b"table"
    assert startcache.cached("thing", "k1", build, bytes) == b"table"
    assert built == [1]
    assert [p.name for p in cache.iterdir()] == ["thing-k1.bin"]


def test_a_new_key_builds_again_and_removes_the_old_file(cache):
    startcache.cached("thing", "k1", lambda: b"old", bytes)
    assert startcache.cached("thing", "k2", lambda: b"new", bytes) == b"new"
    startcache.cached("other", "k1", lambda: b"x", bytes)
    assert sorted(p.name for p in cache.iterdir()) == ["other-k1.bin", "thing-k2.bin"]


def test_a_damaged_file_is_built_again_and_said(cache, caplog):
    def parse(data: bytes) -> bytes:
        if data != b"whole":
            raise ValueError("cut short")
        return data
    cache.mkdir()
    (cache / "thing-k1.bin").write_bytes(b"wh")
    with caplog.at_level(logging.WARNING, logger="curator.startcache"):
        assert startcache.cached("thing", "k1", lambda: b"whole", parse) == b"whole"
    assert "could not be read (ValueError: cut short)" in caplog.text
    assert (cache / "thing-k1.bin").read_bytes() == b"whole"


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CURATOR_CACHE_DIR", str(blocker / "cache"))
    build, built = _counting(b"table")
    assert startcache.cached("thing", "k1", build, bytes) == b"table"
    assert startcache.cached("thing", "k1", build, bytes) == b"table"
    assert built == [1, 1]


def test_an_empty_setting_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("CURATOR_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    startcache.cached("thing", "k1", lambda: b"table", bytes)
    assert not list(tmp_path.iterdir())


def test_the_key_follows_a_files_size_and_time(tmp_path):
    file = tmp_path / "model.bin"
    file.write_bytes(b"12345")
    first = startcache.key(file, "v1")
    assert startcache.key(file, "v1") == first != startcache.key(file, "v2")
    file.write_bytes(b"123456")
    assert startcache.key(file, "v1") != first


def test_e5_from_the_cache_splits_and_embeds_as_built_in_memory(cache):
    weights = shipped_weights()
    texts = ["Mira lit the lantern at Brannoch's bridge.", "  über   水 \U0001F600 x" * 3, "a\0b", ""]
    reference = E5Tokenizer(weights.vocabulary())
    cold, warm = E5Tokenizer.of(weights), E5Tokenizer.of(weights)  # the first builds the file, the second reads it
    assert sorted(p.name.split("-")[1] for p in cache.iterdir()) == ["pieces"]
    for text in texts:
        assert cold.content_ids(text) == warm.content_ids(text) == reference.content_ids(text)
    graph = e5_runtime.shipped_graph(weights)
    assert e5_runtime.shipped_graph(weights) == graph == e5_runtime.build_graph(weights)


def test_the_token_counter_from_the_cache_counts_as_tiktoken_does(cache):
    tokens.encoding.cache_clear()
    try:
        fresh = tokens.encoding()
        tokens.encoding.cache_clear()
        cached = tokens.encoding()
        assert any(p.name.startswith("cl100k-") for p in cache.iterdir())
        text = "Mira's lantern — 3 coins, a 水 and <|endoftext|> as text."
        assert cached.encode(text, disallowed_special=()) == fresh.encode(text, disallowed_special=())
        assert tokens.count_tokens("hello world") == 2
    finally:
        tokens.encoding.cache_clear()


def test_the_lexicon_format_from_the_cache_is_the_one_the_code_gives(cache):
    from curator.recall import lexicon

    lexicon.lexicon_format.cache_clear()
    try:
        assert lexicon.lexicon_format() == lexicon._format()
        [saved] = [p for p in cache.iterdir() if p.name.startswith("lexicon-format-")]
        saved.write_bytes(b"\xff not a format")
        lexicon.lexicon_format.cache_clear()
        assert lexicon.lexicon_format() == lexicon._format()  # a damaged file is made again
        assert saved.read_bytes() == lexicon._format().encode()
    finally:
        lexicon.lexicon_format.cache_clear()


def test_the_shipped_labels_from_the_cache_are_the_yaml_file(cache):
    from curator.prompts import overrides
    from curator.prompts.render import shipped_path
    from curator.textfile import load_yaml

    shipped = shipped_path(overrides.LABELS).read_text(encoding="utf-8")
    assert overrides._shipped_labels(shipped) == load_yaml(shipped)
    [saved] = [p for p in cache.iterdir() if p.name.startswith("labels-")]
    saved.write_bytes(b"[1, 2]")  # JSON, but not the labels' mapping: made again
    assert overrides._shipped_labels(shipped) == load_yaml(shipped)
    assert isinstance(json.loads(saved.read_bytes()), dict)


def test_a_second_process_renders_an_injection_without_a_yaml_parser(cache, tmp_path):
    script = f"""
import json, sys, curator
memory = curator.open({str(tmp_path / "data")!r})
if "road" not in memory.chats():
    memory.create_chat("road")
    memory.commit("road", [{{"op": "create_node", "id": "e1", "type": "event", "title": "The lantern",
                             "fields": {{"summary": "Mira found the lantern at the harbour."}}}}], 0, "test")
text = memory.recall("road", "Who found the lantern?").text
print(json.dumps({{"yaml": "yaml" in sys.modules, "text": text}}))
"""
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "CURATOR_CACHE_DIR": str(cache)})
        assert run.returncode == 0, run.stderr
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert "lantern" in runs[1]["text"] and runs[1]["text"] == runs[0]["text"]
    assert runs[0]["yaml"] and not runs[1]["yaml"]  # the first process built the labels' cache file
