"""How far LoCoMo dev's R@10 moves under rounding noise alone, and where a change to e5's arithmetic falls in it
(issue 33's cheaper e5, held to issue 31's floors). Not shipped; a study.

e5 runs int8 kernels that quantize each layer's input on the fly, so a difference in the last bit of a float
(another processor, another kernel, another order of a sum) turns into other roundings downstream: the vectors
move by a cosine of ~0.999 and a few questions change their top 10. This study measures that spread as it is:
for each k of `--scales`, `bench/recall_locomo.py` runs in a child process whose e5 scales its first layer's input
by 1 + k * 2**-22 (a change no text could see; k = 0 is the runtime as it is), with onnxruntime's
SkipLayerNormalization fusion as the runtime has it or, with `--unfused`, turned off (30% less CPU a text). It prints
each run's evidence R@10 per corpus and mode, then the mean and the range per column.

Run: python studies/e5_rounding_noise.py [--scales 0,1,2,3,4] [--unfused] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
COLUMNS = [(corpus, mode) for corpus in ("observations", "turns") for mode in ("hybrid", "rag", "chroma")]


def _child(scale: int, unfused: bool) -> None:
    """In the child: patch e5's runtime, then run the bench as its command line would."""
    import numpy as np

    from curator.vectors import e5_runtime

    if unfused:
        e5_runtime.DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]  # read when a session is made
    factor = np.float32(1 + scale * 2.0 ** -22)
    layers = e5_runtime.E5Runtime._layers

    def scaled(self: e5_runtime.E5Runtime, x: np.ndarray) -> np.ndarray:
        return layers(self, x * factor)

    e5_runtime.E5Runtime._layers = scaled  # type: ignore[method-assign]
    sys.path.insert(0, str(BENCH))
    import recall_locomo

    sys.argv = ["recall_locomo.py", "--json"]
    recall_locomo.main()


def figures(report: dict) -> dict[str, float]:
    metrics = report["results"]["metrics"]
    return {f"{corpus} {mode}": metrics[corpus]["all"][mode]["R@10"] for corpus, mode in COLUMNS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="0,1,2,3,4", help="the k of each run, comma-separated")
    parser.add_argument("--unfused", action="store_true", help="onnxruntime's SkipLayerNormalization fusion off")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return _child(args.child, args.unfused)
    runs = []
    for scale in (int(k) for k in args.scales.split(",")):
        print(f"k = {scale}{' (unfused)' if args.unfused else ''}: bench/recall_locomo.py", file=sys.stderr,
              flush=True)
        flags = ["--unfused"] if args.unfused else []
        out = subprocess.run([sys.executable, __file__, "--child", str(scale), *flags],
                             stdout=subprocess.PIPE, check=True).stdout
        runs.append({"k": scale, "r@10": figures(json.loads(out))})
    columns = list(runs[0]["r@10"])
    summary = {c: {"mean": round(statistics.fmean(r["r@10"][c] for r in runs), 4),
                   "min": min(r["r@10"][c] for r in runs), "max": max(r["r@10"][c] for r in runs)} for c in columns}
    if args.json:
        print(json.dumps({"study": "e5_rounding_noise", "unfused": args.unfused, "runs": runs, "summary": summary},
                         indent=2))
        return
    print("k | " + " | ".join(columns))
    for r in runs:
        print(f"{r['k']} | " + " | ".join(f"{r['r@10'][c]:.4f}" for c in columns))
    print("mean | " + " | ".join(f"{summary[c]['mean']:.4f}" for c in columns))
    print("range | " + " | ".join(f"{summary[c]['min']:.4f}-{summary[c]['max']:.4f}" for c in columns))


if __name__ == "__main__":
    main()
