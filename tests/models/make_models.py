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
from onnx import TensorProto

from .graph_builder import GraphBuilder

HERE = Path(__file__).parent


def _conv_bn(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride=1, group=1) -> str:
    return _batch_norm(b, b.conv(x, cin, cout, k, stride, group), cout)


def _batch_norm(b: GraphBuilder, x: str, c: int) -> str:
    """Random running statistics (not calibrated): this model checks ops, not accuracy."""
    params = [b.rng.uniform(0.5, 1.5, c), b.rng.normal(0, 0.1, c),
              b.rng.normal(0, 0.1, c), b.rng.uniform(0.5, 1.5, c)]
    return b.node("BatchNormalization", [x, *[b.f32(p, "bn") for p in params]], epsilon=1e-5)


def _squeeze_excite(b: GraphBuilder, x: str, c: int, hidden: int) -> str:
    s = b.node("GlobalAveragePool", [x])
    w1 = b.rng.normal(0, 0.3, (hidden, c, 1, 1))
    w2 = b.rng.normal(0, 0.3, (c, hidden, 1, 1))
    s = b.node("Relu", [b.node("Conv", [s, b.f32(w1), b.f32(np.zeros(hidden))])])
    gate = b.node("HardSigmoid", [b.node("Conv", [s, b.f32(w2)])], alpha=0.2, beta=0.5)
    return b.node("Mul", [x, gate])


def mobile_cnn() -> onnx.ModelProto:
    b = GraphBuilder(seed=0)
    x = b.node("HardSwish", [_conv_bn(b, "image", 3, 16, 3, stride=2)])         # 16x16
    x = b.node("Relu", [_conv_bn(b, x, 16, 16, 3, group=16)])                   # depthwise
    x = _conv_bn(b, x, 16, 32, 1)                                               # pointwise
    x = b.node("HardSwish", [_squeeze_excite(b, x, 32, 8)])
    x = b.node("Relu", [_conv_bn(b, x, 32, 32, 3, stride=2, group=32)])        # 8x8
    x = b.node("HardSwish", [_conv_bn(b, x, 32, 48, 1)])
    up = b.node("Resize", [x, "", b.f32([1, 1, 2, 2], "scales")], mode="linear")  # 16x16
    wt = b.rng.normal(0, 0.1, (48, 8, 4, 4))
    dense = b.node("ConvTranspose", [up, b.f32(wt), b.f32(np.zeros(8))],
                   strides=[2, 2], pads=[1, 1, 1, 1])                           # 32x32
    pooled = b.node("AveragePool", [b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])],
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
    flat = b.node("Flatten", [b.node("GlobalAveragePool", [pooled])])
    fc = b.rng.normal(0, 0.2, (10, 48))
    logits = b.node("Gemm", [flat, b.f32(fc), b.f32(np.zeros(10))], transB=1)
    return b.model("mobile_cnn", [("image", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [(dense, TensorProto.FLOAT, [1, 8, 32, 32]),
                    (logits, TensorProto.FLOAT, [1, 10])])


MODELS = {"mobile_cnn.onnx": mobile_cnn}


def main() -> None:
    for filename, build in MODELS.items():
        onnx.save(build(), HERE / filename)
        print(f"wrote {HERE / filename} ({(HERE / filename).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
