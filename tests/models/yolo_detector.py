"""A YOLOv8-n-shaped detector (width 0.25, depth 0.33, 80 classes), as Ultralytics exports it
but with BatchNormalization kept as its own node (the compiler folds it).

backbone: Conv(k3 s2) x2, C2f, Conv s2, C2f x2, Conv s2, C2f x2, Conv s2, C2f, SPPF
neck (PAN-FPN): nearest Resize x2 + Concat with P4, C2f, Resize + Concat P3, C2f -> P3 out;
                Conv s2 + Concat, C2f -> P4 out; Conv s2 + Concat with SPPF, C2f -> P5 out
head (decoupled, per level): box branch Conv3-Conv3-Conv1 to 4x16 DFL bins, class branch
                Conv3-Conv3-Conv1 to 80 logits; DFL = Softmax over the 16 bins and a 1x1
                Conv with weights 0..15; boxes decoded against the anchor grid (x1y1x2y2 ->
                cxcywh, times the stride); class scores through Sigmoid.
Output "output0": (1, 84, anchors), anchors = (S/8)^2 + (S/16)^2 + (S/32)^2.
Every Conv block is Conv (no bias) -> BatchNormalization -> SiLU (Sigmoid, Mul).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph_builder import GraphBuilder, calibrate_batch_norms

CLASSES, BINS = 80, 16
STRIDES = (8, 16, 32)


class _Yolo(GraphBuilder):
    def block(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1) -> str:
        return self.silu(self.batch_norm(self.conv(x, cin, cout, k, stride), cout))

    def c2f(self, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
        hidden = cout // 2
        y = self.block(x, cin, 2 * hidden)
        parts = self.node("Split", [y, self.ints([hidden, hidden], "split")], n_out=2, axis=1)
        for _ in range(n):
            z = self.block(self.block(parts[-1], hidden, hidden, 3), hidden, hidden, 3)
            parts.append(self.node("Add", [parts[-1], z]) if shortcut else z)
        return self.block(self.node("Concat", parts, axis=1), (2 + n) * hidden, cout)

    def sppf(self, x: str, cin: int, cout: int) -> str:
        hidden = cin // 2
        pools = [self.block(x, cin, hidden)]
        for _ in range(3):
            pools.append(self.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1],
                                   pads=[2, 2, 2, 2]))
        return self.block(self.node("Concat", pools, axis=1), 4 * hidden, cout)

    def upsample(self, x: str) -> str:
        scales = self.f32([1, 1, 2, 2], "scales")
        return self.node("Resize", [x, "", scales], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def level_head(self, x: str, cin: int) -> str:
        """(1, 4*16 + 80, H*W) for one pyramid level."""
        box_c, cls_c = max(16, cin // 4, 4 * BINS), max(cin, min(CLASSES, 100))
        box = self.block(self.block(x, cin, box_c, 3), box_c, box_c, 3)
        box = self.conv(box, box_c, 4 * BINS, 1, bias=True)
        cls = self.block(self.block(x, cin, cls_c, 3), cls_c, cls_c, 3)
        cls = self.conv(cls, cls_c, CLASSES, 1, bias=True)
        both = self.node("Concat", [box, cls], axis=1)
        return self.node("Reshape", [both, self.ints([1, 4 * BINS + CLASSES, -1])])

    def dfl(self, box: str, anchors: int) -> str:
        """(1, 64, A) bin logits -> (1, 4, A) expected distances."""
        x = self.node("Reshape", [box, self.ints([1, 4, BINS, anchors])])
        x = self.node("Softmax", [self.node("Transpose", [x], perm=[0, 2, 1, 3])], axis=1)
        weights = self.f32(np.arange(BINS, dtype=np.float32).reshape(1, BINS, 1, 1), "dfl")
        return self.node("Reshape", [self.node("Conv", [x, weights]), self.ints([1, 4, anchors])])

    def decode(self, dist: str, size: int) -> str:
        points, strides = anchor_grid(size)
        lt, rb = self.node("Split", [dist, self.ints([2, 2], "split")], n_out=2, axis=1)
        anchor = self.f32(points, "anchors")
        x1y1, x2y2 = self.node("Sub", [anchor, lt]), self.node("Add", [anchor, rb])
        centre = self.node("Div", [self.node("Add", [x1y1, x2y2]), self.f32(2.0, "two")])
        wh = self.node("Sub", [x2y2, x1y1])
        return self.node("Mul", [self.node("Concat", [centre, wh], axis=1),
                                 self.f32(strides, "strides")])


def anchor_grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Anchor centres (1, 2, A) in grid units and the stride of each anchor (1, 1, A)."""
    points, strides = [], []
    for s in STRIDES:
        n = size // s
        ys, xs = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full(n * n, s))
    return (np.concatenate(points, 1)[None].astype(np.float32),
            np.concatenate(strides)[None, None].astype(np.float32))


def build(size: int = 320, seed: int = 8):
    if size % 32:
        raise ValueError(f"the detector's input size must be a multiple of 32, got {size}")
    b = _Yolo(seed)
    x = b.block(b.block("images", 3, 16, 3, 2), 16, 32, 3, 2)
    x = b.c2f(x, 32, 32, 1, True)
    p3 = b.c2f(b.block(x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = b.c2f(b.block(p3, 64, 128, 3, 2), 128, 128, 2, True)
    p5 = b.sppf(b.c2f(b.block(p4, 128, 256, 3, 2), 256, 256, 1, True), 256, 256)
    n4 = b.c2f(b.node("Concat", [b.upsample(p5), p4], axis=1), 384, 128, 1, False)
    o3 = b.c2f(b.node("Concat", [b.upsample(n4), p3], axis=1), 192, 64, 1, False)
    o4 = b.c2f(b.node("Concat", [b.block(o3, 64, 64, 3, 2), n4], axis=1), 192, 128, 1, False)
    o5 = b.c2f(b.node("Concat", [b.block(o4, 128, 128, 3, 2), p5], axis=1), 384, 256, 1, False)
    heads = [b.level_head(o, c) for o, c in ((o3, 64), (o4, 128), (o5, 256))]
    anchors = sum((size // s) ** 2 for s in STRIDES)
    box, cls = b.node("Split", [b.node("Concat", heads, axis=2),
                                b.ints([4 * BINS, CLASSES], "split")], n_out=2, axis=1)
    boxes = b.decode(b.dfl(box, anchors), size)
    b.node("Concat", [boxes, b.node("Sigmoid", [cls])], out="output0", axis=1)
    model = b.model(f"yolov8n_like_{size}", [("images", TensorProto.FLOAT, [1, 3, size, size])],
                    [("output0", TensorProto.FLOAT, [1, 4 + CLASSES, anchors])])
    return calibrate_batch_norms(model, {"images": b.rng.random((1, 3, size, size), np.float32)})
