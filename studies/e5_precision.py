"""How far e5's int8 runtime is from the same weights computed without rounding, and how far its variants and the
rounding-noise study's perturbations move it (issues 31 and 33). Not shipped; a study.

`curator/vectors/e5_runtime.py` quantizes each layer's input to uint8 on the fly (one scale per text and layer) and
runs onnxruntime's int8 kernels. Here the same int8 weights run in float64 numpy with nothing rounded in between (the
reference), on texts of LoCoMo dev, and each runtime variant's vectors are compared with it by cosine: as shipped
(with onnxruntime's SkipLayerNormalization fusion), without the fusion (~15-30% less CPU a text), and the shipped
runtime under `studies/e5_rounding_noise.py`'s perturbations (its first layer's input scaled by 1 + k * 2^-22).
Also printed: the variants' cosines to each other and their CPU per text.

Run: python studies/e5_precision.py [--texts 150] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from math import erf
from pathlib import Path

import numpy as np

from curator.vectors import e5_runtime
from curator.vectors.e5_weights import E5Weights, dequantize, shipped_weights

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo_dev.json"


def _texts(path: Path, count: int) -> list[str]:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("text", "clean_text") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(path.read_text(encoding="utf-8")))
    return ["passage: " + t for t in found[::max(1, len(found) // count)][:count]]


def _reference(weights: E5Weights):
    """The twelve layers in float64 with the runtime's int8 weights (63 levels a row) and nothing else rounded."""
    hidden, heads = weights.hidden, weights.heads
    size = hidden // heads

    def int8(name: str, rows: int, columns: int) -> np.ndarray:
        matrix = dequantize(weights.blocks(name, rows, columns)).astype(np.float64)
        scales = np.maximum(np.abs(matrix).max(axis=1), 1e-12) / e5_runtime._WEIGHT_TOP
        return np.clip(np.rint(matrix / scales[:, None]), -63, 63) * scales[:, None]

    def floats(name: str) -> np.ndarray:
        return weights.floats(name).astype(np.float64)

    layers = []
    for n in range(weights.layers):
        p = f"l{n}."
        layers.append({
            "qkv": np.concatenate([int8(p + part, hidden, hidden) for part in ("q.w", "k.w", "v.w")]),
            "qkv.b": np.concatenate([floats(p + part) for part in ("q.b", "k.b", "v.b")]),
            "ao": int8(p + "ao.w", hidden, hidden), "ao.b": floats(p + "ao.b"),
            "fi": int8(p + "fi.w", weights.ffn, hidden), "fi.b": floats(p + "fi.b"),
            "fo": int8(p + "fo.w", hidden, weights.ffn), "fo.b": floats(p + "fo.b"),
            "aln": (floats(p + "aln.w"), floats(p + "aln.b")), "oln": (floats(p + "oln.w"), floats(p + "oln.b"))})
    gelu_erf = np.vectorize(erf)

    def norm(x: np.ndarray, scale_bias: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + weights.eps) * scale_bias[0] + scale_bias[1]

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(len(t), heads, size).transpose(1, 0, 2)

    def forward(x: np.ndarray) -> np.ndarray:
        x = x[0].astype(np.float64)
        for layer in layers:
            q, k, v = np.split(x @ layer["qkv"].T + layer["qkv.b"], 3, axis=-1)
            scores = split(q) @ split(k).transpose(0, 2, 1) * size ** -0.5
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ split(v)).transpose(1, 0, 2).reshape(len(x), hidden)
            x1 = norm(x + context @ layer["ao"].T + layer["ao.b"], layer["aln"])
            up = x1 @ layer["fi"].T + layer["fi.b"]
            x = norm(x1 + (0.5 * up * (1 + gelu_erf(up / np.sqrt(2)))) @ layer["fo"].T + layer["fo.b"], layer["oln"])
        return x.mean(0)

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=150)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("CURATOR_LOCOMO_DEV") or DATA))
    args = parser.parse_args()
    texts = _texts(args.data, args.texts)
    weights = shipped_weights()
    vectors, cost = {}, {}
    for name, disabled in (("shipped", []), ("without the fusion", ["SkipLayerNormFusion"])):
        e5_runtime.DISABLED_OPTIMIZERS = disabled  # read when a session is made
        runtime = e5_runtime.E5Runtime(weights)
        started = time.process_time()  # the batch runs on the embed threads
        vectors[name] = runtime.encode(texts, "")
        cost[name] = (time.process_time() - started) / len(texts) * 1000
    e5_runtime.DISABLED_OPTIMIZERS = []
    runtime = e5_runtime.E5Runtime(weights)
    layers = e5_runtime.E5Runtime._layers
    for k in (1, 2, 3, 4):
        factor = np.float32(1 + k * 2.0 ** -22)
        runtime._layers = lambda x, f=factor: layers(runtime, x * f)  # type: ignore[method-assign]
        vectors[f"shipped, perturbed k={k}"] = runtime.encode(texts, "")
    runtime._layers = _reference(weights)  # type: ignore[method-assign]
    reference = runtime.encode(texts, "")
    print(f"{len(texts)} texts of {args.data.name}; CPU a text (the process, both embed threads): "
          + ", ".join(f"{name} {ms:.2f} ms" for name, ms in cost.items()))
    print("cosine to the float64 reference (mean / min):")
    for name, rows in vectors.items():
        cosines = (rows * reference).sum(1)
        print(f"  {name:28s} {cosines.mean():.5f} / {cosines.min():.5f}")
    print("cosine to the shipped vectors (mean / min):")
    for name, rows in vectors.items():
        if name != "shipped":
            cosines = (rows * vectors["shipped"]).sum(1)
            print(f"  {name:28s} {cosines.mean():.5f} / {cosines.min():.5f}")


if __name__ == "__main__":
    main()
