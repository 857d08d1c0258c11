"""Generate the small sequence / attention / control-flow models kept in tests/models/.

    .venv/bin/python -m tests.models.make_seq_models      # rewrites the .onnx files

Weights come from a fixed seed, so the files are reproducible. Each model stays far below
1 MB and exercises a family of ops the way real models use them:

* speech_lstm_gru.onnx  feature frames -> bidirectional LSTM -> bidirectional GRU -> linear
                        -> LogSoftmax (a CTC-style acoustic model)
* transformer_encoder.onnx  one pre-norm encoder block: LayerNormalization, multi-head
                        attention with a padding mask (Equal + Where), Softmax, Erf-based
                        Gelu feed-forward, residuals, mean pooling
* dynamic_if.onnx       nested Ifs whose conditions depend on the input, then TopK
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
F = TensorProto.FLOAT


class Builder:
    """Collects nodes and seeded initializers for one graph."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name, *shape, scale=None):
        scale = scale if scale is not None else 1 / math.sqrt(shape[-1] if len(shape) > 1 else 1)
        return self.const(name, self.rng.uniform(-scale, scale, shape).astype(np.float32))

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attrs))
        return output

    def model(self, name, inputs, outputs, opset):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="tensorforge-tests")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


# ---------------------------------------------------------------- speech model

FRAMES, FEATURES, HIDDEN, LABELS = 50, 40, 48, 29


def _bidirectional_layer(b: Builder, op: str, x: str, in_size: int, name: str) -> str:
    """[T, 1, in] -> [T, 1, 2*HIDDEN]: the two directions' outputs side by side."""
    gates = {"LSTM": 4, "GRU": 3}[op]
    w = b.weight(f"{name}_W", 2, gates * HIDDEN, in_size)
    r = b.weight(f"{name}_R", 2, gates * HIDDEN, HIDDEN)
    bias = b.weight(f"{name}_B", 2, 2 * gates * HIDDEN, scale=0.1)
    b.nodes.append(helper.make_node(op, [x, w, r, bias], [f"{name}_Y"], name=name,
                                    hidden_size=HIDDEN, direction="bidirectional"))
    y = b.op("Transpose", [f"{name}_Y"], f"{name}_time_major", perm=[0, 2, 1, 3])
    return b.op("Reshape", [y, b.const(f"{name}_shape", np.array([0, 0, -1], np.int64))],
                f"{name}_out")


def speech_model() -> onnx.ModelProto:
    b = Builder(seed=1)
    x = b.op("Transpose", ["features"], "frames", perm=[1, 0, 2])      # [T, batch, F]
    h = _bidirectional_layer(b, "LSTM", x, FEATURES, "lstm")
    h = _bidirectional_layer(b, "GRU", h, 2 * HIDDEN, "gru")
    logits = b.op("MatMul", [h, b.weight("proj_W", 2 * HIDDEN, LABELS)], "proj")
    logits = b.op("Add", [logits, b.weight("proj_b", LABELS, scale=0.1)], "logits")
    b.op("LogSoftmax", [logits], "log_probs", axis=-1)
    return b.model("speech_lstm_gru",
                   [helper.make_tensor_value_info("features", F, [1, FRAMES, FEATURES])],
                   [helper.make_tensor_value_info("log_probs", F, [FRAMES, 1, LABELS])], 14)


# ---------------------------------------------------------------- transformer encoder

SEQ, DIM, HEADS, FFN = 16, 64, 4, 256


def _layer_norm(b: Builder, x: str, name: str) -> str:
    scale = b.const(f"{name}_scale", 1 + b.rng.uniform(-0.1, 0.1, DIM).astype(np.float32))
    bias = b.const(f"{name}_bias", b.rng.uniform(-0.1, 0.1, DIM).astype(np.float32))
    return b.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)


def _linear(b: Builder, x: str, n_in: int, n_out: int, name: str) -> str:
    y = b.op("MatMul", [x, b.weight(f"{name}_W", n_in, n_out)], f"{name}_mm")
    return b.op("Add", [y, b.weight(f"{name}_b", n_out, scale=0.05)], name)


def _heads(b: Builder, x: str, name: str, perm) -> str:
    """[1, SEQ, DIM] -> per-head layout given by `perm` of [1, SEQ, HEADS, DIM/HEADS]."""
    shape = b.const(f"{name}_shape", np.array([1, SEQ, HEADS, DIM // HEADS], np.int64))
    return b.op("Transpose", [b.op("Reshape", [x, shape], f"{name}_split")], f"{name}_heads",
                perm=perm)


def _attention(b: Builder, h: str, mask: str) -> str:
    q = _heads(b, _linear(b, h, DIM, DIM, "q"), "q", [0, 2, 1, 3])      # [1, H, S, d]
    k = _heads(b, _linear(b, h, DIM, DIM, "k"), "k", [0, 2, 3, 1])      # [1, H, d, S]
    v = _heads(b, _linear(b, h, DIM, DIM, "v"), "v", [0, 2, 1, 3])
    scores = b.op("MatMul", [q, k], "scores")
    scale = b.const("inv_sqrt_d", np.array(1 / math.sqrt(DIM // HEADS), np.float32))
    scores = b.op("Mul", [scores, scale], "scaled_scores")
    masked = b.op("Where", [mask, b.const("neg_big", np.array(-1e4, np.float32)), scores],
                  "masked_scores")
    probs = b.op("Softmax", [masked], "probs", axis=-1)
    context = b.op("Transpose", [b.op("MatMul", [probs, v], "context")], "context_t",
                   perm=[0, 2, 1, 3])
    merged = b.op("Reshape", [context, b.const("merge_shape", np.array([1, SEQ, DIM], np.int64))],
                  "context_merged")
    return _linear(b, merged, DIM, DIM, "attn_out")


def _gelu(b: Builder, x: str) -> str:
    """0.5 * x * (1 + erf(x / sqrt(2))), as exporters write it."""
    scaled = b.op("Div", [x, b.const("sqrt2", np.array(math.sqrt(2), np.float32))], "gelu_div")
    erf = b.op("Erf", [scaled], "gelu_erf")
    one_plus = b.op("Add", [erf, b.const("one", np.array(1, np.float32))], "gelu_add")
    y = b.op("Mul", [x, one_plus], "gelu_mul")
    return b.op("Mul", [y, b.const("half", np.array(0.5, np.float32))], "gelu")


def transformer_model() -> onnx.ModelProto:
    b = Builder(seed=2)
    padding = b.op("Equal", ["attention_mask", b.const("zero", np.array(0, np.int64))], "padding")
    mask = b.op("Unsqueeze", [padding, b.const("mask_axes", np.array([1, 2], np.int64))],
                "mask")                                                  # [1, 1, 1, S]
    x1 = b.op("Add", ["embeddings", _attention(b, _layer_norm(b, "embeddings", "ln1"), mask)],
              "residual1")
    ffn = _linear(b, _gelu(b, _linear(b, _layer_norm(b, x1, "ln2"), DIM, FFN, "ffn1")),
                  FFN, DIM, "ffn2")
    encoded = b.op("Add", [x1, ffn], "encoded")
    b.op("ReduceMean", [encoded], "pooled", axes=[1], keepdims=0)
    return b.model("transformer_encoder",
                   [helper.make_tensor_value_info("embeddings", F, [1, SEQ, DIM]),
                    helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, SEQ])],
                   [helper.make_tensor_value_info("encoded", F, [1, SEQ, DIM]),
                    helper.make_tensor_value_info("pooled", F, [1, DIM])], 17)


# ---------------------------------------------------------------- data-dependent If

ROWS, COLS = 4, 8


def _branch(name, nodes, output):
    return helper.make_graph(nodes, name, [],
                             [helper.make_tensor_value_info(output, F, [ROWS, COLS])])


def dynamic_if_model() -> onnx.ModelProto:
    """sum(x) > 0 ? (max(x) > 0.9 ? 2 * softmax(x) : softmax(x) + 1) : -tanh(x); then TopK."""
    b = Builder(seed=3)
    b.const("two", np.array(2, np.float32))
    b.const("one", np.array(1, np.float32))
    b.const("zero", np.array(0, np.float32))
    b.const("high", np.array(0.9, np.float32))
    b.const("k", np.array([3], np.int64))
    inner = helper.make_node(
        "If", ["is_peaked"], ["inner_out"], name="inner_if",
        then_branch=_branch("peaked", [helper.make_node("Mul", ["soft", "two"], ["peaked_out"])],
                            "peaked_out"),
        else_branch=_branch("flat", [helper.make_node("Add", ["soft", "one"], ["flat_out"])],
                            "flat_out"))
    then_branch = _branch("positive", [
        helper.make_node("Softmax", ["x"], ["soft"], axis=1),
        helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
        helper.make_node("Greater", ["peak", "high"], ["is_peaked"]),
        inner], "inner_out")
    else_branch = _branch("negative", [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Neg", ["t"], ["neg_out"])], "neg_out")
    total = b.op("ReduceSum", ["x"], "total", keepdims=0)
    b.op("Greater", [total, "zero"], "is_positive")
    b.nodes.append(helper.make_node("If", ["is_positive"], ["branch_out"], name="outer_if",
                                    then_branch=then_branch, else_branch=else_branch))
    b.nodes.append(helper.make_node("TopK", ["branch_out", "k"], ["top_values", "top_indices"],
                                    name="topk", axis=1))
    return b.model("dynamic_if",
                   [helper.make_tensor_value_info("x", F, [ROWS, COLS])],
                   [helper.make_tensor_value_info("top_values", F, [ROWS, 3]),
                    helper.make_tensor_value_info("top_indices", TensorProto.INT64, [ROWS, 3])],
                   13)


MODELS = {"speech_lstm_gru.onnx": speech_model, "transformer_encoder.onnx": transformer_model,
          "dynamic_if.onnx": dynamic_if_model}


def main() -> None:
    for filename, make in MODELS.items():
        path = HERE / filename
        onnx.save(make(), path)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
