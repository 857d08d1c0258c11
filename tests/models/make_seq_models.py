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

import onnx
from onnx import TensorProto, helper

from .graph_builder import GraphBuilder

HERE = Path(__file__).resolve().parent
F = TensorProto.FLOAT


def _weight(b: GraphBuilder, name: str, *shape, scale=None) -> str:
    """Uniform in +-scale, by default +-1/sqrt(fan_in) (the last dim), as PyTorch initialises."""
    scale = scale if scale is not None else 1 / math.sqrt(shape[-1] if len(shape) > 1 else 1)
    return b.f32(b.rng.uniform(-scale, scale, shape), name=name)


# ---------------------------------------------------------------- speech model

FRAMES, FEATURES, HIDDEN, LABELS = 50, 40, 48, 29


def _bidirectional_layer(b: GraphBuilder, op: str, x: str, in_size: int, name: str) -> str:
    """[T, 1, in] -> [T, 1, 2*HIDDEN]: the two directions' outputs side by side."""
    gates = {"LSTM": 4, "GRU": 3}[op]
    w = _weight(b, f"{name}_W", 2, gates * HIDDEN, in_size)
    r = _weight(b, f"{name}_R", 2, gates * HIDDEN, HIDDEN)
    bias = _weight(b, f"{name}_B", 2, 2 * gates * HIDDEN, scale=0.1)
    y = b.node(op, [x, w, r, bias], out=f"{name}_Y", hidden_size=HIDDEN,
               direction="bidirectional")
    y = b.node("Transpose", [y], out=f"{name}_time_major", perm=[0, 2, 1, 3])
    return b.node("Reshape", [y, b.ints([0, 0, -1], name=f"{name}_shape")], out=f"{name}_out")


def speech_model() -> onnx.ModelProto:
    b = GraphBuilder(seed=1)
    x = b.node("Transpose", ["features"], out="frames", perm=[1, 0, 2])      # [T, batch, F]
    h = _bidirectional_layer(b, "LSTM", x, FEATURES, "lstm")
    h = _bidirectional_layer(b, "GRU", h, 2 * HIDDEN, "gru")
    logits = b.node("MatMul", [h, _weight(b, "proj_W", 2 * HIDDEN, LABELS)], out="proj")
    logits = b.node("Add", [logits, _weight(b, "proj_b", LABELS, scale=0.1)], out="logits")
    b.node("LogSoftmax", [logits], out="log_probs", axis=-1)
    return b.model("speech_lstm_gru", [("features", F, [1, FRAMES, FEATURES])],
                   [("log_probs", F, [FRAMES, 1, LABELS])], opset=14)


# ---------------------------------------------------------------- transformer encoder

SEQ, DIM, HEADS, FFN = 16, 64, 4, 256


def _layer_norm(b: GraphBuilder, x: str, name: str) -> str:
    scale = b.f32(1 + b.rng.uniform(-0.1, 0.1, DIM), name=f"{name}_scale")
    bias = b.f32(b.rng.uniform(-0.1, 0.1, DIM), name=f"{name}_bias")
    return b.node("LayerNormalization", [x, scale, bias], out=name, axis=-1, epsilon=1e-5)


def _linear(b: GraphBuilder, x: str, n_in: int, n_out: int, name: str) -> str:
    y = b.node("MatMul", [x, _weight(b, f"{name}_W", n_in, n_out)], out=f"{name}_mm")
    return b.node("Add", [y, _weight(b, f"{name}_b", n_out, scale=0.05)], out=name)


def _heads(b: GraphBuilder, x: str, name: str, perm) -> str:
    """[1, SEQ, DIM] -> per-head layout given by `perm` of [1, SEQ, HEADS, DIM/HEADS]."""
    shape = b.ints([1, SEQ, HEADS, DIM // HEADS], name=f"{name}_shape")
    split = b.node("Reshape", [x, shape], out=f"{name}_split")
    return b.node("Transpose", [split], out=f"{name}_heads", perm=perm)


def _attention(b: GraphBuilder, h: str, mask: str) -> str:
    q = _heads(b, _linear(b, h, DIM, DIM, "q"), "q", [0, 2, 1, 3])      # [1, H, S, d]
    k = _heads(b, _linear(b, h, DIM, DIM, "k"), "k", [0, 2, 3, 1])      # [1, H, d, S]
    v = _heads(b, _linear(b, h, DIM, DIM, "v"), "v", [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], out="scores")
    scale = b.f32(1 / math.sqrt(DIM // HEADS), name="inv_sqrt_d")
    scores = b.node("Mul", [scores, scale], out="scaled_scores")
    masked = b.node("Where", [mask, b.f32(-1e4, name="neg_big"), scores], out="masked_scores")
    probs = b.node("Softmax", [masked], out="probs", axis=-1)
    context = b.node("Transpose", [b.node("MatMul", [probs, v], out="context")],
                     out="context_t", perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [context, b.ints([1, SEQ, DIM], name="merge_shape")],
                    out="context_merged")
    return _linear(b, merged, DIM, DIM, "attn_out")


def _gelu(b: GraphBuilder, x: str) -> str:
    """0.5 * x * (1 + erf(x / sqrt(2))), as exporters write it."""
    scaled = b.node("Div", [x, b.f32(math.sqrt(2), name="sqrt2")], out="gelu_div")
    erf = b.node("Erf", [scaled], out="gelu_erf")
    one_plus = b.node("Add", [erf, b.f32(1, name="one")], out="gelu_add")
    y = b.node("Mul", [x, one_plus], out="gelu_mul")
    return b.node("Mul", [y, b.f32(0.5, name="half")], out="gelu")


def transformer_model() -> onnx.ModelProto:
    b = GraphBuilder(seed=2)
    padding = b.node("Equal", ["attention_mask", b.ints(0, name="zero")], out="padding")
    mask = b.node("Unsqueeze", [padding, b.ints([1, 2], name="mask_axes")],
                  out="mask")                                                # [1, 1, 1, S]
    x1 = b.node("Add", ["embeddings", _attention(b, _layer_norm(b, "embeddings", "ln1"), mask)],
                out="residual1")
    ffn = _linear(b, _gelu(b, _linear(b, _layer_norm(b, x1, "ln2"), DIM, FFN, "ffn1")),
                  FFN, DIM, "ffn2")
    encoded = b.node("Add", [x1, ffn], out="encoded")
    b.node("ReduceMean", [encoded], out="pooled", axes=[1], keepdims=0)
    return b.model("transformer_encoder",
                   [("embeddings", F, [1, SEQ, DIM]),
                    ("attention_mask", TensorProto.INT64, [1, SEQ])],
                   [("encoded", F, [1, SEQ, DIM]), ("pooled", F, [1, DIM])], opset=17)


# ---------------------------------------------------------------- data-dependent If

ROWS, COLS = 4, 8


def _branch(name, nodes, output):
    return helper.make_graph(nodes, name, [],
                             [helper.make_tensor_value_info(output, F, [ROWS, COLS])])


def dynamic_if_model() -> onnx.ModelProto:
    """sum(x) > 0 ? (max(x) > 0.9 ? 2 * softmax(x) : softmax(x) + 1) : -tanh(x); then TopK."""
    b = GraphBuilder(seed=3)
    for name, value in (("two", 2), ("one", 1), ("zero", 0), ("high", 0.9)):
        b.f32(value, name=name)  # the branches refer to them by name
    b.ints([3], name="k")
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
    total = b.node("ReduceSum", ["x"], out="total", keepdims=0)
    b.node("Greater", [total, "zero"], out="is_positive")
    b.nodes.append(helper.make_node("If", ["is_positive"], ["branch_out"], name="outer_if",
                                    then_branch=then_branch, else_branch=else_branch))
    b.nodes.append(helper.make_node("TopK", ["branch_out", "k"], ["top_values", "top_indices"],
                                    name="topk", axis=1))
    return b.model("dynamic_if", [("x", F, [ROWS, COLS])],
                   [("top_values", F, [ROWS, 3]), ("top_indices", TensorProto.INT64, [ROWS, 3])],
                   opset=13)


MODELS = {"speech_lstm_gru.onnx": speech_model, "transformer_encoder.onnx": transformer_model,
          "dynamic_if.onnx": dynamic_if_model}


def main() -> None:
    for filename, make in MODELS.items():
        path = HERE / filename
        onnx.save(make(), path)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
