from __future__ import annotations

import json

import pytest

from curator import ChatFileError
from curator.extract.chatfile import parse_chat, read_chat
from curator.store.messages import floor_hash, latest_assistant_floor
from curator.paths import example_file


def test_example_sillytavern_chat():
    chat = read_chat(example_file("lantern_road.jsonl"))
    assert chat.format == "sillytavern" and chat.user_name == "Rowan" and chat.character_name == "Eileen"
    messages = chat.messages
    assert len(messages) >= 40
    assert {m.role for m in messages} == {"user", "assistant"}
    swiped = [m for m in messages if len(m.swipes) > 1]
    assert len(swiped) == 1 and swiped[0].swipe_id > 0 and swiped[0].text == swiped[0].swipes[swiped[0].swipe_id]
    assert latest_assistant_floor(messages) == len(messages) - 1
    names = {m.name for m in messages if m.role == "assistant"}
    assert names == {"Eileen"}


def test_example_promise_is_made_early_and_recalled_late():
    texts = [m.text for m in read_chat(example_file("lantern_road.jsonl")).messages]
    assert any("owe you" in t for t in texts[:8])
    assert any("debt" in t.lower() for t in texts[38:])


def test_floor_hash_sees_edits_and_swipes():
    base = floor_hash("assistant", "Eileen", "hello", 0)
    assert -2**63 <= base < 2**63
    assert base == floor_hash("assistant", "Eileen", "hello", 0)
    assert len({base, floor_hash("assistant", "Eileen", "hello!", 0), floor_hash("assistant", "Eileen", "hello", 1),
                floor_hash("user", "Eileen", "hello", 0), floor_hash("assistant", "Mira", "hello", 0)}) == 5


def test_plain_jsonl():
    text = "\n".join(json.dumps(m) for m in [
        {"role": "user", "name": "Rowan", "content": "Hi."},
        {"role": "assistant", "content": "Hello, traveller."},
    ])
    chat = parse_chat(text)
    assert chat.format == "plain"
    assert [(m.role, m.name, m.text) for m in chat.messages] == [("user", "Rowan", "Hi."),
                                                                  ("assistant", "assistant", "Hello, traveller.")]


@pytest.mark.parametrize("text, message", [
    ('{"user_name": "a"}\n{"name": "b", "mes": "x"}\n{broken', "line 3: not valid JSON"),
    ('{"user_name": "a"}\n{"name": "b", "text": "x"}', "line 2: a message needs 'mes'"),
    ('{"user_name": "a"}\n{"name": "b", "mes": "x", "swipes": ["x"], "swipe_id": 3}', "line 2: swipe_id 3"),
    ('{"role": "narrator", "content": "x"}', "line 1: expected"),
    ('', "no messages"),
    ('[1]', "line 1: expected a JSON object"),
])
def test_malformed_chats(text, message):
    with pytest.raises(ChatFileError, match=message):
        parse_chat(text)


def test_non_utf8_chat(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"user_name": "a"}\n{"mes": "\xff"}\n')
    with pytest.raises(ChatFileError, match="line 2: not UTF-8"):
        read_chat(path)


def test_messages_are_stored_with_hashes(memory):
    memory.create_chat("road", "default")
    count = memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    stored = memory.store.messages("road")
    assert len(stored) == count
    original = read_chat(example_file("lantern_road.jsonl")).messages
    assert [m.hash for m in stored] == [m.hash for m in original]
    assert [m.swipes for m in stored] == [m.swipes for m in original]
