"""A small ONNX graph builder for the generated test models (tests/models/catalog.py).

Weights come from one seeded numpy Generator, so a generator script always writes the same
model. Scales are chosen so activations stay O(1) through the depth (He-initialised weights,
BatchNormalization statistics measured on a calibration input as training would leave them):
with random-scale weights, big models overflow or collapse to zeros, and such outputs hide
wrong results.
"""
from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what ONNX Runtime 1.31 and OpenVINO read


class GraphBuilder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array, base: str = "w", name: str | None = None) -> str:
        """A new initializer, named `name` when a subgraph refers to it by that name."""
        name = name or self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def f32(self, array, base: str = "w", name: str | None = None) -> str:
        return self.const(np.asarray(array, np.float32), base, name)

    def ints(self, values, base: str = "shape", name: str | None = None) -> str:
        return self.const(np.asarray(values, np.int64), base, name)

    def node(self, op: str, inputs: list[str], n_out: int = 1, out: str | None = None, **attrs):
        """Add a node named like its first output; returns the output name (or names).
        `out` names a single output (a graph output)."""
        outs = [out] if out else [self.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"/{outs[0]}", **attrs))
        return outs[0] if n_out == 1 else outs

    # -- convolution blocks
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = False) -> str:
        fan_in = cin // group * k * k
        w = self.rng.normal(0.0, (2.0 / fan_in) ** 0.5, (cout, cin // group, k, k))
        inputs = [x, self.f32(w)]
        if bias:
            inputs.append(self.f32(self.rng.normal(0.0, 0.1, cout), "b"))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[k // 2] * 4, group=group)

    def batch_norm(self, x: str, c: int) -> str:
        """Placeholder running statistics; `calibrate_batch_norms` sets the real ones."""
        params = [self.rng.uniform(0.7, 1.3, c), self.rng.normal(0.0, 0.1, c),
                  np.zeros(c), np.ones(c)]
        return self.node("BatchNormalization", [x, *[self.f32(p, "bn") for p in params]],
                         epsilon=1e-3)

    def silu(self, x: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    # -- dense layers
    def dense_weight(self, fan_in: int, fan_out: int, gain: float = 1.0) -> np.ndarray:
        """An nn.Linear weight in PyTorch's (out, in) layout; gain sqrt(2) before a ReLU."""
        return self.rng.normal(0.0, gain / fan_in ** 0.5, (fan_out, fan_in))

    def matmul_bias(self, x: str, fan_in: int, fan_out: int, gain: float = 1.0) -> str:
        """PyTorch's export of nn.Linear on a 3-d input: MatMul by W^T, then Add the bias."""
        y = self.node("MatMul", [x, self.f32(self.dense_weight(fan_in, fan_out, gain).T)])
        return self.node("Add", [self.f32(self.rng.normal(0.0, 0.02, fan_out), "b"), y])

    def gemm(self, x: str, weight: np.ndarray, out: str | None = None) -> str:
        """nn.Linear on a 2-d input: Gemm with the (out, in) weight, transB=1, and a bias."""
        bias = self.f32(self.rng.normal(0.0, 0.1, weight.shape[0]), "b")
        return self.node("Gemm", [x, self.f32(weight), bias], out=out, transB=1)

    def model(self, name: str, inputs: list, outputs: list, opset: int = OPSET) -> onnx.ModelProto:
        """inputs/outputs: (name, onnx elem type, shape) triples; shapes may hold dim names."""
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
            [helper.make_tensor_value_info(*o) for o in outputs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="tensorforge-tests")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def calibrate_batch_norms(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """Set each BatchNormalization's running mean and variance to its input's statistics on
    `feeds` (batch 1), so every BN output has the mean and variance its scale and bias say.

    One ONNX Runtime run does it: with batch 1, InstanceNormalization normalises each channel
    by exactly those statistics, so a copy of the model with every BN replaced by it computes
    what the calibrated model will, and reports each BN's input on the way."""
    import onnxruntime as ort
    probe = copy.deepcopy(model)
    bns = [n for n in probe.graph.node if n.op_type == "BatchNormalization"]
    for n in bns:
        n.op_type = "InstanceNormalization"
        del n.input[3:]
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT,
                                                                None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the BN statistics left unused by the probe are expected
    session = ort.InferenceSession(probe.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    inputs = session.run([n.input[0] for n in bns], feeds)
    stats = {}
    for n, x in zip(bns, inputs):
        stats[n.input[0]] = (x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3)))
    return _with_statistics(model, stats)


def _with_statistics(model: onnx.ModelProto, stats: dict) -> onnx.ModelProto:
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            for name, value in zip(n.input[3:5], stats[n.input[0]]):
                inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
    return model
