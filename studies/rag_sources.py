"""How `rag` should score an event by its sources beside its own text (issue 31). Not shipped; a study.

`rag` searches the node texts with the query and the events' sources with the query less the speakers' names
(`Recaller._vector_scores`), and fuses the two lists (`scoring.fuse_vectors`: cosines, the sources' times 1.5). This
study runs `bench/recall_locomo.py` on kept chats once per way of doing it and prints `rag`'s evidence R@10 per
corpus on the tune conversations and the held-out two: the node cosine alone, z-scores of both searches at several
source weights, the higher of the two cosines, cosines at several weights, and the shipped fusion with one vector
without the names for both searches (as `hybrid` searches). `hybrid` does not change between the runs.

Run: python studies/rag_sources.py --keep DIR [--json]   (DIR: chats built by `bench/recall_locomo.py --keep DIR`,
or built by the first run here)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
VARIANTS = [("node cosine alone", "alone", 0.0),
            *((f"z-scores, source weight {w}", "z", w) for w in (0.5, 1, 1.5, 2.5)),
            ("the higher of the two cosines", "max", 0.0),
            *((f"cosines, source weight {w}", "cosine", w) for w in (1, 1.5, 2)),
            ("cosines 1.5, nodes searched without the names", "nameless", 1.5)]


def _fused(how: str, weight: float):
    """A `fuse_vectors` that fuses the two searches `how`."""
    import numpy as np

    from curator.recall.scoring import fuse_vectors

    def z_scores(values: dict[str, float]) -> dict[str, float]:
        if not values:
            return {}
        array = np.fromiter(values.values(), dtype=np.float64, count=len(values))
        centered = array - array.mean()
        std = float(np.sqrt(centered.dot(centered) / len(array)))
        return dict(zip(values, (centered / std if std > 0 else centered).tolist()))

    def fuse(nodes: dict, sources: dict, has_source, source_weight=None) -> dict:
        if how == "alone":
            return dict(nodes)
        if how in ("cosine", "nameless"):
            return fuse_vectors(nodes, sources, has_source, weight)
        if how == "max":
            out = dict(nodes)
            for node_id, score in sources.items():
                out[node_id] = max(out.get(node_id, -1.0), score)
            return out
        node_z, source_z = z_scores(nodes), z_scores(sources)
        node_low, source_low = min(node_z.values(), default=0.0), min(source_z.values(), default=0.0)
        return {i: node_z.get(i, node_low) + weight * source_z.get(i, source_low if i in has_source else 0.0)
                for i in nodes.keys() | sources.keys()}

    return fuse


def _child(keep: str, how: str, weight: float) -> None:
    from curator.recall import engine

    engine.fuse_vectors = _fused(how, weight)  # the name `_vector_scores` calls
    if how == "nameless":  # one vector, of the query less the names, for both searches (`query_both`)
        def nameless(self, chat_id: str, query: str, k: int) -> dict:
            state = self.state(chat_id)
            source_query = engine.strip_names(query, list(state.speakers)) or query
            nodes, sources = self._dense_scores(chat_id, query, max(k, engine.DENSE_POOL), source_query)
            with state.lock:
                return engine.fuse_vectors(nodes, sources, state.sources.keys())

        engine.Recaller._vector_scores = nameless  # type: ignore[method-assign]
    sys.path.insert(0, str(BENCH))
    import recall_locomo

    sys.argv = ["recall_locomo.py", "--keep", keep, "--json"]
    recall_locomo.main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", required=True, help="the data directory of the built chats (made if absent)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.keep, args.child[0], float(args.child[1]))
        return
    rows = []
    for label, how, weight in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--keep", args.keep, "--child", how, str(weight)],
                             capture_output=True, text=True, check=True).stdout
        metrics = json.loads(out)["results"]["metrics"]
        row = {"variant": label, **{f"{corpus} {split}": metrics[corpus][split]["rag"]["R@10"]
                                    for corpus in ("observations", "turns") for split in ("tune", "held_out")}}
        rows.append(row)
        if not args.json:
            print(f"{label:46s} tune {row['observations tune']:.4f} / {row['turns tune']:.4f}   held out "
                  f"{row['observations held_out']:.4f} / {row['turns held_out']:.4f}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
