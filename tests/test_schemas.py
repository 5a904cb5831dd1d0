from __future__ import annotations

import pytest

from curator.schemas import SchemaError, dump_schema, load_preset, load_schema, parse_schema, preset_names


def test_presets_ship_as_data():
    assert preset_names() == ["bme", "default"]


def test_default_preset_types_and_attributes():
    schema = load_preset("default")
    assert list(schema.types) == ["character_sheet", "location_state", "event", "synopsis"]
    sheet, place, event, synopsis = (schema.types[t] for t in schema.types)
    assert not synopsis.extracted and synopsis.field("summary").required  # written by maintenance (ST-BME)
    assert sheet.identity == "entity" and sheet.primary_key == ("name",) and sheet.alias_fields == ("aliases",)
    assert set(sheet.field_names) == {"name", "aliases", "identity", "traits", "goal", "inventory",
                                      "language_sample", "addressing_user"}
    assert place.identity == "latest_only" and place.extract_every == 3
    assert event.identity == "event" and event.title_template == "Summary {n}"
    assert event.always_inject.enabled
    assert (event.compression.mode, event.compression.fan_in, event.compression.threshold,
            event.compression.keep_recent_leaves, event.compression.max_depth) == ("hierarchical", 3, 9, 6, 10)
    assert event.field("summary").required and event.field("summary").embedded
    assert schema.relation("hostile_to").symmetric


def test_bme_preset_types():
    schema = load_preset("bme")
    assert list(schema.types) == ["character", "event", "location", "rule", "thread", "synopsis", "reflection",
                                  "pov_memory"]
    comp = {name: spec.compression for name, spec in schema.types.items() if spec.compression.mode != "none"}
    assert {n: (c.threshold, c.fan_in, c.max_depth, c.keep_recent_leaves) for n, c in comp.items()} == {
        "event": (9, 3, 10, 6), "thread": (6, 3, 5, 3), "reflection": (6, 3, 3, 3), "pov_memory": (8, 3, 4, 4)}
    injected = {n for n, s in schema.types.items() if s.always_inject.enabled}
    assert injected == {"event", "rule", "thread", "synopsis"}
    assert schema.types["thread"].always_inject.max_floor_distance == 200


@pytest.mark.parametrize("name", ["default", "bme"])
def test_dump_and_reparse_gives_the_same_schema(name):
    schema = load_preset(name)
    assert parse_schema(dump_schema(schema, "yaml")) == schema
    assert parse_schema(dump_schema(schema, "json")) == schema


def test_user_schema_file_with_custom_type(tmp_path):
    path = tmp_path / "fantasy.yaml"
    path.write_text("""
name: fantasy
relations: [{name: related}]
types:
  magic_system:
    identity: entity
    primary_key: [name]
    fields:
      - {name: name, required: true, embedded: true}
      - {name: source}
      - {name: restrictions, hint: "what it costs"}
""", encoding="utf-8")
    schema = load_schema(path)
    assert schema.types["magic_system"].field("restrictions").hint == "what it costs"


def test_every_error_is_reported_with_file_type_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("""
name: bad
types:
  faction:
    identity: entity
    primary_key: [leader]
    fields:
      - {name: name, required: yes}
      - {name: goals, colour: red}
  event:
    identity: sometimes
    extract_every: 0
    fields:
      - {name: Summary}
""", encoding="utf-8")
    with pytest.raises(SchemaError) as info:
        load_schema(path)
    text = str(info.value)
    issues = info.value.issues
    assert all(i.source == str(path) for i in issues)
    assert any(i.type == "faction" and i.field == "goals.colour" for i in issues), text
    assert any(i.type == "event" and i.field == "identity" for i in issues), text
    assert any(i.type == "event" and i.field == "extract_every" for i in issues), text
    assert any(i.type == "event" and i.field and "Summary" in i.field or "Summary" in i.message for i in issues), text
    assert len(issues) >= 4


def test_consistency_errors_name_the_type(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntypes:\n  faction:\n    primary_key: [leader]\n    fields: [{name: name}]\n")
    with pytest.raises(SchemaError) as info:
        load_schema(path)
    [issue] = info.value.issues
    assert issue.type == "faction" and "leader" in issue.message


@pytest.mark.parametrize("content, message", [
    (b"name: [unclosed", "not valid YAML (line"),
    (b"\xff\xfe\x00bad", "not UTF-8"),
    (b"- just a list", "mapping"),
])
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    with pytest.raises(SchemaError, match=r"(?s)" + message.replace("(", r"\(")):
        load_schema(path)


def test_missing_file_or_preset():
    with pytest.raises(SchemaError, match="no such file"):
        load_schema("/nonexistent/schema.yaml")
    with pytest.raises(SchemaError, match="no such preset"):
        load_preset("nope")
