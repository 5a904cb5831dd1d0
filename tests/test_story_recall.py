"""Recall's story features: what the speaker knows or witnessed, points of view (own, others' as rumours, mistaken
beliefs labelled as beliefs), current and adjacent regions, and story-time queries, each a weight in the one
fused score with its reason; the injection grouped by how the speaker holds each memory."""

from __future__ import annotations

import pytest

import curator
from curator.recall.story import adjacent
from curator.schemas import parse_schema
from curator.store.messages import Message

SCHEMA = """
name: tale
relations: [{name: involved_in}, {name: contradicts}, {name: knows, internal: true}]
types:
  character:
    identity: entity
    primary_key: [name]
    title_field: name
    fields: [{name: name, required: true, embedded: true}]
  event:
    identity: event
    story: true
    bucket: episodic
    fields: [{name: summary, required: true, embedded: true}]
  pov_memory:
    identity: event
    story: true
    bucket: reflection
    fields: [{name: belief, required: true, embedded: true}]
"""


def ev(node_id, summary, floor, **extra):
    return {"op": "create_node", "id": node_id, "type": "event", "title": node_id, "fields": {"summary": summary},
            "floor_from": floor, "floor_to": floor, **extra}


@pytest.fixture
def tale(memory):
    memory.create_chat("tale", parse_schema(SCHEMA))
    memory.set_messages("tale", [Message("user" if i % 2 == 0 else "assistant", "You" if i % 2 == 0 else "Narrator",
                                         f"turn {i}") for i in range(12)])
    ops = [{"op": "create_node", "id": f"c_{n.lower()}", "type": "character", "fields": {"name": n}}
           for n in ("Alba", "Bram", "Cole")]
    ops += [
        ev("e_secret", "Alba tells Bram that the ledger in the vault was forged by the mayor.", 2,
           scope={"region": "Vale > Millbrook > Vault"}),
        {"op": "link", "source": "c_alba", "target": "e_secret", "relation": "knows"},
        {"op": "link", "source": "c_bram", "target": "e_secret", "relation": "knows"},
        ev("e_fire", "The granary burns down and the miller's cart is lost in the flames.", 4,
           story_time={"label": "the night of the fire", "segment": "0000-00-00.0003"}),
        ev("e_market", "Cole sells apples at the market and talks about the ledger.", 6,
           scope={"region": "Vale > Millbrook > Market"}),
        ev("e_far", "Traders far away in the capital discuss the ledger prices.", 7,
           scope={"region": "Capital > Docks"}),
        {"op": "create_node", "id": "p_cole", "type": "pov_memory", "title": "p_cole", "floor_from": 8, "floor_to": 8,
         "fields": {"belief": "Cole believes the ledger was forged by Bram."},
         "scope": {"layer": "pov", "owner": "Cole"}},
        {"op": "link", "source": "p_cole", "target": "e_secret", "relation": "contradicts"},
        {"op": "create_node", "id": "p_bram", "type": "pov_memory", "title": "p_bram", "floor_from": 9, "floor_to": 9,
         "fields": {"belief": "Bram thinks the ledger story will ruin the mayor."},
         "scope": {"layer": "pov", "owner": "Bram"}},
        ev("e_now", "Everyone gathers in the market square at noon.", 10,
           scope={"region": "Vale > Millbrook > Market"}),
    ]
    memory.commit("tale", ops, 10, "test")
    return memory


def section(text: str, heading: str) -> str:
    """The lines under the section headings that contain `heading`."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = heading in line
        elif inside:
            out.append(line)
    return "\n".join(out)


def recalled(injection) -> dict:
    return {c.node.id: c for c in injection.recalled}


def test_a_secret_is_not_in_the_known_section_of_one_who_was_not_told(tale):
    for speaker, knows in (("Cole", False), ("Bram", True)):
        injection = tale.recall("tale", "who forged the ledger?", speaker=speaker)
        chosen = recalled(injection)
        assert "e_secret" in chosen
        known = section(injection.text, "(known to")
        assert ("forged by the mayor" in known) is knows
        if not knows:
            assert "forged by the mayor" in section(injection.text, f"not known to {speaker}")
            assert "not known to Cole" in chosen["e_secret"].reason and chosen["e_secret"].view == "unknown"
        else:
            assert "Bram knows it" in chosen["e_secret"].reason


def test_points_of_view_own_mistaken_and_rumour(tale):
    as_cole = tale.recall("tale", "who forged the ledger?", speaker="Cole")
    assert recalled(as_cole)["p_cole"].view == "mistaken"
    assert "- [Cole's belief, not fact] p_cole" in section(as_cole.text, "what Cole believes")
    assert "forged by Bram" not in section(as_cole.text, "(known to")
    as_alba = tale.recall("tale", "who forged the ledger?", speaker="Alba")
    assert "forged by Bram" in section(as_alba.text, "rumours")
    assert recalled(as_alba)["p_cole"].score < recalled(as_cole)["p_cole"].score  # others' view scores lower


def test_the_current_region_scores_higher_than_a_far_one(tale):
    injection = tale.recall("tale", "the ledger", speaker="Alba")
    chosen = recalled(injection)
    assert "current region" in chosen["e_market"].reason
    assert "region" not in chosen["e_far"].reason
    assert adjacent("Vale > Millbrook > Vault", "Vale > Millbrook > Market")
    assert not adjacent("Capital > Docks", "Vale > Millbrook > Market")


def test_a_story_time_query_finds_its_scene(tale):
    injection = tale.recall("tale", "what happened the night of the fire?", speaker="Alba", max_results=3)
    chosen = recalled(injection)
    assert "e_fire" in chosen and "story time named" in chosen["e_fire"].reason
    plain = tale.recall("tale", "what happened that evening?", speaker="Alba", max_results=3)
    assert all("story time" not in c.reason for c in plain.recalled)


def test_the_speaker_defaults_to_the_newest_assistant_name(tale):
    tale.set_messages("tale", [Message("user", "You", "hi"), Message("assistant", "Cole", "Hello.")])
    injection = tale.recall("tale", "who forged the ledger?")
    assert injection.speaker == "Cole" and recalled(injection)["e_secret"].view == "unknown"


def test_a_chat_without_points_of_view_renders_as_before(chat, memory):
    injection = memory.recall(chat, "the salve", speaker="Eileen")
    assert injection.speaker is None and all(c.view == "" for c in injection.persistent + injection.recalled)
    assert "known to" not in injection.text



def test_the_http_recall_takes_the_speaker(tale):
    import httpx2

    from curator.testing.scripted import scripted_model
    from curator.service.server import ServiceConfig, create_app
    from curator.service.server.runner import ThreadedServer

    app = create_app(tale, ServiceConfig(model=scripted_model()))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1", timeout=30,
                                                     headers={"x-curator-client": "test"}) as client:
        views = {}
        for speaker in ("Cole", "Bram"):
            answer = client.post("/chats/tale/recall", json={"query": "who forged the ledger?", "speaker": speaker})
            assert answer.status_code == 200
            views[speaker] = {n["id"]: n.get("view") for n in answer.json()["blocks"]["recalled"]}
        assert views["Cole"]["e_secret"] == "unknown" and views["Bram"]["e_secret"] == "known"
        assert client.post("/chats/tale/recall", json={"query": "x", "speaker": "y" * 201}).status_code in (400, 422)


@pytest.fixture
def group(memory):
    """A group chat: Mira and Bram take turns replying; each did something alone the other must not learn."""
    memory.create_chat("group", parse_schema(SCHEMA))
    memory.set_messages("group", [Message("user", "Wren", f"turn {i}") if i % 2 == 0 else
                                  Message("assistant", ("Mira", "Bram")[(i // 2) % 2], f"turn {i}") for i in range(8)])
    ops = [{"op": "create_node", "id": f"c_{n.lower()}", "type": "character", "fields": {"name": n}}
           for n in ("Mira", "Bram")]
    ops += [ev("e_mira", "Mira hides the stolen crown behind the cider barrels.", 1),
            {"op": "link", "source": "c_mira", "target": "e_mira", "relation": "knows"},
            ev("e_bram", "Bram pours the vial into the well before dawn.", 3),
            {"op": "link", "source": "c_bram", "target": "e_bram", "relation": "knows"},
            ev("e_inn", "Mira and Bram share bread at the inn.", 5)]
    memory.commit("group", ops, anchor_floor=5)
    return memory


def test_in_a_group_chat_each_member_sees_only_what_they_know(group):
    """Issue 34: the speaker is the member about to speak (never the newest reply's, another member's); what the
    speaker does not know is left out of their prompt in a group chat (`recall.knowledge` auto), labelled in a
    one-to-one chat or with `label`; with nobody named, a group chat's recall fails closed."""
    ask = "What about the crown and the well?"
    as_bram = group.recall("group", ask, speaker="Bram")
    assert "stolen crown" not in as_bram.text and "pours the vial" in as_bram.text
    assert {"id": "e_mira", "type": "event", "title": "e_mira", "why": "knowledge", "block": "recalled"} in \
        as_bram.left_out
    assert "stolen crown" in group.recall("group", ask, speaker="Mira").text
    nobody = group.recall("group", ask)  # the newest reply is Bram's: not taken for the next speaker
    assert "stolen crown" not in nobody.text and "pours the vial" not in nobody.text and "share bread" in nobody.text
    labelled = group.recall("group", ask, speaker="Bram", knowledge="label")
    assert "not known to Bram (they must not act on it)" in labelled.text and "stolen crown" in labelled.text


def test_the_proxy_takes_the_speaker_from_the_group_nudge_or_a_header():
    from curator.service.proxy_match import next_speaker

    group_request = [{"role": "system", "content": "A tavern scene."}, {"role": "user", "content": "Hello both."},
                     {"role": "system", "content": "[Write the next reply only as Bram.]"}]
    assert next_speaker(group_request) == "Bram"
    assert next_speaker(group_request, "M%C3%ADra") == "Míra"  # X-Curator-Speaker, percent-encoded, wins
    assert next_speaker([{"role": "user", "content": "Hello."}]) is None


def test_a_belief_against_a_plain_event_is_mistaken_followed_and_read_afresh(tale):
    """The event contradicted has no point of view, region or story time (so it is none of the story's rows): the
    belief is mistaken all the same, when the link comes in a later commit and when a new process reads the story."""
    tale.commit("tale", [ev("e_wheel", "The flood broke the mill wheel in the night.", 9),
                         {"op": "create_node", "id": "p_wheel", "type": "pov_memory", "title": "p_wheel",
                          "floor_from": 9, "floor_to": 9, "fields": {"belief": "Bram believes Cole broke the wheel."},
                          "scope": {"layer": "pov", "owner": "Bram"}}], 9, "test")
    question = "who broke the mill wheel?"
    assert recalled(tale.recall("tale", question, speaker="Bram"))["p_wheel"].view == "own"
    tale.commit("tale", [{"op": "link", "source": "p_wheel", "target": "e_wheel", "relation": "contradicts"}], 10,
                "test")
    assert recalled(tale.recall("tale", question, speaker="Bram"))["p_wheel"].view == "mistaken"
    with curator.open(tale.data_dir) as fresh:
        assert recalled(fresh.recall("tale", question, speaker="Bram"))["p_wheel"].view == "mistaken"


def test_a_closed_stores_story_is_never_given_to_the_next_store(tmp_path):
    """Stores opened one after another (a test suite, a tool that opens a data directory per call): a new
    connection may take a closed one's `id()`, and a chat of the same id at the same version must still be read
    from its own store (the story's caches were keyed by that id: a point of view came out as another store's)."""
    owners = ("Bram", "Cole") * 4
    for i, owner in enumerate(owners):
        with curator.open(tmp_path / f"data{i}") as memory:
            memory.create_chat("tale", parse_schema(SCHEMA))
            memory.commit("tale", [ev("e_wheel", "The flood broke the mill wheel in the night.", 0),
                                   {"op": "create_node", "id": "p_wheel", "type": "pov_memory", "title": "p_wheel",
                                    "floor_from": 0, "floor_to": 0,
                                    "fields": {"belief": f"{owner} believes Cole broke the wheel."},
                                    "scope": {"layer": "pov", "owner": owner}}], 0, "test")
            chosen = recalled(memory.recall("tale", "who broke the mill wheel?", speaker="Bram"))
            assert chosen["p_wheel"].view == ("own" if owner == "Bram" else "rumour"), f"store {i}"
