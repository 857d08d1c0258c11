"""Small ONNX models built in code for the service tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tensorforge-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def elementwise(symbolic: bool = True, width: int = 256) -> bytes:
    """y = relu(x * w + b) with x of shape [N, width]; N is symbolic unless told otherwise."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "b")
    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Tanh", ["u"], ["v"]), helper.make_node("Relu", ["v"], ["y"])]
    dim0 = "N" if symbolic else 4
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim0, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim0, width])
    return _model(nodes, [x], [y], [w, b])


def dense(rows: int = 2, inputs: int = 64, units: int = 32) -> bytes:
    """y = relu(x @ w) with a constant w: a layer whose weights weight_dtype converts."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((inputs, units)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inputs])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, units])
    return _model(nodes, [x], [y], [w])


def unsupported() -> bytes:
    """A model using an operator Tensorforge will not compile (TfIdfVectorizer)."""
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                            max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                            ngram_indexes=[0, 1], pool_int64s=[2, 3])
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    return _model([node], [x], [y], opset=17)
