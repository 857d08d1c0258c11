"""64-bit Arm targets: cross-compiled here, run under qemu user-mode emulation, checked against
ONNX Runtime. Skipped, saying what to install, where the cross toolchain or qemu is missing.

The light CNNs from onnx fill every weight with one constant (ConstantOfShape), so their
outputs are uniform; `randomized` gives them random weights and `logits` drops the final
Softmax (which random weights saturate to one-hot), so a wrong kernel shows.
"""
import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import compiler_core as cc
from compiler_core.codegen.link import LinkError
from compiler_core.runtime.benchmark import numerical_check
from compiler_core.runtime.emulation import (
    EmulationError,
    emulation_missing,
    emulator_command,
    run_emulated,
    runner_binary,
)
from compiler_core.targets import all_targets

from .helpers import assert_matches, make_model, ort_run, rand
from .test_cli import cli
from .test_light_models import LIGHT
from .test_own_models import load as load_own_model

F = np.float32
ARM_TARGETS = ["aarch64", "neoverse-v1", "cortex-a72"]
MISSING = emulation_missing("aarch64")
needs_emulation = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def randomized(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The model with each ConstantOfShape weight replaced by random values (He-scaled for
    weights, in [0.5, 1.5) for 1-D parameters so batch-norm variances stay positive)."""
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    fills = [n for n in model.graph.node if n.op_type == "ConstantOfShape"]
    for n in fills:
        shape = tuple(int(d) for d in shapes[n.input[0]])
        w = (rng.standard_normal(shape) * np.sqrt(2 / np.prod(shape[1:])) if len(shape) > 1
             else rng.uniform(0.5, 1.5, shape))
        model.graph.initializer.append(numpy_helper.from_array(w.astype(F), n.output[0]))
    shape_names = {n.input[0] for n in fills}
    _keep(model.graph.node, lambda n: n.op_type != "ConstantOfShape")
    _keep(model.graph.initializer, lambda t: t.name not in shape_names)
    weights = {t.name for t in model.graph.initializer}  # some old models list them as inputs
    _keep(model.graph.input, lambda i: i.name not in shape_names | weights)
    model.ir_version = max(model.ir_version, 4)  # IR 3 wants every initializer among the inputs
    return model


def _keep(field, wanted) -> None:
    kept = [x for x in field if wanted(x)]
    del field[:]
    field.extend(kept)


def logits(model: onnx.ModelProto) -> onnx.ModelProto:
    softmax = model.graph.node[-1]
    assert softmax.op_type == "Softmax" and softmax.output[0] == model.graph.output[0].name
    model.graph.node.remove(softmax)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(softmax.input[0], onnx.TensorProto.FLOAT,
                                                            None))
    return model


def light_model(name: str, seed: int = 0):
    model = logits(randomized(onnx.load(LIGHT / f"light_{name}.onnx"), seed))
    (inp,) = model.graph.input
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return model, {inp.name: rand(*shape, seed=seed + 1)}


def elf_header(path) -> tuple[int, int]:
    """(EI_CLASS, e_machine) read straight from the bytes: 2 = 64-bit, 183 = AArch64."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return head[4], int.from_bytes(head[18:20], "little")


def test_arm_targets_are_listed_with_their_meaning():
    targets = all_targets()
    for name in ARM_TARGETS:
        info = targets[name].as_dict()
        assert info["arch"] == "aarch64" and info["triple"].startswith("aarch64-")
        assert info["vector_bits"] == 128 and "+neon" in info["features"]
        assert info["description"]
    assert targets["aarch64"].spec.cpu == "neoverse-n1"
    assert "+sve" in targets["neoverse-v1"].spec.features
    assert targets["x86-64-v3"].spec.vector_bits == 256


@needs_emulation
@pytest.mark.parametrize("target", ["neoverse-v1", "cortex-a72"])
def test_other_arm_cpus(tmp_path, target):
    """Graviton 3's code uses SVE (qemu's default CPU emulates it); Cortex-A72's only NEON."""
    model = load_own_model("speech_lstm_gru.onnx")
    feeds = {"features": rand(1, 50, 40, seed=1, low=-2, high=2)}
    cc.compile(model, target=target).save(tmp_path)
    assert elf_header(tmp_path / "model.so") == (2, 183)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["target"]["name"] == target and meta["target"]["cpu"] == target
    assert "aarch64-linux-gnu-gcc" in (tmp_path / "README.txt").read_text()
    code = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(tmp_path / "model.so")],
                          capture_output=True, text=True, check=False).stdout
    assert (re.search(r"\bz\d+\.s\b", code) is not None) == (target == "neoverse-v1")
    assert numerical_check(cc.load(tmp_path).run(feeds), ort_run(model, feeds))["allclose"]


@pytest.fixture(scope="module")
def squeezenet(tmp_path_factory):
    """The issue's command on SqueezeNet, random weights and logits out (see above):
    (directory, model, feeds), compiled in `out`."""
    model, feeds = light_model("squeezenet")
    d = tmp_path_factory.mktemp("arm-squeezenet")
    (d / "light_squeezenet.onnx").write_bytes(model.SerializeToString())
    np.savez(d / "feeds.npz", **feeds)
    r = cli("compile", "light_squeezenet.onnx", "--target", "aarch64", "-o", "out", cwd=d)
    assert r.returncode == 0, r.stderr
    return d, model, feeds


@needs_emulation
def test_acceptance_light_squeezenet_cli(squeezenet):
    """An AArch64 model.so whose `run` gives ONNX Runtime's outputs."""
    d, model, feeds = squeezenet
    assert elf_header(d / "out" / "model.so") == (2, 183)
    r = cli("run", "out", "--inputs", "feeds.npz", "--out", "o.npz", cwd=d)
    assert r.returncode == 0 and "emulation" in r.stdout, r.stderr
    got = dict(np.load(d / "o.npz"))
    assert numerical_check(got, ort_run(model, feeds))["allclose"]


@needs_emulation
def test_squeezenet_with_random_weights_two_threads(squeezenet):
    d, model, feeds = squeezenet
    got = run_emulated(d / "out", feeds, threads=2)
    assert numerical_check(got, ort_run(model, feeds))["allclose"]


@needs_emulation
def test_bench_on_foreign_artifact_says_timings_mean_nothing(squeezenet):
    d = squeezenet[0]
    r = cli("bench", "out", "--model", "light_squeezenet.onnx", "--runs", "1", "--json", cwd=d)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["emulated"] and result["speedup"] is None and result["allclose"]
    assert "mean nothing" in result["note"] and result["compiled"]["runs"] == 1
    r = cli("bench", "out", "--model", "light_squeezenet.onnx", "--runs", "1", cwd=d)
    assert "timings under emulation mean nothing" in r.stdout, r.stderr


@needs_emulation
def test_recurrent_model_under_emulation():
    model = load_own_model("speech_lstm_gru.onnx")
    assert_matches(model, {"features": rand(1, 50, 40, seed=1, low=-2, high=2)}, target="aarch64")


@pytest.fixture(scope="module")
def parallel_artifact(tmp_path_factory):
    nodes = [helper.make_node("Mul", ["x", "y"], ["a"]), helper.make_node("Tanh", ["a"], ["z"])]
    m = make_model(nodes, [("x", F, (4, 64, 513)), ("y", F, (513,))], [("z", F, (4, 64, 513))])
    d = tmp_path_factory.mktemp("arm-threads")
    cc.compile(m, target="aarch64").save(d)
    return d


@needs_emulation
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_loops_run_on_the_arm64_thread_pool(parallel_artifact, threads):
    symbols = subprocess.run(["aarch64-linux-gnu-nm", str(parallel_artifact / "model.so")],
                             capture_output=True, text=True, check=False).stdout
    assert " tf_parallel_for" in symbols
    model = cc.load(parallel_artifact, threads=threads)
    assert model.emulated and model.arch == "aarch64"
    x, y = rand(4, 64, 513), rand(513, seed=1)
    np.testing.assert_allclose(model.run({"x": x, "y": y})["z"], np.tanh(x * y), rtol=1e-6,
                               atol=1e-6)


@needs_emulation
def test_bad_feeds_are_refused_before_emulation(parallel_artifact):
    with pytest.raises(cc.RuntimeInputError, match="shape"):
        cc.load(parallel_artifact).run({"x": rand(4, 64, 512), "y": rand(513)})


@needs_emulation
def test_runner_checks_every_size(parallel_artifact, tmp_path):
    """The native runner refuses an input file whose size differs from what it is told."""
    (tmp_path / "x.bin").write_bytes(b"\0" * 100)
    (tmp_path / "y.bin").write_bytes(b"\0" * 513 * 4)
    cmd = [*emulator_command("aarch64"), str(runner_binary("aarch64")),
           str(parallel_artifact / "model.so"), "1", "1", "2", "1",
           str(tmp_path / "x.bin"), str(4 * 64 * 513 * 4), str(tmp_path / "y.bin"), "2052",
           str(tmp_path / "z.bin"), str(4 * 64 * 513 * 4)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "has 100 bytes, the model expects 525312" in r.stderr
    assert not (tmp_path / "z.bin").exists()


def test_missing_toolchain_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no cross gcc, no qemu
    assert "qemu-user" in emulation_missing("aarch64")
    relu = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, (8,))],
                      [("y", F, (8,))])
    with pytest.raises(LinkError, match="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"):
        cc.compile(relu, target="aarch64")
    with pytest.raises(EmulationError, match="apt-get install .*qemu-user"):
        emulator_command("aarch64")


@pytest.mark.slow
@needs_emulation
def test_resnet50_with_random_weights_under_emulation(tmp_path):
    model, feeds = light_model("resnet50")
    cc.compile(model, target="aarch64").save(tmp_path)
    got = run_emulated(tmp_path, feeds, threads=2)
    check = numerical_check(got, ort_run(model, feeds))
    assert check["allclose"], check
