"""A person or place whose node is its name alone matches any question that names it, by the name alone: it must not
take the events' places in either mode, and must still come first when the question is about it (issue 31)."""

from __future__ import annotations

import pytest

SCHEMA = """
name: plain
relations: [{name: involved_in}]
types:
  person: {identity: entity, primary_key: [name], title_field: name,
           fields: [{name: name, required: true, embedded: true}, {name: role, embedded: true}]}
  event: {identity: event, bucket: episodic, fields: [{name: summary, required: true, embedded: true}]}
"""


@pytest.fixture
def plain(memory, tmp_path):
    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA, encoding="utf-8")
    memory.create_chat("plain", schema)
    events = ["Caroline painted a sunrise over the lake.", "Caroline went to a support group meeting.",
              "Melanie ran a charity race for mental health.", "Melanie took her kids camping in the forest.",
              "Caroline adopted a puppy named Oscar.", "They talked about the weather."]
    ops = [{"op": "create_node", "id": "p_caroline", "type": "person", "fields": {"name": "Caroline"}},
           {"op": "create_node", "id": "p_melanie", "type": "person", "fields": {"name": "Melanie"}},
           {"op": "create_node", "id": "p_oscar", "type": "person",
            "fields": {"name": "Oscar", "role": "a puppy who chews shoes"}}]
    for i, text in enumerate(events):
        ops.append(
            {"op": "create_node", "id": f"e{i}", "type": "event", "title": f"event {i}", "fields": {"summary": text}}
        )
        who = "p_caroline" if "Caroline" in text else "p_melanie"
        ops.append({"op": "link", "source": who, "target": f"e{i}", "relation": "involved_in"})
    memory.commit("plain", ops, 0)
    return "plain"


@pytest.mark.parametrize("mode", ["hybrid", "rag"])
def test_a_bare_name_does_not_take_an_events_place(memory, plain, mode):
    injection = memory.recall(plain, "What did Caroline paint?", mode=mode, max_results=3, expand=False)
    top = [c.node.id for c in injection.recalled]
    assert top[0] == "e0" and "p_caroline" not in top


@pytest.mark.parametrize("mode", ["hybrid", "rag"])
def test_a_question_about_the_entity_gets_it_first(memory, plain, mode):
    injection = memory.recall(plain, "Who is Caroline?", mode=mode, max_results=3, expand=False)
    assert injection.recalled[0].node.id == "p_caroline"


def test_an_entity_with_more_than_its_name_competes_on_its_text(memory, plain):
    injection = memory.recall(plain, "Which puppy chews shoes?", max_results=3, expand=False)
    assert "p_oscar" in [c.node.id for c in injection.recalled][:2]


def test_an_entity_added_after_the_first_recall_is_known_to_the_updated_pool(memory, plain):
    """The pool keeps its entity candidates as commits come (`recall/pool.py`, updated from the last pool): a person
    added later is placed after the events too, and comes first when the question is about it."""
    memory.recall(plain, "What did Caroline paint?", max_results=3, expand=False)  # the pool is built
    memory.commit("plain", [{"op": "create_node", "id": "p_sunny", "type": "person", "fields": {"name": "Sunny"}},
                            {"op": "create_node", "id": "e9", "type": "event", "title": "event 9",
                             "fields": {"summary": "Sunny painted the old barn red."}},
                            {"op": "link", "source": "p_sunny", "target": "e9", "relation": "involved_in"}], 1)
    top = [c.node.id for c in memory.recall(plain, "What did Sunny paint?", max_results=3, expand=False).recalled]
    assert top[0] == "e9" and "p_sunny" not in top
    assert memory.recall(plain, "Who is Sunny?", max_results=3, expand=False).recalled[0].node.id == "p_sunny"
