"""One step of a WaveRNN-style sampling net at batch 1 (issue 7), dense or block-sparse.

    x (1, 64): the previous sample's embedding and the conditioning features
    h (1, 384): the GRU state
    GRU(hidden 384, linear_before_reset=1, as PyTorch exports nn.GRU) -> h_next (1, 384)
    Gemm 384->256 + Relu -> Gemm 256->256 -> Softmax -> probs (1, 256)

Sparsity ("1x8 blocks"): in every weight matrix (the GRU's W (1, 3*384, 64) and R
(1, 3*384, 384), both Gemm weights (out, in) with transB=1) a block is 1 row by 8 consecutive
columns of the ONNX tensor's last axis. In all four the last axis is the input dimension, so
one block is one output unit's weights for 8 consecutive inputs: the 8 products a vector FMA
would do together are zero together. `density` is the exact fraction of blocks kept, chosen
at random per matrix; kept weights are scaled by 1/sqrt(density) so activations keep their
dense scale.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph_builder import GraphBuilder

INPUT, HIDDEN, FC, CLASSES, BLOCK = 64, 384, 256, 256, 8


def block_sparse(w: np.ndarray, density: float, rng: np.random.Generator) -> np.ndarray:
    """w with all but `density` of its 1xBLOCK blocks (along the last axis) set to zero."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"the last axis ({w.shape[-1]}) must be a multiple of {BLOCK}")
    blocks = w.reshape(-1, BLOCK)
    keep = np.zeros(len(blocks), bool)
    keep[rng.choice(len(blocks), round(density * len(blocks)), replace=False)] = True
    return (blocks * keep[:, None] / density ** 0.5).reshape(w.shape)


def build(density: float = 1.0, seed: int = 24):
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    b = GraphBuilder(seed)
    def weight(shape, scale):
        w = b.rng.uniform(-scale, scale, shape)
        return w if density == 1.0 else block_sparse(w, density, b.rng)
    bound = HIDDEN ** -0.5  # nn.GRU's initialisation
    w = b.f32(weight((1, 3 * HIDDEN, INPUT), bound), "gru_W")
    r = b.f32(weight((1, 3 * HIDDEN, HIDDEN), bound), "gru_R")
    bias = b.f32(b.rng.uniform(-bound, bound, (1, 6 * HIDDEN)), "gru_B")
    x = b.node("Unsqueeze", ["x", b.ints([0], "axes")])
    h0 = b.node("Unsqueeze", ["h", b.ints([0], "axes")])
    _, h1 = b.node("GRU", [x, w, r, bias, "", h0], n_out=2, hidden_size=HIDDEN,
                   linear_before_reset=1)
    b.node("Squeeze", [h1, b.ints([0], "axes")], out="h_next")
    y = b.node("Relu", [b.gemm("h_next", weight((FC, HIDDEN), (6 / HIDDEN) ** 0.5))])
    logits = b.gemm(y, weight((CLASSES, FC), (3 / FC) ** 0.5))
    b.node("Softmax", [logits], out="probs", axis=-1)
    name = "wavernn_step" if density == 1.0 else f"wavernn_step_sparse{round(100 * density)}"
    return b.model(name, [("x", TensorProto.FLOAT, [1, INPUT]), ("h", TensorProto.FLOAT, [1, HIDDEN])],
                   [("probs", TensorProto.FLOAT, [1, CLASSES]),
                    ("h_next", TensorProto.FLOAT, [1, HIDDEN])])
