"""A MobileNetV3-Large-shaped classifier at 224x224, as torchvision exports it (opset 17),
with BatchNormalization kept as its own node.

stem Conv 3x3 s2 + HardSwish; 15 inverted-residual blocks (1x1 expand, depthwise kxk,
optional squeeze-excite, 1x1 project, residual add when shapes allow); 1x1 Conv to 960 +
HardSwish; GlobalAveragePool; Gemm 960->1280 + HardSwish; Gemm 1280->1000.
Squeeze-excite: GlobalAveragePool, 1x1 Conv + Relu, 1x1 Conv + HardSigmoid, Mul.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph_builder import GraphBuilder, calibrate_batch_norms

# kernel, expanded channels, output channels, squeeze-excite, activation, stride
BLOCKS = [(3, 16, 16, False, "Relu", 1), (3, 64, 24, False, "Relu", 2),
          (3, 72, 24, False, "Relu", 1), (5, 72, 40, True, "Relu", 2),
          (5, 120, 40, True, "Relu", 1), (5, 120, 40, True, "Relu", 1),
          (3, 240, 80, False, "HardSwish", 2), (3, 200, 80, False, "HardSwish", 1),
          (3, 184, 80, False, "HardSwish", 1), (3, 184, 80, False, "HardSwish", 1),
          (3, 480, 112, True, "HardSwish", 1), (3, 672, 112, True, "HardSwish", 1),
          (5, 672, 160, True, "HardSwish", 2), (5, 960, 160, True, "HardSwish", 1),
          (5, 960, 160, True, "HardSwish", 1)]


def _divisible(v: float, by: int = 8) -> int:
    return max(by, int(v + by / 2) // by * by)


class _MobileNet(GraphBuilder):
    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
                act: str | None = None) -> str:
        y = self.batch_norm(self.conv(x, cin, cout, k, stride, group), cout)
        return self.node(act, [y]) if act else y

    def squeeze_excite(self, x: str, c: int) -> str:
        hidden = _divisible(c / 4)
        s = self.node("GlobalAveragePool", [x])
        s = self.node("Relu", [self.conv(s, c, hidden, 1, bias=True)])
        gate = self.node("HardSigmoid", [self.conv(s, hidden, c, 1, bias=True)],
                         alpha=1 / 6, beta=0.5)
        return self.node("Mul", [gate, x])

    def inverted_residual(self, x: str, cin: int, spec: tuple) -> str:
        k, expanded, cout, se, act, stride = spec
        y = x if expanded == cin else self.conv_bn(x, cin, expanded, 1, act=act)
        y = self.conv_bn(y, expanded, expanded, k, stride, group=expanded, act=act)
        if se:
            y = self.squeeze_excite(y, expanded)
        y = self.conv_bn(y, expanded, cout, 1)
        return self.node("Add", [y, x]) if stride == 1 and cin == cout else y


def build(size: int = 224, seed: int = 3):
    b = _MobileNet(seed)
    x, c = b.conv_bn("input", 3, 16, 3, 2, act="HardSwish"), 16
    for spec in BLOCKS:
        x, c = b.inverted_residual(x, c, spec), spec[2]
    x = b.node("GlobalAveragePool", [b.conv_bn(x, c, 960, 1, act="HardSwish")])
    x = b.node("Flatten", [x], axis=1)
    x = b.node("HardSwish", [b.gemm(x, b.dense_weight(960, 1280, 2.0 ** 0.5))])
    b.gemm(x, b.dense_weight(1280, 1000), out="logits")
    model = b.model("mobilenet_v3_like", [("input", TensorProto.FLOAT, [1, 3, size, size])],
                    [("logits", TensorProto.FLOAT, [1, 1000])])
    image = b.rng.standard_normal((1, 3, size, size), np.float32)
    return calibrate_batch_norms(model, {"input": image})
