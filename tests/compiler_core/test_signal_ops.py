"""DFT and STFT against numpy's FFT and ONNX's reference."""
import numpy as np
import pytest
from onnx import helper

import compiler_core as cc

from .helpers import assert_matches, make_model, rand

F = np.float32


def as_complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1).astype(F)


def dft_model(x_shape, opset=17, length=None, axis=1, **attrs):
    inputs, consts = ["x"], []
    if length is not None:
        consts.append(("n", np.array(length, np.int64)))
    inputs.append("n" if length is not None else "")
    if opset >= 20:
        consts.append(("axis", np.array(axis, np.int64)))
        inputs.append("axis")
    else:
        attrs["axis"] = axis
    node = helper.make_node("DFT", inputs, ["y"], **attrs)
    return make_model([node], [("x", F, x_shape)], [("y", F, None)], consts, opset=opset)


def run(model, x):
    return cc.compile(model).run({"x": x})["y"]


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_complex_forward_and_inverse(opset):
    x = rand(2, 7, 3, 2)
    forward = run(dft_model(x.shape, opset, axis=1), x)
    np.testing.assert_allclose(as_complex(forward), np.fft.fft(as_complex(x), axis=1), atol=1e-5)
    inverse = run(dft_model(x.shape, opset, axis=-3, inverse=1), x)
    np.testing.assert_allclose(as_complex(inverse), np.fft.ifft(as_complex(x), axis=1), atol=1e-6)


@pytest.mark.parametrize("length", [5, 12])
def test_dft_real_onesided_with_length(length):
    x = rand(3, 8, 1)  # length 5 cuts the signal, 12 zero-pads it
    got = run(dft_model(x.shape, 20, length=length, axis=1, onesided=1), x)
    np.testing.assert_allclose(as_complex(got), np.fft.rfft(x[..., 0], n=length, axis=1), atol=1e-5)


@pytest.mark.parametrize("length", [None, 9])
def test_dft_inverse_onesided_is_irfft(length):
    x = rand(2, 5, 2)
    got = run(dft_model(x.shape, 17, length=length, axis=1, inverse=1, onesided=1), x)
    np.testing.assert_allclose(got[..., 0], np.fft.irfft(as_complex(x), n=length, axis=1),
                               atol=1e-6)


def test_dft_run_time_axis():
    x = rand(1, 6, 4, 2)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"])
    m = make_model([node], [("x", F, x.shape), ("axis", np.int64, ())], [("y", F, None)], opset=20)
    compiled = cc.compile(m, input_shapes={"x": x.shape, "axis": ()})
    for axis in (1, 2, -2):
        got = compiled.run({"x": x, "axis": np.array(axis, np.int64)})["y"]
        want = np.fft.fft(as_complex(x), axis=axis % 4)
        np.testing.assert_allclose(as_complex(got), want, atol=1e-5)


def test_dft_run_time_axis_with_shape_change_is_refused():
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], onesided=1)
    m = make_model([node], [("x", F, (1, 6, 4, 1)), ("axis", np.int64, ())], [("y", F, None)],
                   opset=20)
    with pytest.raises(cc.CompileError, match="axis must be known at compile time"):
        cc.compile(m)


def test_stft_real_signal_with_frame_length():
    signal = rand(1, 40, 1)
    node = helper.make_node("STFT", ["s", "step", "", "length"], ["y"])
    m = make_model([node], [("s", F, signal.shape)], [("y", F, None)],
                   [("step", np.array(8, np.int64)), ("length", np.array(16, np.int64))], opset=17)
    assert_matches(m, {"s": signal}, reference="onnx")


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_complex_signal_with_window(onesided):
    signal = rand(2, 20, 2)
    window = np.hanning(6).astype(F)
    node = helper.make_node("STFT", ["s", "step", "w"], ["y"], onesided=onesided)
    m = make_model([node], [("s", F, signal.shape)], [("y", F, None)],
                   [("step", np.array(3, np.int64)), ("w", window)], opset=17)
    assert_matches(m, {"s": signal}, reference="onnx")
