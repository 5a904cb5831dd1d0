from __future__ import annotations

import pytest

import curator
from curator.schemas import load_preset


@pytest.fixture
def memory(tmp_path):
    with curator.open(tmp_path / "data") as mem:
        yield mem


@pytest.fixture
def chat(memory):
    """A chat on the default schema with two characters, a place and an event linked together."""
    memory.create_chat("road", "default")
    memory.commit("road", [
        {"op": "create_node", "id": "n_eileen", "type": "character_sheet",
         "fields": {"name": "Eileen", "aliases": "the healer, Eli", "identity": "travelling healer"}},
        {"op": "create_node", "id": "n_rowan", "type": "character_sheet", "fields": {"name": "Rowan"}},
        {"op": "create_node", "id": "n_bridge", "type": "location_state",
         "fields": {"name": "Brannoch's Bridge", "controller": "Captain Brannoch"}},
        {"op": "create_node", "id": "n_ev1", "type": "event", "title": "Summary 1",
         "fields": {"summary": "Rowan gives Eileen his last salve; she promises to repay him."}},
        {"op": "link", "source": "n_eileen", "target": "n_ev1", "relation": "involved_in"},
        {"op": "link", "source": "n_rowan", "target": "n_ev1", "relation": "involved_in"},
        {"op": "link", "source": "n_ev1", "target": "n_bridge", "relation": "occurred_at"},
    ], anchor_floor=3, origin="test")
    return "road"


@pytest.fixture(scope="session")
def default_schema():
    return load_preset("default")
