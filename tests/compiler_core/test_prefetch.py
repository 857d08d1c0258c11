"""Weights (and a conv's packed input panels) are prefetched ahead of the register tiles
that stream them, except in tiles of too few rows to outrun the hardware's prefetchers
(kernels/microkernel.py PREFETCH_MIN_ROWS). Prefetches never change results: the model
tests check those; here, that the kernels have them where they should."""
import numpy as np
from onnx import helper

from compiler_core.codegen.target_machine import MachineSpec, host_spec
from compiler_core.frontend.onnx import import_model
from compiler_core.ir import loops
from compiler_core.kernels import lower_node
from compiler_core.passes.pipeline import run_pipeline

from .helpers import make_model, rand

F = np.float32


def prefetches(model, op: str, spec: MachineSpec | None = None) -> list[loops.Prefetch]:
    spec = spec or host_spec()
    graph = run_pipeline(import_model(model), 3, spec)
    node = next(n for n in graph.nodes if n.op == op)
    found = []

    def walk(body):
        for s in body:
            if isinstance(s, loops.Prefetch):
                found.append(s)
            for inner in (getattr(s, "body", None), getattr(s, "then", None),
                          getattr(s, "orelse", None)):
                walk(inner or [])
    walk(lower_node(node, "k", spec).body)
    return found


def conv(c, oc, hw, k):
    w = rand(oc, c, k, k, seed=1, low=-0.1, high=0.1)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k],
                                        pads=[k // 2] * 4)],
                      [("x", F, (1, c, hw, hw))], [("y", F, (1, oc, hw, hw))], [("w", w)])


def test_a_1x1_conv_prefetches_its_weights_and_its_packed_input():
    found = prefetches(conv(256, 64, 56, 1), "Conv")
    assert {s.level for s in found} == {1, 2}  # input panels into L1, weights into L2
    assert {s.buf.name for s in found if s.level == 2} != {s.buf.name for s in found
                                                           if s.level == 1}


# where a 3x3 conv of 512 channels at 7x7 puts channels over the lanes (AVX2 and Zen 4's
# one FMA port take Winograd)
AVX512 = MachineSpec("x86_64-unknown-linux-gnu", "znver5",
                     "+avx,+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl")


def test_a_small_plane_conv_prefetches_its_weight_panels():
    found = prefetches(conv(512, 512, 7, 3), "Conv", AVX512)
    assert found and {s.level for s in found} == {2}


def fully_connected(rows):
    w = rand(256, 512, seed=1)
    return make_model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
                      [("x", F, (rows, 512))], [("y", F, (rows, 256))], [("w", w)])


def test_a_fully_connected_layer_prefetches_its_weights_only_for_many_rows():
    assert prefetches(fully_connected(64), "PackedGemm")
    assert prefetches(fully_connected(1), "PackedGemm") == []
