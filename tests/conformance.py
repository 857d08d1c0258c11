"""The ONNX operator conformance suite (generated in memory by the onnx package).

`python -m tests.conformance [--jobs N] [--filter SUBSTR]` compiles and runs every case and
prints the pass count with the largest groups of failures.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import re
import sys
import warnings
from collections import Counter

import numpy as np


@functools.cache
def all_cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def op_of(case) -> str:
    ops = [n.op_type for n in case.model.graph.node]
    return ops[0] if len(ops) == 1 else re.sub(r"^test_", "", case.name).split("_")[0]


def as_array(v):
    import onnx
    from onnx import numpy_helper
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def run_case(name: str) -> tuple[str, str]:
    """-> ("pass" | "fail" | "error", message)."""
    import compiler_core as cc
    case = all_cases()[name]
    try:
        for inputs, expected in case.data_sets:
            feeds = {i.name: as_array(v) for i, v in zip(case.model.graph.input, inputs)}
            if any(v.dtype == object for v in feeds.values()):
                return "error", "non-tensor input (sequence/optional/string)"
            model, feeds = freeze_integer_inputs(case.model, feeds)
            art, feeds = compile_case(model, feeds)
            got = art.run(feeds)
            for out, ref in zip(case.model.graph.output, expected):
                check_close(got[out.name], as_array(ref), case.rtol, case.atol)
        return "pass", ""
    except cc.CompileError as exc:
        return "error", f"CompileError: {exc}"
    except AssertionError as exc:
        return "fail", str(exc).strip().splitlines()[0][:300]
    except Exception as exc:  # report, don't crash the sweep
        return "error", f"{type(exc).__name__}: {exc}"[:300]


def compile_case(model, feeds: dict):
    """Compile for the feeds' shapes. A scalar bool the compiler needs at compile time (a Loop
    condition, which decides output shapes) is then frozen like the integer operands."""
    import compiler_core as cc
    try:
        return cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()}), feeds
    except cc.CompileError as exc:
        flags = [k for k, v in feeds.items() if v.dtype == np.bool_ and v.size == 1]
        if "compile time" not in str(exc) or not flags:
            raise
    model, feeds = freeze_inputs(model, feeds, flags)
    return cc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()}), feeds


def freeze_integer_inputs(model, feeds: dict):
    """Turn integer inputs (axes, k, shapes, pads, ...) into initializers.

    The cases feed such operands as graph inputs, but Tensorforge compiles static shapes and
    needs them at compile time; a deployed model has them as constants.
    """
    return freeze_inputs(model, feeds, [k for k, v in feeds.items()
                                        if v.dtype.kind in "iu" and v.ndim <= 1 and v.size <= 8])


def freeze_inputs(model, feeds: dict, names: list[str]):
    import onnx
    frozen = {k: feeds[k] for k in names}
    if not frozen:
        return model, feeds
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [i for i in model.graph.input if i.name not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in frozen.items())
    return model, {k: v for k, v in feeds.items() if k not in frozen}


def check_close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> None:
    assert got.shape == ref.shape, f"shape {got.shape} != expected {ref.shape}"
    assert got.dtype == ref.dtype, f"dtype {got.dtype} != expected {ref.dtype}"
    if ref.dtype.kind in "fc":
        np.testing.assert_allclose(got, ref, rtol=max(rtol, 1e-4), atol=max(atol, 1e-6))
    else:
        np.testing.assert_array_equal(got, ref)


def failure_reason(status: str, message: str) -> str:
    """A short, human reason for the expected-failure list, from a failure message."""
    m = re.search(r"operators Tensorforge does not support at opset \d+: (.*)", message)
    if m:
        ops = sorted(set(re.findall(r"(\w+) x\d+", m.group(1))))
        return f"unsupported op(s): {', '.join(ops)}"
    if "non-tensor input" in message:
        return "sequence, optional or string inputs: only tensors are supported"
    m = re.search(r"element type (\w+) is not supported", message)
    if m:
        return f"element type {m.group(1)} is not supported"
    if status == "fail":
        return f"wrong result: {message[:120]}"
    return message[:160]


def write_expected_failures(results: dict, path: str) -> None:
    lines = ['"""Conformance cases that do not pass yet, each with the reason. Regenerated by',
             '`python -m tests.conformance --write-expected FILE`; review reasons by hand."""',
             "", "EXPECTED_FAILURES: dict[str, str] = {"]
    for name, (status, message) in sorted(results.items()):
        if status != "pass":
            lines.append(f"    {name!r}: {failure_reason(status, message)!r},")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _child(name):
    return name, run_case(name)


def sweep(names: list[str], jobs: int) -> dict[str, tuple[str, str]]:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=50) as pool:
        return dict(pool.imap_unordered(_child, names, chunksize=4))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--show", type=int, default=25, help="failure groups to list")
    ap.add_argument("--failures", help="write 'name<TAB>status<TAB>message' lines here")
    ap.add_argument("--write-expected", help="write the expected-failure module here")
    args = ap.parse_args(argv)
    names = [n for n in all_cases() if args.filter in n]
    results = sweep(names, args.jobs)
    passed = sum(1 for s, _ in results.values() if s == "pass")
    print(f"{passed} passed, {len(results) - passed} failed (of {len(results)} cases)")
    groups = Counter(op_of(all_cases()[n]) for n, (s, _) in results.items() if s != "pass")
    for op, count in groups.most_common(args.show):
        example = next(m for n, (s, m) in sorted(results.items())
                       if s != "pass" and op_of(all_cases()[n]) == op)
        print(f"  {count:4d}  {op:28s} {example[:110]}")
    if args.write_expected:
        write_expected_failures(results, args.write_expected)
    if args.failures:
        with open(args.failures, "w") as f:
            for n, (s, m) in sorted(results.items()):
                if s != "pass":
                    f.write(f"{n}\t{s}\t{m}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
