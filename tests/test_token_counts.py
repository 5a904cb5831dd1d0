"""Token counts before the whole encoder is built (curator/llm/tokens.py): a partial encoder, given the ranks of
every substring of a text's whitespace-bounded segments, must count exactly as tiktoken's whole cl100k encoder, and
a process's first recall must not need the whole one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from curator.llm import tokens

pytestmark = pytest.mark.no_store

WHOLE = tokens.encoding()
# what makes tiktoken's pieces: letters, digits, contractions, punctuation runs, every kind of whitespace (ASCII and
# not), CJK and emoji, a special token's text, lone surrogates
PARTS = st.sampled_from([
    *"abcdefghijklmnopqrstuvwxyzAZ0123456789.,;:!?-_()[]{}<>/\\@#$%^&*+=~`|'\"", " ", "  ", "\t", "\n", "\r\n",
    "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "\x7f", "\x85", "\xa0", "\u2003", "\u3000", "\u180e", "'s", "'LL", "'ve",
    " the", "ing", "éü", "ß", "北京大学", "的学生", "日本語", "한국어", "😀", "👍🏽", "\u200d", "\ufffd",
    "<|endoftext|>", "1,000.5", "12345", "\ud800",
])
TEXTS = st.lists(PARTS, max_size=60).map("".join)


def _whole(text: str) -> int:
    return len(WHOLE.encode(text, disallowed_special=()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXTS, min_size=1, max_size=5), st.booleans())
def test_a_fresh_counter_counts_as_the_whole_encoder(texts, prepared):
    counter = tokens._Counter()
    if prepared:
        counter.prepare(texts)
    assert [counter.count(t) for t in texts] == [_whole(t) for t in texts]


def test_plain_text_is_counted_without_the_whole_encoder():
    counter = tokens._Counter()
    lines = ["- Turn 12 (event, floor 12): summary: Mira found the lantern at the harbour.",
             "- Mira (character): She'll sail at dawn; 3 coins, 1,000.5 miles.\n\n  (indented)\tend  ",
             "[Memory: recalled for this turn]\n\n"]
    counter.prepare(lines)
    assert [counter.count(t) for t in lines] == [_whole(t) for t in lines]
    assert counter._whole is None and counter.rounds == 1  # one partial encoder for all three
    assert counter.count("Mira found the lantern.") == _whole("Mira found the lantern.") and counter.rounds == 1


@pytest.mark.parametrize("text", ["a\xa0b", "a\u3000b", "x" * 10_000, "\ud800 x"])
def test_what_the_segments_cannot_cover_goes_to_the_whole_encoder(text):
    counter = tokens._Counter()
    assert counter.count(text) == _whole(text)
    assert counter._whole is not None


def test_the_whole_encoder_is_built_after_enough_partial_ones(monkeypatch):
    monkeypatch.setattr(tokens, "PARTIAL_ROUNDS", 2)
    counter = tokens._Counter()
    for word in ("alpha", "beta", "gamma"):
        assert counter.count(word) == _whole(word)
    assert counter.rounds == 2 and counter._whole is not None
    assert counter.count("delta") == _whole("delta")


def test_a_first_recall_builds_no_whole_encoder(tmp_path):
    """In a fresh process (as `curator recall` or the service's first request), recall's counts stay partial."""
    script = f"""
import json, curator
from curator.llm import tokens
memory = curator.open({str(tmp_path / "data")!r})
memory.create_chat("road")
memory.commit("road", [{{"op": "create_node", "id": "e1", "type": "event", "title": "The lantern",
                         "fields": {{"summary": "Mira found the lantern at the harbour."}}}}], 0, "test")
result = memory.recall("road", "Who found the lantern?")
print(json.dumps({{"whole": tokens._COUNTER._whole is not None, "rounds": tokens._COUNTER.rounds,
                  "tokens": result.tokens, "text": result.text}}))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert "lantern" in found["text"]
    assert not found["whole"] and 1 <= found["rounds"] <= 3
    assert found["tokens"] == _whole(found["text"])


def test_counts_from_many_threads_at_once_are_exact(monkeypatch):
    """The service counts from several threads: partial encoders are made and replaced under a lock, and the whole
    encoder may arrive while others count."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(tokens, "PARTIAL_ROUNDS", 5)
    counter = tokens._Counter()
    places = ("mill", "harbour", "gate")
    texts = [f"Line {i}: Mira met Tomas at the {places[i % 3]} on day {i * 7}." for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        counted = list(pool.map(counter.count, texts))
    assert counted == [_whole(t) for t in texts]
    assert counter._whole is not None  # more than five partial encoders were asked for
