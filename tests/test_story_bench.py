"""Smoke tests of the story benchmarks (bench/pov_recall.py, bench/extract_prompt_size.py): they run with --quick
and report what they promise; the POV bench's goal (no secret in a speaker's "known" section) is checked too,
since it holds by construction of the views, not by tuning."""

from __future__ import annotations

from test_bench_smoke import RESULT_KEYS, run_quick

RESULT_KEYS["pov_recall"] = {"off", "tuned", "shipped", "region_grid"}
RESULT_KEYS["extract_prompt_size"] = {"types", "system_prompt"}


def test_pov_recall_quick():
    results = run_quick("pov_recall")["results"]
    for weights in ("off", "tuned", "shipped"):
        for story in ("tune", "held_out"):
            row = results[weights][story]
            assert row["injections"] > 0 and row["leaks"] == 0 and 0 <= row["kept"] <= 1
            place = row["region"]  # the walk's place questions ("Is there a well here?")
            assert place["questions"] > 0 and 0 <= place["kept"] <= 1
            assert set(place["by_kind"]) <= {"here", "nearby", "named"}
    grid = results["region_grid"]  # region weights off and a grid, on the tuning story
    assert any(g["REGION_BONUS"] == 0 and g["ADJACENT_BONUS"] == 0 for g in grid)
    assert all(g["tune_secrets"]["leaks"] == 0 and 0 <= g["tune"]["kept"] <= 1 for g in grid)


def test_extract_prompt_size_quick():
    results = run_quick("extract_prompt_size")["results"]
    rows = {(r["preset"], r["type"]): r for r in results["types"]}
    assert rows[("default", "event")]["after"]["prompt"] > rows[("default", "event")]["before"]["prompt"]
    assert rows[("default", "character_sheet")]["after"] == rows[("default", "character_sheet")]["before"]
