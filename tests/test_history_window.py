"""The proxy's raw-history window: only the last K floors plus the memory go upstream (off by default), system
messages stay, and the tokens saved are reported per request."""

from __future__ import annotations

import pytest

from curator.errors import CuratorError
from curator.llm.tokens import count_tokens
from curator.service.history_window import history_floors, keep_recent_floors
from test_proxy import converse, proxy  # noqa: F401 - the fixture

MESSAGES = [{"role": "system", "content": "card"}, {"role": "user", "content": "one two"},
            {"role": "assistant", "content": "three"}, {"role": "system", "content": "author's note"},
            {"role": "user", "content": "four"}, {"role": "assistant", "content": [{"type": "text", "text": "five"}]}]


def test_keep_recent_floors_keeps_system_messages_and_the_tail():
    assert keep_recent_floors(MESSAGES, 0) == (MESSAGES, 0, 0)
    assert keep_recent_floors(MESSAGES, 10) == (MESSAGES, 0, 0)
    kept, dropped, saved = keep_recent_floors(MESSAGES, 2)
    assert [m["content"] for m in kept][:2] == ["card", "author's note"] and kept[2:] == MESSAGES[4:]
    assert dropped == 2 and saved == count_tokens("one two") + count_tokens("three")
    assert history_floors(0, None) == 0 and history_floors(4, "") == 4 and history_floors(4, "0") == 0
    for bad in ("two", "-1"):
        with pytest.raises(CuratorError):
            history_floors(0, bad)


def test_the_proxy_forwards_the_window_and_reports_the_saving(proxy):  # noqa: F811
    client, upstream, memory, server, _calls = proxy
    messages = converse(client, server, 4)
    assert len(upstream.requests[-1]["messages"]) == len(messages) - 1 + 1  # off by default: everything, + memory
    messages.append({"role": "user", "content": "And then?"})
    raw = client.chat.completions.with_raw_response.create(
        model="story", messages=messages, user="c", extra_headers={"X-Curator-History-Floors": "3"})
    sent = upstream.requests[-1]["messages"]
    chat = [m for m in sent if m["role"] in ("user", "assistant")]
    assert chat == messages[-3:]  # the last three floors, nothing older
    assert sent[0] == messages[0] and any(m["role"] == "system" and "Memory" in m["content"] for m in sent)
    dropped = messages[1:-3]
    assert int(raw.headers["x-curator-history-tokens-saved"]) == sum(count_tokens(m["content"]) for m in dropped) > 0
    assert len(memory.store.messages("c")) >= len(messages) - 1  # the whole chat is still synced to memory
    bad = client.chat.completions.with_raw_response.create
    with pytest.raises(Exception) as caught:
        bad(model="story", messages=messages, user="c", extra_headers={"X-Curator-History-Floors": "many"})
    assert getattr(caught.value, "status_code", 0) == 400
