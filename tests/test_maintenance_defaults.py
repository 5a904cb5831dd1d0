"""Maintenance on by default (issue 34): the scheduled passes run on the default preset with their calls capped per
step; a synopsis answer that stays out of bounds is clipped on the last try, a failing scheduled synopsis waits
(bounded retries); an extraction answer naming a type that its cadence skips keeps the valid part."""

from __future__ import annotations

import asyncio

from maintenance_helpers import Scripted, chat_messages
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from curator.extract.extractor import Extractor
from curator.maintenance.scheduling import after_extraction
from curator.store.messages import Message


def _step(memory, chat, seq, floor):
    memory.commit(chat, [{"op": "create_node", "id": f"e{seq}", "type": "event", "title": f"Summary {seq}",
                          "fields": {"summary": f"At floor {floor} the party moves on (step {seq})."}}],
                  anchor_floor=floor, origin="extract", note=f"seq {seq}")


def test_a_synopsis_out_of_bounds_is_clipped_on_the_last_try_and_a_failing_one_waits(memory):
    memory.create_chat("saga", "default")
    memory.set_messages("saga", chat_messages(40))
    long = "The party crossed the bridge at dusk. Rowan paid the toll. " * 8  # 480 characters: over 220
    script = Scripted(lambda prompt, schema: {"text": long})
    _step(memory, "saga", 1, 1)
    report = memory.summarize("saga", model=script.model)
    assert report.ok and script.calls == 3  # two corrections, then kept, clipped at a sentence within 80-220
    [node] = memory.graph("saga").nodes(type="synopsis")
    assert 80 <= len(node.fields["summary"]) <= 220 and node.fields["summary"].endswith("at dusk.")
    # a scheduled synopsis that fails (nothing to keep) waits: 3 extractions, then 6, not a try at every step
    failing = Scripted(lambda prompt, schema: {"text": ""})
    maintainer = memory.maintainer(failing.model)
    tried = []
    for seq in range(2, 30):
        _step(memory, "saga", seq, 2 * seq - 1)
        before = failing.calls
        report = asyncio.run(maintainer.summarize("saga", force=False, anchor=2 * seq - 1))
        if failing.calls > before:
            tried.append(seq)
            assert report.error and failing.calls - before == 3  # output_retries bounds each try
    assert tried == [4, 7, 13, 25]  # after a failure: 3 more extractions, then 6, then 12 (at most 30)
    assert "(4 in a row); the next try is after extraction 49" in report.skipped  # 24 more, at most 30


def test_the_scheduled_passes_share_a_cap_of_model_requests_per_step(memory):
    memory.create_chat("road", "default", settings={"maintenance": {"max_calls_per_step": 2}})
    memory.set_messages("road", chat_messages(6))
    for seq in (1, 2):
        _step(memory, "road", seq, 2 * seq - 1)
    memory.commit("road", [{"op": "create_node", "id": "e3", "type": "event", "title": "Summary 3",
                            "fields": {"summary": "The party crossed the bridge at dusk."}},
                           {"op": "create_node", "id": "c1", "type": "character_sheet", "fields": {"name": "Rowan"}}],
                  anchor_floor=5, origin="extract", note="seq 3")
    script = Scripted(lambda prompt, schema: (
        {"decisions": [{"node_id": i, "action": "keep"} for i in ("e3", "c1") if f"[{i}]" in prompt]}
        if "decisions" in schema["properties"] else {"text": "x"}))  # the synopsis answer is too short: retried
    result = type("Step", (), {"ok": True, "chat_id": "road", "floor": 5, "seq": 3,
                               "commit": memory.store.commits("road")[-1]})()
    reports = asyncio.run(after_extraction(memory.maintainer(script.model), result))
    by_op = {r.op: r for r in reports}
    assert by_op["consolidate"].ok and by_op["consolidate"].usage.calls == 1
    assert "max_calls_per_step) were used up" in by_op["summarize"].error  # one request left for it, and it needed more
    assert script.calls == 2 and sum(r.usage.calls for r in reports) == 2
    assert memory.usage("road")["usage"]["maintain"]["calls"] == 2  # in `curator usage`


def test_an_answer_naming_a_type_its_cadence_skips_keeps_the_valid_part(memory):
    memory.create_chat("road", "default")
    memory.set_messages("road", [Message("user", "Wren", "Where now?"),
                                 Message("assistant", "Narrator", "Eileen walks to the mill and rests.")])

    def answer(messages, info):  # seq 1: location_state (every 3rd step) is not active, yet the model writes it
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {
            "event": [{"ref": "e", "summary": "Eileen walks to the mill."}],
            "character_sheet": [{"ref": "c", "name": "Eileen"}],
            "location_state": [{"ref": "m", "name": "the mill", "danger": "none"}],
            "links": [{"source": "c", "relation": "involved_in", "target": "e"},
                      {"source": "e", "relation": "occurred_at", "target": "m"}]})])

    calls = []
    model = FunctionModel(lambda m, i: calls.append(1) or answer(m, i))
    result = asyncio.run(Extractor(memory.store, memory.settings, model=model).extract("road", 1))
    assert result.ok and len(calls) == 1 and result.set_aside == {"location_state": 1}
    graph = memory.graph("road")
    assert {n.type for n in graph.nodes()} == {"event", "character_sheet"}
    assert [e.relation for e in graph.edges()] == ["involved_in"]  # the link to the set-aside place went with it
    assert "set aside (not active this step): location_state (1 item)" in memory.store.commits("road")[-1].note
