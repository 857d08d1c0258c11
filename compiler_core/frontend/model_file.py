"""Read an ONNX model and check it before trusting it."""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import CompileError

DEFAULT_MAX_BYTES = 2 * 1024**3
ALLOWED_DOMAINS = {"", "ai.onnx"}


def max_model_bytes() -> int:
    return int(os.environ.get("TENSORFORGE_MAX_MODEL_BYTES", DEFAULT_MAX_BYTES))


def load_model(model) -> tuple[onnx.ModelProto, Path | None]:
    """Path, bytes or ModelProto -> (ModelProto with external data loaded, its folder)."""
    if isinstance(model, onnx.ModelProto):
        folder = None
        proto = model
    else:
        data, folder = _read_bytes(model)
        proto = _parse(data)
    if not proto.HasField("graph"):
        raise CompileError("the file parsed as protobuf but has no ONNX graph: "
                           "is it really an .onnx model? Export it again with torch.onnx or tf2onnx")
    load_external_data(proto, folder)
    check_domains(proto)
    return proto, folder


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


def _tensors_with_external_data(proto: onnx.ModelProto):
    from onnx.external_data_helper import _get_all_tensors  # noqa: PLC2701 - walks subgraphs too
    return [t for t in _get_all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]


def load_external_data(proto: onnx.ModelProto, folder: Path | None) -> None:
    tensors = _tensors_with_external_data(proto)
    if not tensors:
        return
    if folder is None:
        raise CompileError("the model keeps weights in external data files; pass the path of "
                           "the .onnx file (with its data files beside it) instead of bytes")
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        path = _safe_external_path(folder, info.get("location", ""), t.name)
        offset, length = int(info.get("offset", 0)), info.get("length")
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(int(length)) if length is not None else f.read()
        if length is not None and len(raw) != int(length):
            raise CompileError(f"external data for tensor {t.name!r} in {path.name} is shorter "
                               f"than its declared length {length}: the data file is truncated")
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


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


def model_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ALLOWED_DOMAINS:
            return int(imp.version)
    raise CompileError("the model imports no default ONNX opset")
