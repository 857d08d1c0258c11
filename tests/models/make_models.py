"""Generate the small CNN test models in this folder (deterministic; each file < 1 MB).

    .venv/bin/python -m tests.models.make_models

mobile_cnn.onnx: a MobileNet-style depthwise-separable network with BatchNormalization,
HardSwish / HardSigmoid (squeeze-and-excite gate), Resize (upsampling), ConvTranspose and
pooling; two outputs, a dense map and class scores.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent
OPSET = 17


class _Builder:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array: np.ndarray, base: str = "w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride=1, group=1) -> str:
        w = self.rng.normal(0, (2.0 / (cin // group * k * k)) ** 0.5, (cout, cin // group, k, k))
        y = self.node("Conv", [x, self.const(w.astype(np.float32))], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4, group=group)
        return self.batch_norm(y, cout)

    def batch_norm(self, x: str, c: int) -> str:
        params = [self.rng.uniform(0.5, 1.5, c), self.rng.normal(0, 0.1, c),
                  self.rng.normal(0, 0.1, c), self.rng.uniform(0.5, 1.5, c)]
        names = [self.const(p.astype(np.float32), "bn") for p in params]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def squeeze_excite(self, x: str, c: int, hidden: int) -> str:
        s = self.node("GlobalAveragePool", [x])
        w1 = self.rng.normal(0, 0.3, (hidden, c, 1, 1)).astype(np.float32)
        w2 = self.rng.normal(0, 0.3, (c, hidden, 1, 1)).astype(np.float32)
        hidden_bias = self.const(np.zeros(hidden, np.float32))
        s = self.node("Relu", [self.node("Conv", [s, self.const(w1), hidden_bias])])
        gate = self.node("HardSigmoid", [self.node("Conv", [s, self.const(w2)])],
                         alpha=0.2, beta=0.5)
        return self.node("Mul", [x, gate])


def mobile_cnn() -> onnx.ModelProto:
    b = _Builder(seed=0)
    x = b.node("HardSwish", [b.conv_bn("image", 3, 16, 3, stride=2)])            # 16x16
    x = b.node("Relu", [b.conv_bn(x, 16, 16, 3, group=16)])                      # depthwise
    x = b.conv_bn(x, 16, 32, 1)                                                  # pointwise
    x = b.node("HardSwish", [b.squeeze_excite(x, 32, 8)])
    x = b.node("Relu", [b.conv_bn(x, 32, 32, 3, stride=2, group=32)])           # 8x8
    x = b.node("HardSwish", [b.conv_bn(x, 32, 48, 1)])
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "scales")
    up = b.node("Resize", [x, "", scales], mode="linear")                        # 16x16
    wt = b.rng.normal(0, 0.1, (48, 8, 4, 4)).astype(np.float32)
    dense = b.node("ConvTranspose", [up, b.const(wt), b.const(np.zeros(8, np.float32))],
                   strides=[2, 2], pads=[1, 1, 1, 1])                            # 32x32
    pooled = b.node("AveragePool", [b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])],
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
    flat = b.node("Flatten", [b.node("GlobalAveragePool", [pooled])])
    fc = b.rng.normal(0, 0.2, (10, 48)).astype(np.float32)
    logits = b.node("Gemm", [flat, b.const(fc), b.const(np.zeros(10, np.float32))], transB=1)
    graph = helper.make_graph(
        b.nodes, "mobile_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info(dense, TensorProto.FLOAT, [1, 8, 32, 32]),
         helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, 10])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorforge-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


MODELS = {"mobile_cnn.onnx": mobile_cnn}


def main() -> None:
    for filename, build in MODELS.items():
        onnx.save(build(), HERE / filename)
        print(f"wrote {HERE / filename} ({(HERE / filename).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
