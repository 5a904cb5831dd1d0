"""Events scored by their source messages, dates named in a query, the light stemmer and name stripping."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator.cjk import has_cjk
from curator.dates import date_windows, day_of
from curator.recall import lexical
from curator.recall.lexical import tokenize
from curator.store.messages import Message
from curator.recall.scoring import strip_names

SCHEMA = """
name: small
relations: [{name: involved_in}]
types:
  event:
    identity: event
    fields:
      - {name: summary, required: true, embedded: true}
"""

TALK = [
    Message("user", "Rowan", "Where did you hide the harbour master's ledger?"),
    Message("assistant", "Eileen", "Under the loose plank in the chapel bell tower, wrapped in oilcloth."),
    Message("user", "Rowan", "Good. Let us eat something."),
    Message("assistant", "Eileen", "There is bread and cheese left from the market."),
]


def _chat(memory, tmp_path, with_messages=True):
    schema = tmp_path / "small.yaml"
    schema.write_text(SCHEMA, encoding="utf-8")
    memory.create_chat("c", schema)
    if with_messages:
        memory.set_messages("c", TALK)
    memory.commit("c", [
        {"op": "create_node", "id": "hid", "type": "event", "title": "Hidden",
         "fields": {"summary": "Eileen hid it where nobody looks."},
         "floor_from": 1, "floor_to": 1, "story_time": {"label": "evening of 3 March, 1893"}},
        {"op": "create_node", "id": "ate", "type": "event", "title": "Supper",
         "fields": {"summary": "They shared a simple meal."},
         "floor_from": 3, "floor_to": 3, "story_time": {"label": "night of 9 March, 1893"}},
    ], 3, "test")
    return "c"


def test_an_event_is_found_through_the_messages_it_came_from(memory, tmp_path):
    chat = _chat(memory, tmp_path)
    report = memory.rebuild_vectors(chat)
    assert report.sources_embedded == 2 and memory.index.status(chat)["sources"] == 2
    first = memory.recall(chat, "where is the ledger of the harbour master?", max_results=1, expand=False)
    assert [c.node.id for c in first.recalled] == ["hid"]  # its own text never says "ledger"


def test_without_messages_there_is_no_source_to_score(memory, tmp_path):
    chat = _chat(memory, tmp_path, with_messages=False)
    assert memory.rebuild_vectors(chat).sources_embedded == 0
    assert memory.index.query_sources(chat, "ledger") == []


def test_an_edited_message_re_embeds_only_that_source(memory, tmp_path):
    chat = _chat(memory, tmp_path)
    memory.rebuild_vectors(chat)
    edited = list(TALK)
    edited[3] = Message("assistant", "Eileen", "Only a heel of rye bread; the ledger is safe, I checked.")
    memory.set_messages(chat, edited)
    report = memory.rebuild_vectors(chat)
    assert report.sources_embedded == 1 and report.embedded == 0  # the node texts did not change
    hits = dict(memory.index.query_sources(chat, "rye bread", k=2))
    assert max(hits, key=hits.get) == "ate"


def test_a_date_named_in_the_query_brings_that_day(memory, tmp_path):
    chat = _chat(memory, tmp_path)
    injection = memory.recall(chat, "What happened on 9 March, 1893?", max_results=1, expand=False)
    assert [c.node.id for c in injection.recalled] == ["ate"]


def test_dates():
    assert date_windows("on May 8, 2023 and in June 2023") == [
        (dt.date(2023, 5, 8), dt.date(2023, 5, 8)), (dt.date(2023, 6, 1), dt.date(2023, 6, 30))]
    assert day_of("1:56 pm on 8 May, 2023") == dt.date(2023, 5, 8)
    assert day_of("2023年5月8日") == dt.date(2023, 5, 8)
    assert day_of("Day 3, evening") is None and date_windows("last week") == []


def test_stemming_meets_wording_and_leaves_cjk_alone():
    assert tokenize("painted paintings paints") == ["paint"] * 3
    assert tokenize("stories studied kisses") == ["story", "study", "kiss"]
    assert tokenize("business was") == ["business"]
    assert tokenize("艾琳") == ["艾", "琳", "艾琳"]


def test_strip_names():
    assert strip_names("What did Caroline's friend Melanie paint?", ["Caroline", "Melanie"]) == "What did friend paint?"
    assert strip_names("艾琳欠了罗文什么", ["艾琳"]) == "欠了罗文什么"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=80))
def test_ascii_text_tokenizes_as_the_general_pattern_does(text):
    """ASCII text takes a pattern without the CJK classes (they cost ~2 ms each to compile); it must find the same
    words as the general one."""
    assert [m.group(0) for m in lexical._ASCII_TOKEN.finditer(text.casefold())] == \
        [m.group(0) for m in lexical._token().finditer(text.casefold())]


@pytest.mark.parametrize(("text", "cjk"), [("Mira", False), ("", False), ("café ü", False), ("艾琳", True),
                                            ("ひらがな", True), ("한국", True), ("Mira 小明", True), ("🙂", False)])
def test_has_cjk(text, cjk):
    assert has_cjk(text) is cjk
