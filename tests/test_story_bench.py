"""Smoke tests of the story benchmarks (bench/pov_recall.py, bench/extract_prompt_size.py): they run with --quick
and report what they promise; the POV bench's goal (no secret in a speaker's "known" section) is checked too,
since it holds by construction of the views, not by tuning."""

from __future__ import annotations

from test_bench_smoke import RESULT_KEYS, run_quick

RESULT_KEYS["pov_recall"] = {"off", "tuned", "shipped"}
RESULT_KEYS["extract_prompt_size"] = {"types", "system_prompt"}


def test_pov_recall_quick():
    results = run_quick("pov_recall")["results"]
    for weights in ("off", "tuned", "shipped"):
        for story in ("tune", "held_out"):
            row = results[weights][story]
            assert row["injections"] > 0 and row["leaks"] == 0 and 0 <= row["kept"] <= 1


def test_extract_prompt_size_quick():
    results = run_quick("extract_prompt_size")["results"]
    rows = {(r["preset"], r["type"]): r for r in results["types"]}
    assert rows[("default", "event")]["after"]["prompt"] > rows[("default", "event")]["before"]["prompt"]
    assert rows[("default", "character_sheet")]["after"] == rows[("default", "character_sheet")]["before"]
