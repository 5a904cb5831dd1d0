"""Where issue 31's raised goals are lost: hybrid evidence R@10 and R@20 on LoCoMo dev per question category, beside
the share of evidence turns no item covers (the ceiling of the observations corpus). Not shipped; a study.

The chats are `bench/recall_locomo.py`'s (built once, kept in `--keep DIR`, shared with that bench's `--keep`); each
question is recalled in `hybrid` mode with the bench's settings. LoCoMo's categories 1-4: multi-hop, temporal,
open-domain (inference), single-hop.

Run: python studies/locomo_categories.py --keep DIR [--data PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import recall_locomo as bench  # noqa: E402 - the bench's harness, from its folder

import curator  # noqa: E402

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def rows(memory, convs: list[dict], schema_path: Path) -> list[dict]:
    """One row per question and corpus: its category and, per evidence turn, whether any item covers it and the
    rank (0-based) of the first recalled item that does (None: not in the top 20)."""
    out = []
    for conv in convs:
        for corpus in bench.CORPORA:
            covers = bench.build_chat(memory, conv, corpus, schema_path)
            name = bench.chat_name(conv, corpus)
            coverable = {d for ids in covers.values() for d in ids}
            for q in bench.questions(conv):
                ids = [c.node.id for c in bench.ranked(memory, name, q["question"], "hybrid")]
                ranks = {e: next((i for i, n in enumerate(ids) if e in covers.get(n, [])), None)
                         for e in set(q["evidence"])}
                out.append({"corpus": corpus, "category": q["category"], "ranks": ranks,
                            "coverable": {e: e in coverable for e in ranks}})
    return out


def _share(members: list[dict], test) -> float:
    """The mean over questions of the share of their evidence turns that pass `test((turn, rank))`."""
    return round(sum(sum(map(test, r["ranks"].items())) / len(r["ranks"]) for r in members) / len(members), 3)


def summary(found: list[dict]) -> dict:
    table: dict = defaultdict(dict)
    for corpus in bench.CORPORA:
        groups: dict[str, list[dict]] = defaultdict(list)
        for row in (r for r in found if r["corpus"] == corpus):
            groups[NAMES[row["category"]]].append(row)
            groups["all"].append(row)
        for group, members in groups.items():
            table[corpus][group] = {
                "questions": len(members),
                "R@10": _share(members, lambda item: item[1] is not None and item[1] < 10),
                "R@20": _share(members, lambda item: item[1] is not None),
                "no item covers": round(sum(sum(not c for c in r["coverable"].values()) / len(r["coverable"])
                                            for r in members) / len(members), 3)}
    return dict(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="the built chats (made here if absent)")
    parser.add_argument("--data", type=Path, default=None, help="the LoCoMo dev file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    convs = json.loads((args.data or bench.data_path()).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder, curator.open(args.keep) as memory:
        table = summary(rows(memory, convs, bench.write_schema(Path(folder))))
    if args.json:
        print(json.dumps(table, indent=2))
        return
    for corpus, groups in table.items():
        print(f"\n{corpus}")
        for group, figures in groups.items():
            print(f"  {group:12s} " + "  ".join(f"{k} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
