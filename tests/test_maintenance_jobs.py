"""Summaries, forgetting and reflection with scripted models; the scheduled run after extraction steps."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from maintenance_helpers import Scripted, chat_messages, synopsis_answer
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from curator.llm.access import Models
from curator.maintenance.forgetting import retention
from curator.maintenance.scheduling import due_jobs
from curator.settings import Settings


def extraction_step(memory, chat, seq, floor):
    memory.commit(chat, [{"op": "create_node", "id": f"e{seq}", "type": "event", "title": f"Summary {seq}",
                          "fields": {"summary": f"At floor {floor} the party moves on (step {seq})."}}],
                  anchor_floor=floor, origin="extract", note=f"seq {seq}")


def with_maintenance(memory, **sections):
    cfg = memory.settings.maintenance
    update = {name: getattr(cfg, name).model_copy(update=values) for name, values in sections.items()}
    memory.settings = memory.settings.model_copy(update={"maintenance": cfg.model_copy(update=update)})


@pytest.fixture
def bme(memory):
    memory.create_chat("saga", "bme")
    memory.set_messages("saga", chat_messages(30))
    return memory


# ---- summaries ---------------------------------------------------------------------------------------------
def test_small_summary_every_three_extractions(bme):
    script = Scripted(synopsis_answer)
    maintainer = bme.maintainer(script.model)
    import asyncio

    extraction_step(bme, "saga", 1, 1)
    extraction_step(bme, "saga", 2, 3)
    early = asyncio.run(maintainer.summarize("saga", force=False, anchor=3))
    assert early.skipped and early.details["pending_extractions"] == 2 and script.calls == 0
    extraction_step(bme, "saga", 3, 5)
    report = asyncio.run(maintainer.summarize("saga", force=False, anchor=5))
    [change] = report.changes
    node = bme.graph("saga").get(change["node"])
    assert node.title == "Synopsis 1-3" and node.level == 0 and (node.floor_from, node.floor_to) == (1, 5)
    assert 80 <= len(node.fields["summary"]) <= 220
    assert "At floor 3 the party moves on" in script.prompts[0]
    assert bme.store.commits("saga")[-1].anchor_floor == 5 and bme.store.commits("saga")[-1].origin == "maintenance"
    # nothing pending any more
    assert asyncio.run(maintainer.summarize("saga", force=False, anchor=5)).skipped


def test_synopsis_length_is_checked(bme):
    extraction_step(bme, "saga", 1, 1)
    answers = [{"text": "Too short."}, {"text": "The party crossed the bridge at dusk, paid Brannoch's toll with "
                                                "Rowan's last coin, and Eileen swore to repay the debt."}]
    script = Scripted(lambda prompt, schema: answers.pop(0))
    report = bme.summarize("saga", model=script.model)
    assert report.ok and script.calls == 2 and "must have 80-220" in script.prompts[1]


def test_rollup_folds_the_oldest_synopses_until_nothing_folds(bme):
    import asyncio

    maintainer = bme.maintainer(Scripted(synopsis_answer).model)
    for seq in range(1, 13):
        extraction_step(bme, "saga", seq, 2 * seq - 1)
        asyncio.run(maintainer.summarize("saga", force=False, anchor=2 * seq - 1))
    graph = bme.graph("saga")
    # four small summaries; the fourth makes level 0 hold 4 > 3: the oldest three fold into one at level 1
    assert len(graph.nodes(type="synopsis", level=0)) == 1
    [rollup] = graph.nodes(type="synopsis", level=1)
    assert rollup.title == "Synopsis 1-9" and 120 <= len(rollup.fields["summary"]) <= 260
    folded = graph.nodes(type="synopsis", level=0, archived=True)
    assert len(folded) == 3 and all(n.parent == rollup.id for n in folded)
    before = None
    commits = bme.store.commits("saga")
    assert commits[-1].note.startswith("summary rollup")
    # rollback below the roll-up's floor restores the graph as it was before it
    bme.rollback("saga", commits[-1].anchor_floor)
    assert commits[-1].anchor_floor == 23
    assert len(bme.graph("saga").nodes(type="synopsis", level=0)) == 3 and before is None
    assert not bme.graph("saga").nodes(type="synopsis", level=1)


def test_summaries_need_a_synopsis_type(memory):
    memory.create_chat("plain", "default", settings={"maintenance": {"summaries": {"type": "chronicle"}}})
    report = memory.summarize("plain", model=Scripted(synopsis_answer).model)
    assert "no 'chronicle' type" in report.skipped


# ---- forgetting --------------------------------------------------------------------------------------------
def test_retention_formula_and_missing_access_count():
    assert retention(10, 0, 0) == pytest.approx(1.0)
    assert retention(5, 99, 0) == pytest.approx(0.5 / 3)  # log10(100) = 2
    assert retention(5, 48, 4) == pytest.approx(0.5 / (1 + math.log10(49)) * (1 + 4 / 2))
    value = retention(3, 10, None)  # the original computed NaN here and so never forgot the node
    assert not math.isnan(value) and value == retention(3, 10, 0)


def forget_fixture(memory):
    memory.create_chat("old", "bme")
    memory.set_messages("old", chat_messages(100))
    memory.commit("old", [
        {"op": "create_node", "id": "dull", "type": "event", "title": "e", "fields": {"summary": "a walk"},
         "importance": 3, "floor_from": 1, "floor_to": 1, "created_at": "2020-01-01T00:00:00+00:00"},
        {"op": "create_node", "id": "vital", "type": "event", "title": "v", "fields": {"summary": "a death"},
         "importance": 9, "floor_from": 1, "floor_to": 1, "created_at": "2020-01-01T00:00:00+00:00"},
        {"op": "create_node", "id": "law", "type": "rule", "fields": {"name": "law", "constraint": "no magic"},
         "importance": 1, "floor_from": 1, "floor_to": 1, "created_at": "2020-01-01T00:00:00+00:00"},
        {"op": "create_node", "id": "fresh", "type": "event", "title": "f", "fields": {"summary": "just now"},
         "importance": 1, "floor_from": 190, "floor_to": 190},
        {"op": "create_node", "id": "loved", "type": "event", "title": "l", "fields": {"summary": "often recalled"},
         "importance": 4, "access_count": 50000, "floor_from": 1, "floor_to": 1,
         "created_at": "2020-01-01T00:00:00+00:00"},
    ], anchor_floor=190, origin="test")


def test_forget_dry_run_lists_and_the_real_run_archives(memory):
    forget_fixture(memory)
    before = memory.graph("old").snapshot()
    dry = memory.forget("old", dry_run=True)
    assert dry.dry_run and [c["node"] for c in dry.changes] == ["dull"] and dry.commits == []
    assert memory.graph("old").snapshot() == before
    real = memory.forget("old")
    assert [c["node"] for c in real.changes] == ["dull"] and len(real.commits) == 1
    assert memory.graph("old").get("dull").archived  # archived, never deleted
    assert not memory.graph("old").get("vital").archived and not memory.graph("old").get("law").archived
    assert real.usage.calls == 0
    memory.rollback("old", 199)
    assert memory.graph("old").snapshot() == before


def test_forget_can_measure_age_in_floors(memory):
    forget_fixture(memory)
    with_maintenance(memory, forgetting={"age": "floors", "floors_per_hour": 1000.0})
    # 198 floors at 1000 floors an hour is 0.2 h: everything is younger than an hour, nothing goes
    assert memory.forget("old", dry_run=True).changes == []
    with_maintenance(memory, forgetting={"age": "floors", "floors_per_hour": 1.0})
    assert {c["node"] for c in memory.forget("old", dry_run=True).changes} == {"dull", "fresh"}


def test_schedule_is_on_by_default_and_forgetting_and_reflection_are_off():
    assert due_jobs(Settings.model_validate({"maintenance": {"auto": False}}), 10) == []
    scheduled = Settings()  # the ST-BME defaults: consolidation and small synopses every step, compression every 10
    assert due_jobs(scheduled, 10) == ["consolidate", "summarize", "compact"]
    assert due_jobs(scheduled, 7) == ["consolidate", "summarize"]
    everything = Settings.model_validate({"maintenance": {"auto": True, "forgetting": {"enabled": True},
                                                          "reflection": {"enabled": True, "every": 5}}})
    assert due_jobs(everything, 10) == ["consolidate", "summarize", "compact", "forget", "reflect"]


# ---- reflection --------------------------------------------------------------------------------------------
def test_reflection_links_its_evidence(bme):
    for seq in range(1, 5):
        extraction_step(bme, "saga", seq, 2 * seq - 1)
    answers = [{"write": True, "insight": "They always talk at sunset.", "evidence": ["e1", "nope"]},
               {"write": True, "insight": "They always talk at sunset.", "basis": "e1, e3", "evidence": ["e1", "e3"]}]
    script = Scripted(lambda prompt, schema: answers.pop(0))
    report = bme.reflect("saga", model=script.model)
    assert report.ok and script.calls == 2 and "unknown: nope" in script.prompts[1]
    [change] = report.changes
    graph = bme.graph("saga")
    node = graph.get(change["node"])
    assert node.type == "reflection" and node.fields["insight"] == "They always talk at sunset."
    assert sorted(e.source for e in graph.edges(node.id, relation="evidence")) == ["e1", "e3"]
    assert (node.floor_from, node.floor_to) == (1, 5)


def test_reflection_may_decline(bme):
    extraction_step(bme, "saga", 1, 1)
    extraction_step(bme, "saga", 2, 3)
    report = bme.reflect("saga", model=Scripted(lambda p, s: {"write": False}).model)
    assert report.skipped == "the model saw no new long-term pattern" and report.commits == []


# ---- scheduling after extraction ----------------------------------------------------------------------------
def extraction_model():
    def answer(messages, info):
        prompt = messages[0].parts[-1].content
        floor = prompt.split("## Newest reply")[1].split("(floor ", 1)[1].split(")", 1)[0]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {
            "event": [{"summary": f"what happened at floor {floor}"}]})])

    return FunctionModel(answer, model_name="scripted-extract")


def test_ingest_runs_scheduled_maintenance_anchored_at_each_step(memory, tmp_path):
    from curator.paths import example_file

    memory.create_chat("road", "bme", settings={"maintenance": {
        "auto": True,
        "consolidation": {"enabled": False},
        "compression": {"every": 4},
        "summaries": {"small_every": 3}}})
    answers = []

    def maintain(prompt, schema):
        answers.append(prompt)
        if "Fold these" in prompt:
            from maintenance_helpers import fold_answer
            return fold_answer(prompt, schema)
        return synopsis_answer(prompt, schema)

    report = memory.ingest("road", example_file("lantern_road.jsonl"), model=extraction_model(),
                           models=Models(maintain=Scripted(maintain).model), limit=16)
    assert report.failed is None and len(report.results) == 16
    commits = memory.store.commits("road")
    maintenance = [c for c in commits if c.origin == "maintenance"]
    extract_floors = [c.anchor_floor for c in commits if c.origin == "extract"]
    assert maintenance and all(c.anchor_floor in extract_floors for c in maintenance)
    small = [c for c in maintenance if c.note.startswith("small summary")]
    assert len(small) == 5  # after steps 3, 6, 9, 12, 15
    assert any(c.note.startswith("compress event") for c in maintenance)
    ran = [m for m in report.maintenance if not m.skipped]
    assert report.usage().calls == 16 + sum(m.usage.calls for m in ran)
    assert report.to_dict()["maintenance"]
    # A rollback to an early floor undoes the maintenance anchored after it, exactly.
    floor = extract_floors[4]
    memory.rollback("road", floor)
    assert all(c.anchor_floor < floor for c in memory.store.commits("road"))
    assert len(memory.graph("road").nodes(type="synopsis", archived=None)) == 1


def test_an_explicit_extraction_model_alone_runs_no_maintenance(memory):
    from curator.paths import example_file

    report = memory.ingest("road", example_file("lantern_road.jsonl"), schema="bme", model=extraction_model(), limit=6)
    assert report.maintenance == [] and report.usage().calls == 6
    assert all(c.origin == "extract" for c in memory.store.commits("road"))


def test_forgetting_at_floor_age_never_touches_young_nodes(memory):
    forget_fixture(memory)
    memory.forget("old")
    assert not memory.graph("old").get("fresh").archived


def test_timestamps_from_the_future_count_as_young(memory):
    forget_fixture(memory)
    later = datetime.now(UTC) + timedelta(days=1)
    memory.commit("old", [{"op": "create_node", "id": "future", "type": "event", "title": "x",
                           "fields": {"summary": "x"}, "importance": 0, "created_at": later.isoformat()}],
                  anchor_floor=190, origin="test")
    assert "future" not in {c["node"] for c in memory.forget("old", dry_run=True).changes}
