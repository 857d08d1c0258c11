"""LSTM, GRU and RNN against ONNX Runtime: directions, biases, initial states, peepholes,
sequence lengths, activations, clip and both layouts."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc
from compiler_core.frontend.onnx import import_model

from .helpers import assert_matches, make_model, rand

F = np.float32
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 6, 8


def recurrent_model(op, direction="forward", bias=True, initial=False, peepholes=False,
                    seq_lens=None, layout=0, weights_as_inputs=False, outputs=("Y", "Y_h"),
                    **attrs):
    """One recurrent node; returns (model, feeds)."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = (SEQ, BATCH, INPUT) if layout == 0 else (BATCH, SEQ, INPUT)
    state_shape = (dirs, BATCH, HIDDEN) if layout == 0 else (BATCH, dirs, HIDDEN)
    tensors = {"W": rand(dirs, g * HIDDEN, INPUT, seed=1),
               "R": rand(dirs, g * HIDDEN, HIDDEN, seed=2)}
    if bias:
        tensors["B"] = rand(dirs, 2 * g * HIDDEN, seed=3)
    if seq_lens is not None:
        tensors["sequence_lens"] = np.array(seq_lens, np.int32)
    if initial:
        tensors["initial_h"] = rand(*state_shape, seed=4)
        if op == "LSTM":
            tensors["initial_c"] = rand(*state_shape, seed=5)
    if peepholes:
        tensors["P"] = rand(dirs, 3 * HIDDEN, seed=6)
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    order = order if op == "LSTM" else order[:6]
    names = [n if n == "X" or n in tensors else "" for n in order]
    while names[-1] == "":
        names.pop()
    all_outputs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, [o if o in outputs else "" for o in all_outputs],
                            hidden_size=HIDDEN, direction=direction, **attrs,
                            **({"layout": layout} if layout else {}))
    feeds = {"X": rand(*x_shape, seed=7)}
    if weights_as_inputs:
        feeds.update(tensors)
        inits = []
    else:
        inits = list(tensors.items())
    inputs = [(k, v.dtype, v.shape) for k, v in feeds.items()]
    model = make_model([node], inputs, [(o, F, None) for o in all_outputs if o in outputs], inits,
                       opset=14)
    return model, feeds


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions(op, direction):
    assert_matches(*recurrent_model(op, direction, initial=True))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_sequence_lens_at_run_time(op):
    model, feeds = recurrent_model(op, "bidirectional", seq_lens=[5, 2, 3], initial=True,
                                   weights_as_inputs=True)
    assert_matches(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout(op):
    # ONNX Runtime refuses layout=1; onnx's reference evaluator implements it
    assert_matches(*recurrent_model(op, "bidirectional", initial=True, layout=1), reference="onnx")


def test_lstm_peepholes_clip_and_only_final_states():
    model, feeds = recurrent_model("LSTM", "bidirectional", initial=True, peepholes=True,
                                   clip=0.5, outputs=("Y_h", "Y_c"))
    assert_matches(model, feeds)


def test_lstm_input_forget_without_bias():
    assert_matches(*recurrent_model("LSTM", bias=False, input_forget=1))


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr):
    assert_matches(*recurrent_model("GRU", "bidirectional", initial=True, linear_before_reset=lbr))


def test_alternative_activations():
    model, feeds = recurrent_model("LSTM", activations=["HardSigmoid", "Relu", "Tanh"],
                                   activation_alpha=[0.3], activation_beta=[0.4])
    assert_matches(model, feeds)
    assert_matches(*recurrent_model("RNN", "bidirectional", activations=["Relu", "Sigmoid"]))


def test_weights_are_transposed_at_compile_time():
    graph = import_model(recurrent_model("GRU")[0])
    assert [n.op for n in graph.nodes] == ["GRU"]
    gru = graph.nodes[0]
    assert gru.inputs[1].shape == (1, INPUT, 3 * HIDDEN) and gru.inputs[1].is_const
    assert gru.attrs["activations"] == [[["sigmoid", None, None], ["tanh", None, None]]]


def test_unknown_activation_is_reported():
    model, _ = recurrent_model("RNN", activations=["Swish"])
    with pytest.raises(cc.CompileError, match="activation 'Swish' is not supported"):
        cc.compile(model)


def test_wrong_initial_state_shape_is_reported():
    model, feeds = recurrent_model("GRU", initial=True)
    init = next(t for t in model.graph.initializer if t.name == "initial_h")
    init.dims[:] = [1, 1, BATCH * HIDDEN]
    with pytest.raises(cc.CompileError, match=r"initial_h must have shape \[1, 3, 8\]"):
        cc.compile(model, input_shapes={"X": feeds["X"].shape})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_directions_on_two_threads_match_one_thread(op, tmp_path, monkeypatch):
    """A bidirectional node's directions are a parallel loop of two items (here forced by a
    zero threshold): the same results at 1 and 2 threads, with sequence lengths too."""
    from compiler_core.kernels import recurrent

    monkeypatch.setattr(recurrent, "PARALLEL_DIRECTION_FLOPS", 0)
    model, feeds = recurrent_model(op, "bidirectional", initial=True,
                                   seq_lens=[SEQ] + [SEQ - 2] * (BATCH - 1))
    compiled = cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()})
    compiled.save(tmp_path)
    one, two = (cc.load(tmp_path, threads=t).run(feeds) for t in (1, 2))
    for name in one:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)
    assert_matches(model, feeds)
    # the outlined body of the parallel loop (codegen/parallel.py names it kernel.rangeN)
    assert f"_{op}.range".encode() in (tmp_path / "model.so").read_bytes()


@pytest.mark.parametrize("op,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 0}),
                                      ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
def test_weights_read_backwards_every_other_step(op, attrs, monkeypatch):
    """Where R is larger than L1 the recurrent product runs over its rows backwards on
    every other step (here forced for any R): the same results, with sequence lengths that
    end on both parities and batch entries in pairs and alone."""
    from compiler_core.kernels import recurrent

    monkeypatch.setattr(recurrent, "L1_BYTES", 0)
    assert_matches(*recurrent_model(op, "bidirectional", initial=True, seq_lens=[5, 2, 3],
                                    **attrs))


def test_speech_sized_lstm_reads_its_weights_backwards_every_other_step():
    """48 units: R is 48 x 192 floats per direction, 36 KB, more than L1."""
    from compiler_core.kernels.recurrent import L1_BYTES

    hidden, inputs, steps = 48, 10, 7
    assert hidden * 4 * hidden * 4 > L1_BYTES
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"],
                            hidden_size=hidden, direction="bidirectional")
    model = make_model([node], [("X", F, (steps, 2, inputs))],
                       [(o, F, None) for o in ("Y", "Y_h", "Y_c")],
                       [("W", rand(2, 4 * hidden, inputs, seed=1)),
                        ("R", rand(2, 4 * hidden, hidden, seed=2)),
                        ("B", rand(2, 8 * hidden, seed=3))], opset=14)
    assert_matches(model, {"X": rand(steps, 2, inputs, seed=4)})
