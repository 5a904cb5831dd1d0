"""Retrieval quality is guarded like correctness (issue 31): on the LoCoMo dev split, the shipped recall on default
settings must keep evidence R@10 at or above the best this project has reached, on both corpora (LoCoMo's
observations as memories, and the raw turns as memories) and in both modes (`hybrid`, `rag`), and the injection a
model is shown must keep its share of the evidence (`bench/locomo_injection.py`). Deterministic: the same chats and
questions every run, nothing timed. Every speed or embedder change must pass it.

The data is read from `../shared/data/locomo_dev.json` beside the checkout, or from $CURATOR_LOCOMO_DEV; never copied
into the repository. The test skips, saying why, when the data or the bench scripts are absent, and runs on the
SQLite pass only (it measures recall, not the store engine). Its cost is e5 over the node texts and sources of both
corpora (~8,500 short texts) and ~3,900 recalls: about three minutes of CPU, once per CI run. Every vector is kept
within the run (the embedder remembers the texts it embedded).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import curator

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

# Evidence R@10 on the dev split, per corpus and mode: the best this project had reached before the static document
# vectors (issue 31), which the default must keep. Raise them with the default, never lower them. `rag` reads the
# events' sources since 2026-12-07 (0.679 / 0.717 then, from 0.618 / 0.598): its floors rose to a point or so under
# that, the spread e5's rounding on another processor gives a figure (bench/README.md, "e5's rounding noise").
FLOORS = {("observations", "hybrid"): 0.715, ("turns", "hybrid"): 0.810,
          ("observations", "rag"): 0.665, ("turns", "rag"): 0.705}
INJECTION_FLOOR = 0.717  # bench/locomo_injection.py: evidence in the final injection, mean over conversations
PERSON_CEILING = 0.05  # questions whose top 10 holds a speaker's bare node (0.71-0.77 in rag before issue 31)

pytestmark = [pytest.mark.engine("sqlite", reason="recall quality, not the store engine: once per CI run")]


def _data() -> Path:
    import os

    return Path(os.environ.get("CURATOR_LOCOMO_DEV") or ROOT.parent / "shared" / "data" / "locomo_dev.json")


@pytest.fixture(scope="module")
def bench():
    if not (BENCH / "recall_locomo.py").is_file():
        pytest.skip("no bench/ folder (installed-only layout)")
    if not _data().is_file():
        pytest.skip(f"the LoCoMo dev split is absent ({_data()}; set CURATOR_LOCOMO_DEV)")
    sys.path.insert(0, str(BENCH))
    try:
        import locomo_injection
        import recall_locomo
    finally:
        sys.path.remove(str(BENCH))
    return recall_locomo, locomo_injection


@pytest.fixture(scope="module")
def convs(bench):
    return json.loads(_data().read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    memory = curator.open(tmp_path_factory.mktemp("quality"))
    yield memory
    memory.close()


@pytest.fixture(scope="module")
def ranked(bench, convs, memory, tmp_path_factory):
    """Per (corpus, mode): each question's scores (R@10, person@10...), every conversation, default settings."""
    recall_locomo, _ = bench
    schema = recall_locomo.write_schema(tmp_path_factory.mktemp("schema"))
    rows: dict[tuple[str, str], list[dict]] = {(c, m): [] for c, m in FLOORS}
    for conv in convs:
        chats = {corpus: (recall_locomo.chat_name(conv, corpus), recall_locomo.build_chat(memory, conv, corpus, schema))
                 for corpus in recall_locomo.CORPORA}
        for q in recall_locomo.questions(conv):
            for corpus, (chat, covers) in chats.items():  # one question on both chats in a row: one query embedding
                for mode in ("hybrid", "rag"):
                    chosen = recall_locomo.ranked(memory, chat, q["question"], mode)
                    rows[(corpus, mode)].append(recall_locomo.score_chosen(chosen, covers, q["evidence"]))
    return {key: recall_locomo.mean(value) for key, value in rows.items()}


@pytest.mark.parametrize(("corpus", "mode"), list(FLOORS))
def test_recall_keeps_the_best_r10_reached(ranked, corpus, mode):
    reached = ranked[(corpus, mode)]["R@10"]
    assert reached >= FLOORS[(corpus, mode)], \
        f"{mode} R@10 on {corpus} fell to {reached:.4f} (floor {FLOORS[(corpus, mode)]}): {ranked[(corpus, mode)]}"


@pytest.mark.parametrize("mode", ["hybrid", "rag"])
def test_speaker_nodes_do_not_crowd_out_events(ranked, mode):
    for corpus in ("observations", "turns"):
        share = ranked[(corpus, mode)]["any_person@10"]
        assert share <= PERSON_CEILING, (
            f"{mode} on {corpus}: a speaker's node in the top 10 of {share:.0%} of questions"
        )


def test_the_injection_keeps_its_share_of_the_evidence(bench, convs, tmp_path_factory):
    _, locomo_injection = bench
    memory = curator.open(tmp_path_factory.mktemp("injection"))  # its chats have the observations' names
    request_close = memory.close
    per_conv = {}
    for conv in convs:
        covers = locomo_injection.build_chat(memory, conv)
        per_conv[conv["sample_id"]] = [locomo_injection.ask(memory, conv, covers, q)
                                       for q in locomo_injection.questions(conv)]
    request_close()
    covered = locomo_injection.summarise(per_conv)["both"]
    assert covered["over_conversations"] >= INJECTION_FLOOR, covered
