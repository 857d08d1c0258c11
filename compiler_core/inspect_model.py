"""What a model is, before compiling it: opset, inputs with symbolic dims, ops, unsupported ops."""
from __future__ import annotations

import hashlib
import math
from collections import Counter

import numpy as np
import onnx
import onnx.numpy_helper

from .analysis.sparsity import best_block_shape
from .codegen.target_machine import host_spec
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
        "sparse_weights": sparse_weights(proto.graph),
    }


def _weight_matrices(graph: onnx.GraphProto):
    """(node, weight name, W as (outputs, inputs)) for the constant weights a compile may
    specialize: MatMul/Gemm B, and the W and R of LSTM/GRU per direction."""
    inits = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits:
            b = onnx.numpy_helper.to_array(inits[n.input[1]])
            trans = n.op_type == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
            if b.ndim == 2:
                yield n.name or n.output[0], n.input[1], b if trans else b.T
        if n.op_type in ("LSTM", "GRU"):
            for name in n.input[1:3]:
                if name in inits:
                    for d, w in enumerate(onnx.numpy_helper.to_array(inits[name])):
                        yield n.name or n.output[0], f"{name}[{d}]", w


def sparse_weights(graph: onnx.GraphProto) -> list[dict]:
    """The weight matrices that a batch-1 compile for this machine multiplies block-sparse
    (analysis/sparsity.py), with block shape and density."""
    lanes = host_spec().vector_bits // 32
    out = []
    for node, name, w in _weight_matrices(graph):
        choice = best_block_shape(np.asarray(w, np.float32), 1, lanes)
        if choice is not None:
            out.append({"node": node, "weight": name, "shape": list(w.shape),
                        "block": choice.name, "density": round(choice.density, 4),
                        "estimated_speedup": round(choice.estimated_speedup, 2)})
    return out
