"""Constant weights stored at reduced precision (opt-in: `cc.compile(..., weight_dtype=...)`).

Small batch-1 models (speech, sampling nets) stream every weight once per call, so their
speed is the speed at which weights come from the caches; half or a quarter of the bytes
keeps more of them in L1/L2. Activations between kernels stay float32:

* float16: the weights are stored as half and widened in registers (vcvtph2ps, F16C on
  x86; fcvtl on Arm).
* int8: symmetric, one scale per output channel (scale = max |w| / 127 over the channel's
  weights, q = round(w / scale)); the channel's dot product is multiplied by its scale
  once, never each weight. PackedGemm multiplies q as integers by its input rounded to
  int16 (kernels/packed_gemm.py); the recurrent and sparse kernels widen q in registers
  (sign-extend, convert).

Converted: the packed weights of PackedGemm (constant-weight MatMul/Gemm), the nonzero
blocks of SparseGemm (block-sparse layers), and the W and R of LSTM/GRU/RNN. The pass runs last, after pack_weights, on the layouts the kernels read.
New node inputs: PackedGemm's scale vector (one per packed column) at input 4 (and its int8
panels in pairs of rows, with two scratch outputs: kernels/packed_gemm.py); a
recurrent node's W and R scales ([dirs, gates*H] each) at inputs 8 and 9; SparseGemm's
scale per output at input 5.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..codegen.target_machine import MachineSpec
from ..errors import CompileError
from ..ir import Graph, Node, Value
from ..kernels.packed_gemm import gemm_dims, pair_rows, plain_gemm_schedule

WEIGHT_DTYPES = ("float32", "float16", "int8")
RECURRENT = ("LSTM", "GRU", "RNN")
GEMM_SCALE, RECURRENT_SCALES, SPARSE_SCALE = 4, 8, 5  # input positions of the int8 scales


def check_weight_dtype(weight_dtype: str, spec: MachineSpec) -> None:
    """CompileError unless `weight_dtype` is known and the target can widen it in registers."""
    if weight_dtype not in WEIGHT_DTYPES:
        raise CompileError(f"unknown weight_dtype {weight_dtype!r}; valid: "
                           f"{', '.join(WEIGHT_DTYPES)}")
    missing = _missing_features(weight_dtype, spec)
    if missing:
        raise CompileError(f"weight_dtype {weight_dtype!r} needs {missing}, which target cpu "
                           f"{spec.cpu!r} ({spec.arch}) lacks; use weight_dtype 'float32' or a "
                           "target that has it")


def _missing_features(weight_dtype: str, spec: MachineSpec) -> str:
    if weight_dtype == "float32" or spec.arch == "aarch64":  # NEON converts half and int8
        return ""
    if spec.arch != "x86_64":
        return f"vector conversions from {weight_dtype} that Tensorforge knows only on x86-64 and Arm"
    have = set(spec.features.split(","))
    need = {"float16": ("+f16c", "F16C (vcvtph2ps: half to float in registers)"),
            "int8": ("+avx2", "AVX2 (vpmovsxbd: int8 to int32 lanes in registers)")}
    feature, what = need[weight_dtype]
    return "" if feature in have else what


def store_weights_as(weight_dtype: str) -> Callable[[Graph], Graph]:
    """The pass storing dense and recurrent weights as `weight_dtype`."""
    def reduce_weight_precision(graph: Graph) -> Graph:
        if weight_dtype == "float32":
            return graph
        nodes = [_converted(n, weight_dtype) for n in graph.nodes]
        return Graph(graph.inputs, graph.outputs, nodes, graph.name, graph.opset)
    return reduce_weight_precision


def quantize_int8(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(q, scale): symmetric per-channel int8, reducing over `axis` (the input dimension), so
    w ~= q * scale with scale broadcast back along `axis`. All-zero channels get scale 1 (q
    is 0 there anyway): kernels may divide by a scale."""
    scale = _int8_scale(np.max(np.abs(w), axis=axis, keepdims=True))
    return _to_int8(w, scale), np.squeeze(scale, axis)


def plain_products(weight_dtype: str, spec: MachineSpec):
    """A pass: with int8 weights every PackedGemm runs the plain product. Its integer tile
    multiplies rows of A rounded on their own scales, and Strassen's products read sums of
    A's quadrants (kernels/strassen.py). Runs before pack_weights, which follows the
    schedule; float16 panels of Strassen's weight combinations are widened as any others."""
    def plain_products(graph: Graph) -> Graph:
        for n in graph.nodes:
            if weight_dtype == "int8" and n.op == "PackedGemm" and n.schedule.strassen:
                n.schedule = plain_gemm_schedule(n, spec)
        return graph
    return plain_products


def _int8_scale(amax: np.ndarray) -> np.ndarray:
    """Per channel: its largest |weight| / 127, so that weight becomes +-127."""
    return np.where(amax == 0, np.float32(1), amax.astype(np.float32) / np.float32(127))


def _to_int8(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8)


def _converted(n: Node, weight_dtype: str) -> Node:
    if n.op == "PackedGemm" and n.inputs[1].dtype == np.float32:
        inputs, scales = _reduced_inputs(n, [1], weight_dtype, axis=1)
        n = _with_scales(n, inputs, GEMM_SCALE, [s.reshape(-1) if s is not None else None
                                                 for s in scales])
        return _integer_gemm(n) if weight_dtype == "int8" else n
    if n.op in RECURRENT and all(n.inputs[k].is_const for k in (1, 2)):
        inputs, scales = _reduced_inputs(n, [1, 2], weight_dtype, axis=1)
        return _with_scales(n, inputs, RECURRENT_SCALES, scales)
    if n.op == "SparseGemm" and n.inputs[1].dtype == np.float32:
        return _sparse_converted(n, weight_dtype)
    return n


def _integer_gemm(n: Node) -> Node:
    """PackedGemm with int8 panels as the integer tile reads them (rows in pairs), and
    the scratch it rounds A into: int16 pairs per row and a scale per row."""
    w, y = n.inputs[1], n.outputs[0]
    paired = pair_rows(w.const)
    M, _, K = gemm_dims(n)
    inputs = list(n.inputs)
    inputs[1] = Value(f"{w.name}_pairs", paired.shape, paired.dtype, const=paired)
    scratch = [Value(f"{y.name}_a_pairs", (M * -(-K // 2),), np.int32),
               Value(f"{y.name}_a_scales", (M,), np.float32)]
    return dataclasses.replace(n, inputs=inputs, outputs=[y, *scratch])


def _sparse_converted(n: Node, weight_dtype: str) -> Node:
    """SparseGemm's nonzero blocks (values (blocks, bh * bw)) as float16, or int8 with the
    scale of each output (input 5): its largest weight over all of its blocks."""
    values = n.inputs[1].const
    inputs = list(n.inputs) + [None] * (SPARSE_SCALE - len(n.inputs))
    if weight_dtype == "float16":
        data = values.astype(np.float16)
    else:
        output = _sparse_outputs(n)
        amax = np.zeros(n.outputs[0].shape[-1], np.float32)
        np.maximum.at(amax, output.ravel(), np.abs(values).ravel())
        scale = _int8_scale(amax)
        data = _to_int8(values, scale[output])
        inputs.append(Value(f"{n.inputs[1].name}_scale", scale.shape, np.float32, const=scale))
    inputs[1] = Value(f"{n.inputs[1].name}_{weight_dtype}", data.shape, data.dtype, const=data)
    return dataclasses.replace(n, inputs=inputs)


def _sparse_outputs(n: Node) -> np.ndarray:
    """The output column of every stored SparseGemm weight, shaped like values: block b
    belongs to processed row r (rows[r] = its block row), lane l to output row l // bw of it."""
    bh, bw = n.attrs["block"]
    per_row = [count for count, rows in n.attrs["groups"] for _ in range(rows)]
    block_row = np.repeat(n.inputs[3].const.astype(np.int64), per_row)
    return block_row[:, None] * bh + np.arange(bh * bw)[None, :] // bw


def _reduced_inputs(n: Node, positions, weight_dtype, axis):
    """The node's inputs with those at `positions` converted, and their int8 scales."""
    inputs, scales = list(n.inputs), []
    for k in positions:
        w = inputs[k]
        if weight_dtype == "int8":
            data, scale = quantize_int8(w.const, axis)
        else:
            data, scale = w.const.astype(np.float16), None
        inputs[k] = Value(f"{w.name}_{weight_dtype}", data.shape, data.dtype, const=data)
        scales.append(scale)
    return inputs, scales


def _with_scales(n: Node, inputs, at: int, scales) -> Node:
    if scales[0] is not None:
        inputs = inputs + [None] * (at - len(inputs))
        inputs += [Value(f"{n.inputs[1].name}_scale{k}", s.shape, np.float32, const=s)
                   for k, s in enumerate(scales)]
    return dataclasses.replace(n, inputs=inputs)


def reduced_layers(graph: Graph) -> list[dict]:
    """Which kernels read reduced-precision weights, and how many (for meta.json)."""
    layers = []
    for n in graph.nodes:
        stored = [n.inputs[k] for k in _WEIGHTS.get(n.op, ())
                  if n.inputs[k] is not None and n.inputs[k].dtype in (np.float16, np.int8)]
        if stored:
            layers.append({"node": n.name, "op": n.op, "weights": sum(v.size for v in stored)})
    return layers


_WEIGHTS = {"PackedGemm": (1,), "SparseGemm": (1,), **{op: (1, 2) for op in RECURRENT}}
