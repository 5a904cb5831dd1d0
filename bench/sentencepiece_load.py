"""Reading the default embedder's sentencepiece model (128k pieces, 2.5 MB): sentencepiece's own model proto
(`curator.vectors.static_e5.spm_vocabulary`, issue 32) against the hand-written protobuf reader it replaced (kept
here as the baseline, measured in the same run), and the processor load the default's hot path makes. CPU seconds,
best of N; the figures are not judged.

    python bench/sentencepiece_load.py [--quick] [--json]
"""

from __future__ import annotations

import struct
import time

from _common import emit, environment, parse_args, table

from curator.vectors.static_e5 import _spm_path, spm_vocabulary


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes, start: int, end: int) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    pos = start
    while pos < end:
        tag, pos = _varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.setdefault(field, []).append((pos, length))
            pos += length
        elif wire == 5:
            out.setdefault(field, []).append((pos, 4))
            pos += 4
    return out


def _piece(data: bytes, pos: int, end: int) -> tuple[str, float]:
    piece, score = "", 0.0
    while pos < end:
        tag = data[pos]
        pos += 1
        wire = tag & 7
        if wire == 2:
            size, pos = _varint(data, pos)
            if tag >> 3 == 1:
                piece = data[pos:pos + size].decode("utf-8")
            pos += size
        elif wire == 5:
            if tag >> 3 == 2:
                score = struct.unpack_from("<f", data, pos)[0]
            pos += 4
        elif wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
    return piece, score


def hand_written() -> tuple[list[str], list[float], bytes]:
    """The reader of before (curator/vectors/static_e5.py until issue 32)."""
    data = _spm_path().read_bytes()
    top = _fields(data, 0, len(data))
    pieces, scores = [], []
    for start, length in top[1]:
        piece, score = _piece(data, start, start + length)
        pieces.append(piece)
        scores.append(score)
    spec = _fields(data, top[3][0][0], top[3][0][0] + top[3][0][1])
    at, size = spec[2][0]
    return pieces, scores, data[at:at + size]


def model_proto() -> tuple[list[str], list[float], bytes]:
    spm_vocabulary.cache_clear()
    return spm_vocabulary()


def processor() -> object:
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(_spm_path()))


def best(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.process_time()
        function()
        times.append(time.process_time() - started)
    return min(times)


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0])
    runs = 3 if args.quick else 7
    assert hand_written() == model_proto(), "the two readers disagree"
    before, after, load = best(hand_written, runs), best(model_proto, runs), best(processor, runs)
    report = {
        "benchmark": "sentencepiece_load",
        "quick": args.quick,
        "env": environment(),
        "runs": runs,
        "hand_written_s": round(before, 4),
        "model_proto_s": round(after, 4),
        "speedup": round(before / after, 2),
        "processor_load_s": round(load, 4),
    }
    emit(args, report, lambda r: table(
        ["what", "CPU s (best)"],
        [["vocabulary, hand-written reader (before)", r["hand_written_s"]],
         ["vocabulary, sentencepiece's model proto (now)", r["model_proto_s"]],
         ["speed-up", f"{r['speedup']}x"],
         ["SentencePieceProcessor load (the default's path)", r["processor_load_s"]]]))


if __name__ == "__main__":
    main()
