"""Build tiny ONNX models and compare compiled outputs with ONNX Runtime."""
from __future__ import annotations

import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import compiler_core as cc
from compiler_core.ir import Graph, Node, Value
from compiler_core.passes.dense_weights import use_packed_gemm


# LLVM feature strings of x86 cores with 256-bit and 512-bit vectors: MachineSpec(triple,
# cpu, AVX512) for a test of a default that differs by CPU
AVX2 = "+avx,+avx2,+fma,+f16c"
AVX512 = AVX2 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    """inputs/outputs: (name, np dtype, shape) triples; shape None leaves it to inference."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                             shape)
    graph = helper.make_graph(
        nodes, "test", [info(*i) for i in inputs], [info(*o) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def ort_run(model: onnx.ModelProto, feeds: dict) -> dict:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def reference_run(model: onnx.ModelProto, feeds: dict) -> dict:
    from onnx.reference import ReferenceEvaluator
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def assert_matches(model, feeds, reference="ort", rtol=1e-4, atol=None, **compile_kw):
    """Compile `model`, run it on `feeds` and compare every output with the reference."""
    expected = (ort_run if reference == "ort" else reference_run)(model, feeds)
    got = cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()},
                     **compile_kw).run(feeds)
    for name, ref in expected.items():
        ref = np.asarray(ref)
        out = got[name]
        assert out.shape == ref.shape, f"{name}: shape {out.shape} != {ref.shape}"
        assert out.dtype == ref.dtype, f"{name}: dtype {out.dtype} != {ref.dtype}"
        if ref.dtype.kind == "f":
            tol = atol if atol is not None else 1e-4 + 1e-3 * float(np.max(np.abs(ref), initial=0))
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=tol, err_msg=name)
        else:
            np.testing.assert_array_equal(out, ref, err_msg=name)
    return got


def assert_matches_each(model, feeds_list, reference="ort", rtol=1e-4):
    """Compile `model` once (for the first feeds' shapes) and compare every feed set."""
    compiled = cc.compile(model, input_shapes={k: v.shape for k, v in feeds_list[0].items()})
    for feeds in feeds_list:
        expected = (ort_run if reference == "ort" else reference_run)(model, feeds)
        got = compiled.run(feeds)
        for name, ref in expected.items():
            ref, out = np.asarray(ref), got[name]
            assert (out.shape, out.dtype) == (ref.shape, ref.dtype), name
            if ref.dtype.kind == "f":
                tol = 1e-4 + 1e-3 * float(np.max(np.abs(ref), initial=0))
                np.testing.assert_allclose(out, ref, rtol=rtol, atol=tol, err_msg=name)
            else:
                np.testing.assert_array_equal(out, ref, err_msg=name)


def rand(*shape, dtype=np.float32, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(int(low * 10), int(high * 10) + 1, shape).astype(dtype)


def disassembly(art, objdump="objdump") -> list[str]:
    """The lines of `objdump -d` of a compiled artifact's library."""
    with tempfile.TemporaryDirectory() as d:
        art.save(d)
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", f"{d}/model.so"],
                             capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def packed_gemm_node(m: int, k: int, n: int):
    """The PackedGemm node of an m x k by constant k x n MatMul, before its schedule."""
    a = Value("a", (m, k), np.float32)
    w = Value("w", (k, n), np.float32, const=rand(k, n))
    g = Graph([a], [Value("y", (m, n), np.float32)], [], "g")
    g.nodes = [Node("MatMul", [a, w], g.outputs)]
    return use_packed_gemm(g).nodes[0]
