"""What a developer passes to the library the first time: plain dicts wherever a `Message` is taken (as OpenAI's API
writes them, or with "text" as our HTTP API does), a clear error for a dict that is not a message, and a script that
can run again (`create_chat(..., exist_ok=True)`)."""

from __future__ import annotations

import asyncio

import pytest

import curator
from curator.store.messages import Message

TURNS = [{"role": "user", "name": "You", "content": "Eileen, what do I owe you for the salve?"},
         {"role": "assistant", "name": "Eileen", "content": [{"type": "text", "text": "Three crowns, as agreed."}]},
         {"role": "user", "text": "And the lantern?"}]
AS_MESSAGES = [Message("user", "You", "Eileen, what do I owe you for the salve?"),
               Message("assistant", "Eileen", "Three crowns, as agreed."), Message("user", "", "And the lantern?")]


def test_plain_dicts_wherever_a_message_is_taken(memory, chat):
    memory.set_messages("road", TURNS)
    assert memory.store.messages("road") == AS_MESSAGES
    report = memory.sync("road", [*TURNS, {"role": "assistant", "name": "Eileen", "content": "Keep it lit."}])
    assert 3 in report.due and memory.store.messages("road")[3] == Message("assistant", "Eileen", "Keep it lit.")
    with_dicts = memory.recall("road", messages=TURNS)
    with_messages = memory.recall("road", messages=AS_MESSAGES)
    assert with_dicts.text and with_dicts.text == with_messages.text
    assert "Eileen" in with_dicts.text


@pytest.mark.parametrize(("bad", "said"), [
    ({"role": "bot", "content": "x"}, "messages[1] has role 'bot'"),
    ({"role": "user", "contents": "x"}, "messages[1] has unknown key(s) 'contents'"),
    ({"role": "user"}, "messages[1] has no 'content'"),
    ({"role": "user", "content": 3}, "messages[1] has 'content' of type int"),
    ("hello", "messages[1] is a str, not a message"),
])
def test_a_dict_that_is_no_message_is_a_clear_error_and_changes_nothing(memory, chat, bad, said):
    memory.set_messages("road", TURNS[:1])
    for call in (lambda: memory.set_messages("road", [TURNS[0], bad]),
                 lambda: memory.sync("road", [TURNS[0], bad]),
                 lambda: memory.recall("road", messages=[TURNS[0], bad])):
        with pytest.raises(curator.MessageError) as caught:
            call()
        assert said in str(caught.value) and '"role": "user"' in caught.value.hint
    assert memory.store.messages("road") == AS_MESSAGES[:1]


def test_create_chat_again_with_exist_ok(memory):
    first = memory.create_chat("notes", "default")
    with pytest.raises(curator.ChatExists):
        memory.create_chat("notes", "default")
    again = memory.create_chat("notes", "default", exist_ok=True)
    assert again.id == first.id and again.created_at == first.created_at
    with pytest.raises(curator.ChatExists, match="with schema 'default', not 'bme'"):
        memory.create_chat("notes", "bme", exist_ok=True)


def test_the_async_face_takes_the_same(tmp_path):
    async def run():
        async with curator.AsyncMemory(tmp_path / "data") as memory:
            await memory.create_chat("c", "default", exist_ok=True)
            await memory.create_chat("c", "default", exist_ok=True)
            await memory.set_messages("c", TURNS)
            return memory.store.messages("c")

    assert asyncio.run(run()) == AS_MESSAGES
