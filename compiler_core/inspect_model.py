"""What a model is, before compiling it: opset, inputs with symbolic dims, ops, unsupported ops."""
from __future__ import annotations

import hashlib
import math
from collections import Counter

import onnx

from .frontend.model_file import _all_nodes, load_model, model_opset
from .frontend.onnx import _nodes_needing_converters, np_dtype


def _dims(vi: onnx.ValueInfoProto) -> list:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def _io(vi: onnx.ValueInfoProto) -> dict:
    elem = vi.type.tensor_type.elem_type
    try:
        dtype = np_dtype(elem).name
    except ValueError:
        dtype = onnx.TensorProto.DataType.Name(elem).lower()
    shape = _dims(vi)
    symbolic = [d for d in shape or [] if isinstance(d, str)]
    return {"name": vi.name, "dtype": dtype, "shape": shape, "symbolic_dims": symbolic}


def inspect_model(model) -> dict:
    """Raises CompileError for files that are not valid ONNX models."""
    proto, _ = load_model(model)
    opset = model_opset(proto)
    inits = {t.name for t in proto.graph.initializer}
    unsupported = Counter(n.op_type for n in _nodes_needing_converters(proto.graph, opset))
    raw = model if isinstance(model, bytes) else proto.SerializeToString()
    return {
        "opset": opset,
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "inputs": [_io(i) for i in proto.graph.input if i.name not in inits],
        "outputs": [_io(o) for o in proto.graph.output],
        "ops": dict(sorted(Counter(n.op_type for n in _all_nodes(proto.graph)).items())),
        "unsupported_ops": dict(sorted(unsupported.items())),
        "nodes": len(proto.graph.node),
        "parameters": sum(math.prod(t.dims) for t in proto.graph.initializer),
    }
