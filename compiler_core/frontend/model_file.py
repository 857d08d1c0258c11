"""Read an ONNX model and check it before trusting it."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ..errors import CompileError
from .limits import check_tensor, check_tensor_proto

DEFAULT_MAX_BYTES = 2 * 1024**3
ALLOWED_DOMAINS = {"", "ai.onnx"}


def max_model_bytes() -> int:
    return int(os.environ.get("TENSORFORGE_MAX_MODEL_BYTES", DEFAULT_MAX_BYTES))


def load_model(model) -> tuple[onnx.ModelProto, Path | None]:
    """Path, bytes or ModelProto -> (ModelProto with external data loaded, its folder)."""
    proto, folder = read_proto(model)
    if not proto.HasField("graph"):
        raise CompileError("the file parsed as protobuf but has no ONNX graph: "
                           "is it really an .onnx model? Export it again with torch.onnx or tf2onnx")
    check_opset(proto)
    check_single_producers(proto.graph)
    load_external_data(proto, folder)
    check_tensors(proto)
    check_domains(proto)
    return proto, folder


def read_proto(model) -> tuple[onnx.ModelProto, Path | None]:
    """Parse only: external data stays where it is (see tensors_with_external_data)."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    data, folder = _read_bytes(model)
    return _parse(data), folder


def _read_bytes(model) -> tuple[bytes, Path | None]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        folder = None
    else:
        path = Path(model)
        if not path.is_file():
            raise CompileError(f"model file {path} does not exist")
        size = path.stat().st_size
        if size > max_model_bytes():
            raise _too_large(size)
        data = path.read_bytes()
        folder = path.resolve().parent
    if len(data) > max_model_bytes():
        raise _too_large(len(data))
    if not data:
        raise CompileError("the model file is empty: upload the .onnx file itself")
    return data, folder


def _too_large(size: int) -> CompileError:
    return CompileError(f"the model is {size / 2**20:.1f} MiB, over the limit of "
                        f"{max_model_bytes() / 2**20:.0f} MiB (TENSORFORGE_MAX_MODEL_BYTES)")


def _parse(data: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CompileError("the file is not a valid ONNX model (protobuf decoding failed: "
                           f"{exc}); it may be truncated or not an .onnx file") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise CompileError("the file is not an ONNX model (no graph or no opset_import): "
                           "upload a .onnx file exported with torch.onnx, tf2onnx or similar")
    return proto


def tensors_with_external_data(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    from onnx.external_data_helper import _get_all_tensors  # private, but walks subgraphs too
    return [t for t in _get_all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]


def load_external_data(proto: onnx.ModelProto, folder: Path | None) -> None:
    tensors = tensors_with_external_data(proto)
    if not tensors:
        return
    if folder is None:
        raise CompileError("the model keeps weights in external data files; pass the path of "
                           "the .onnx file (with its data files beside it) instead of bytes")
    budget = max_model_bytes()  # also when many tensors point at the same bytes
    for t in tensors:
        raw = _read_external(folder, t)
        budget -= len(raw)
        if budget < 0:
            raise _too_large(max_model_bytes() - budget)
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _read_external(folder: Path, t: onnx.TensorProto) -> bytes:
    info = {e.key: e.value for e in t.external_data}
    path = _safe_external_path(folder, info.get("location", ""), t.name)
    check_tensor_proto(t, f"tensor {t.name!r}")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else path.stat().st_size - offset
    except ValueError:
        raise CompileError(f"tensor {t.name!r}: external data offset/length are not "
                           "numbers") from None
    if offset < 0 or length < 0 or length > max_model_bytes():
        raise CompileError(f"tensor {t.name!r}: external data offset {offset} / length "
                           f"{length} are out of range")
    with open(path, "rb") as f:
        f.seek(offset)
        raw = f.read(length)
    if len(raw) != length:
        raise CompileError(f"external data for tensor {t.name!r} in {path.name} is shorter "
                           f"than its declared length {length}: the data file is truncated")
    return raw


def _safe_external_path(folder: Path, location: str, tensor: str) -> Path:
    rel = Path(location)
    if not location or rel.is_absolute() or ".." in rel.parts:
        raise CompileError(f"tensor {tensor!r} points at external data {location!r}: external "
                           "data paths must be relative and stay inside the model's folder")
    path = folder / rel
    if path.is_symlink() or not path.resolve().is_relative_to(folder.resolve()):
        raise CompileError(f"tensor {tensor!r}: external data {location!r} is a symlink or leaves "
                           "the model's folder; copy the data file next to the model")
    if not path.is_file():
        raise CompileError(f"tensor {tensor!r}: external data file {location!r} is missing; "
                           "put it next to the .onnx file")
    return path


def check_domains(proto: onnx.ModelProto) -> None:
    bad: dict[str, int] = {}
    for node in _all_nodes(proto.graph):
        if node.domain not in ALLOWED_DOMAINS:
            bad[f"{node.domain}::{node.op_type}"] = bad.get(f"{node.domain}::{node.op_type}", 0) + 1
    if bad:
        listing = ", ".join(f"{k} (x{n})" for k, n in sorted(bad.items()))
        raise CompileError(f"the model uses operators from custom domains, which are not "
                           f"supported: {listing}. Export with standard ONNX operators only")


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from _all_nodes(g)


def check_opset(proto: onnx.ModelProto) -> None:
    known = onnx.defs.onnx_opset_version()
    for imp in proto.opset_import:
        if imp.domain in ALLOWED_DOMAINS and not 1 <= imp.version <= known:
            raise CompileError(f"the model imports ONNX opset {imp.version}, which does not "
                               f"exist (this compiler knows opsets 1 to {known}); export it "
                               "again with a released opset")


def check_single_producers(graph: onnx.GraphProto) -> None:
    """Every tensor of a graph has one producer: a graph input, an initializer or one node's
    output (a subgraph is checked on its own: it may shadow names of its outer graph)."""
    producer: dict[str, str] = {}
    for name, who in [*((i.name, "a graph input") for i in graph.input),
                      *((t.name, "an initializer") for t in graph.initializer)]:
        producer.setdefault(name, who)
    for node in graph.node:
        label = f"node {node.name or node.op_type!r}"
        for name in filter(None, node.output):
            if name in producer:
                raise CompileError(f"tensor {name!r} is written by {producer[name]} and by "
                                   f"{label}; every tensor must have exactly one producer")
            producer[name] = label
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                check_single_producers(g)


def check_tensors(proto: onnx.ModelProto) -> None:
    """Initializers and constants: shapes within the caps and data matching the shape."""
    from onnx.external_data_helper import _get_all_tensors

    for t in _get_all_tensors(proto):
        check_tensor_proto(t, f"tensor {t.name or '(constant)'!r}")
    for sparse in _all_sparse(proto.graph):
        check_tensor(sparse.dims, np.uint8, f"sparse tensor {sparse.values.name!r}")


def _all_sparse(graph: onnx.GraphProto):
    yield from graph.sparse_initializer
    for node in _all_nodes(graph):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield attr.sparse_tensor
            yield from attr.sparse_tensors


def model_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ALLOWED_DOMAINS:
            return int(imp.version)
    raise CompileError("the model imports no default ONNX opset")
