"""Converters for If, Loop and Scan: subgraphs are converted inline, there is no control-flow IR.

If, constant condition: only the chosen branch is converted.
If, run-time condition: both branches are converted, each under a Guard on the condition,
    and each copies its results into the If's outputs with a guarded "Copy" node. Those
    outputs thus have two producers, of which exactly one runs; the memory planner and the
    entry function already honour guards. Both branches must give equal shapes and dtypes.
Loop: the trip count must be known at compile time (M constant, and the condition either
    absent or constant, also the one the body computes); the body is unrolled, scan outputs
    are stacked with Reshape + Concat.
Scan: the sequence length is a static shape, so the body is unrolled the same way; each
    step's slices of the scanned inputs are Slice + Reshape (a view).
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ...ir import Guard, Node, Value
from ..registry import converter
from .common import const_value, norm_axis

MAX_UNROLLED_ITERATIONS = 10_000


def convert_subgraph(cx, graph, bindings: dict[str, Value]) -> list[Value]:
    """Convert `graph`'s nodes into the current scope and return its outputs.

    The caller opens the scope (so it decides the guard) and reads the outputs before
    leaving it. The ONNX node being converted is restored afterwards, since converting the
    subgraph's nodes replaces it and later emits are labelled with it.
    """
    node, attrs = cx.node, cx.attrs
    for name, v in bindings.items():
        cx.define(name, v)
    cx.convert_nodes(graph)
    cx.node, cx.attrs = node, attrs
    return [cx.lookup(o.name) for o in graph.output]


# ---------------------------------------------------------------- If

@converter("If", 1)
def if_op(cx, inputs):
    cond = inputs[0]
    if cond.size != 1 or cond.dtype != np.bool_:
        raise CompileError(f"If's condition must be one bool, got {cond.dtype} of shape "
                           f"{list(cond.shape)}")
    branches = {True: cx.attr("then_branch"), False: cx.attr("else_branch")}
    if cond.is_const:
        with cx.scope():
            return convert_subgraph(cx, branches[bool(cond.const.ravel()[0])], {})
    return _guarded_branches(cx, cond, branches)


def _guarded_branches(cx, cond: Value, branches: dict) -> list[Value]:
    """A branch that cannot be compiled for these input shapes (the untaken 8 kHz path of a
    16 kHz model, say) becomes a run-time error instead of a compile error."""
    node, attrs = cx.node, cx.attrs
    results, failures = None, {}
    for when in (True, False):
        mark = len(cx.nodes)
        with cx.scope(Guard(cond, when)):
            try:
                values = convert_subgraph(cx, branches[when], {})
            except CompileError as exc:
                del cx.nodes[mark:]
                cx.node, cx.attrs = node, attrs
                failures[when] = exc
                continue
            if results is None:
                results = [cx.emit("Copy", [v], [(v.shape, v.dtype)], names=[name])[0]
                           for v, name in zip(values, _output_names(cx, len(values)))]
            else:
                _check_branches_agree(results, values)
                for v, out in zip(values, results):
                    _emit_into(cx, "Copy", [v], out)
    if results is None:
        raise failures[True]
    for when, exc in failures.items():
        branch = "then_branch" if when else "else_branch"
        with cx.scope(Guard(cond, when)):
            message = (f"If {node.name or ''}: {branch} was taken but cannot run for the input "
                       f"shapes this model was compiled for ({exc})")
            cx.nodes.append(Node("Unreachable", [], list(results), {"message": message},
                                 node.name or node.op_type, cx.guards))
    return results


def _output_names(cx, count: int) -> list[str]:
    names = list(cx.node.output) + [""] * count
    return [name or f"{cx.node.op_type}_out{k}" for k, name in enumerate(names[:count])]


def _check_branches_agree(then_values, else_values):
    if len(then_values) != len(else_values):
        raise CompileError(f"If's branches give {len(then_values)} and {len(else_values)} "
                           "outputs; they must give the same number")
    for k, (a, b) in enumerate(zip(then_values, else_values)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CompileError(
                f"If's output {k} is {a.dtype}{list(a.shape)} in then_branch but "
                f"{b.dtype}{list(b.shape)} in else_branch; with a condition computed at run "
                "time both branches must agree (or make the condition a constant)")


def _emit_into(cx, op: str, inputs: list, out: Value) -> None:
    """A node writing an existing Value: its second producer, under the current guards."""
    label = cx.node.name or cx.node.op_type
    cx.nodes.append(Node(op, list(inputs), [out], {}, label, cx.guards))


# ---------------------------------------------------------------- Loop

@converter("Loop", 1)
def loop_op(cx, inputs):
    body = cx.attr("body")
    trip_limit = _trip_count(inputs[0])
    keep_going = _initial_condition(inputs[1] if len(inputs) > 1 else None)
    carried = list(inputs[2:])
    n_carried = len(carried)
    if len(body.output) < 1 + n_carried:
        raise CompileError(f"Loop's body has {len(body.output)} outputs; it needs the "
                           f"condition and {n_carried} loop-carried values")
    scans: list[list[Value]] = [[] for _ in body.output[1 + n_carried:]]
    iteration = 0
    while keep_going and iteration < trip_limit:
        if iteration == MAX_UNROLLED_ITERATIONS:
            raise CompileError(f"Loop runs more than {MAX_UNROLLED_ITERATIONS} iterations; "
                               "Tensorforge unrolls loops and supports at most that many")
        outs = _run_iteration(cx, body, iteration, carried)
        keep_going = _body_condition(outs[0], iteration)
        carried = outs[1:1 + n_carried]
        for scan, v in zip(scans, outs[1 + n_carried:]):
            scan.append(v)
        iteration += 1
    names = _output_names(cx, n_carried + len(scans))[n_carried:]
    return carried + [_stack(cx, values, 0, name, f"Loop's scan output {k}")
                      for k, (values, name) in enumerate(zip(scans, names))]


def _trip_count(m: Value | None) -> int | float:
    if m is None:
        return float("inf")
    if not m.is_const:
        raise CompileError("Loop's trip count M depends on the model's inputs; Tensorforge "
                           "unrolls loops and needs M to be a constant")
    return int(const_value(m, "M").ravel()[0])


def _initial_condition(cond: Value | None) -> bool:
    if cond is None:
        return True
    if not cond.is_const:
        raise CompileError("Loop's condition depends on the model's inputs; Tensorforge "
                           "unrolls loops and needs a condition known at compile time "
                           "(leave it empty and use the trip count M)")
    return bool(cond.const.ravel()[0])


def _body_condition(cond: Value, iteration: int) -> bool:
    if not cond.is_const:
        raise CompileError(f"the condition Loop's body computes in iteration {iteration} "
                           "depends on the model's inputs; Tensorforge unrolls loops and "
                           "needs it to be known at compile time")
    return bool(cond.const.ravel()[0])


def _run_iteration(cx, body, iteration: int, carried: list[Value]) -> list[Value]:
    names = [i.name for i in body.input]
    if len(names) != 2 + len(carried):
        raise CompileError(f"Loop's body takes {len(names)} inputs but the Loop passes "
                           f"{2 + len(carried)} (iteration number, condition, carried values)")
    bindings = {names[0]: cx.const(np.array(iteration, np.int64), "iteration"),
                names[1]: cx.const(np.array(True), "cond")}
    bindings.update(zip(names[2:], carried))
    with cx.scope():
        return convert_subgraph(cx, body, bindings)


def _stack(cx, values: list[Value], axis: int, name: str, what: str) -> Value:
    """The per-iteration `values` stacked along a new `axis` (Reshape + Concat)."""
    if not values:
        raise CompileError(f"{what}: the loop runs zero times, so its shape is unknown")
    shape, dtype = values[0].shape, values[0].dtype
    if any(v.shape != shape or v.dtype != dtype for v in values):
        raise CompileError(f"{what} changes shape between iterations; stacked outputs need one "
                           "shape")
    if all(v.is_const for v in values):
        return cx.const(np.stack([v.const for v in values], axis), name)
    one = (*shape[:axis], 1, *shape[axis:])
    rows = [_reshape(cx, v, one, f"{v.name}_row") for v in values]
    if len(rows) == 1:
        return rows[0]
    stacked = (*shape[:axis], len(rows), *shape[axis:])
    return cx.emit("Concat", rows, [(stacked, dtype)], {"axis": axis}, names=[name])[0]


def _take(cx, v: Value, index: int, axis: int) -> Value:
    """v[..., index, ...] along `axis`, the axis dropped."""
    if v.is_const:
        return cx.const(np.take(v.const, index, axis=axis), f"{v.name}_step")
    one = tuple(1 if d == axis else n for d, n in enumerate(v.shape))
    starts = tuple(index if d == axis else 0 for d in range(len(v.shape)))
    attrs = {"starts": starts, "steps": (1,) * len(v.shape)}
    row = cx.emit("Slice", [v], [(one, v.dtype)], attrs, names=[f"{v.name}_step{index}"])[0]
    return _reshape(cx, row, v.shape[:axis] + v.shape[axis + 1:], f"{v.name}_at{index}")


def _reshape(cx, v: Value, shape: tuple, name: str) -> Value:
    """IR Reshape (a view for the memory planner when unguarded)."""
    shape = tuple(shape)
    if shape == v.shape:
        return v
    return cx.emit("Reshape", [v], [(shape, v.dtype)], {"shape": shape}, names=[name])[0]


# ---------------------------------------------------------------- Scan

@converter("Scan", 9)
def scan_op(cx, inputs):
    body, n_scanned = cx.attr("body"), int(cx.attr("num_scan_inputs"))
    n_states = len(inputs) - n_scanned
    n_outputs = len(body.output) - n_states
    directions = {
        "in_axes": cx.attr("scan_input_axes", [0] * n_scanned),
        "in_reversed": cx.attr("scan_input_directions", [0] * n_scanned),
        "out_axes": cx.attr("scan_output_axes", [0] * n_outputs),
        "out_reversed": cx.attr("scan_output_directions", [0] * n_outputs)}
    states, outputs = _unroll_scan(cx, body, list(inputs[:n_states]), list(inputs[n_states:]),
                                   **directions)
    return states + outputs


@converter("Scan", 8)
def scan_v8(cx, inputs):
    """Opset 8: every input has a leading batch axis, scanned inputs are [batch, seq, ...];
    each batch entry is scanned on its own."""
    lens, inputs = inputs[0], inputs[1:]
    body, n_scanned = cx.attr("body"), int(cx.attr("num_scan_inputs"))
    n_states = len(inputs) - n_scanned
    n_outputs = len(body.output) - n_states
    batch = inputs[0].shape[0]
    _check_full_lengths(lens, inputs[n_states].shape[1] if n_scanned else 0)
    per_batch = []
    for b in range(batch):
        entries = [_take(cx, v, b, 0) for v in inputs]
        per_batch.append(_unroll_scan(
            cx, body, entries[:n_states], entries[n_states:], [0] * n_scanned,
            cx.attr("directions", [0] * n_scanned), [0] * n_outputs, [0] * n_outputs))
    names = _output_names(cx, n_states + n_outputs)
    columns = [list(c) for c in zip(*[states + outs for states, outs in per_batch])]
    return [_stack(cx, values, 0, name, f"Scan output {k}")
            for k, (values, name) in enumerate(zip(columns, names))]


def _check_full_lengths(lens: Value | None, seq: int) -> None:
    if lens is None:
        return
    if not lens.is_const or np.any(lens.const != seq):
        raise CompileError(f"Scan's sequence_lens must be absent or a constant equal to the "
                           f"full length {seq}; shorter sequences are not supported")


def _unroll_scan(cx, body, states, scanned, in_axes, in_reversed, out_axes, out_reversed):
    """-> (final states, stacked scan outputs)."""
    in_axes = [norm_axis(a, len(v.shape)) for a, v in zip(in_axes, scanned)]
    lengths = {v.shape[a] for v, a in zip(scanned, in_axes)}
    if len(lengths) > 1:
        raise CompileError(f"Scan's inputs have different sequence lengths {sorted(lengths)}")
    steps = lengths.pop() if lengths else 0
    if steps > MAX_UNROLLED_ITERATIONS:
        raise CompileError(f"Scan runs {steps} iterations; Tensorforge unrolls loops and "
                           f"supports at most {MAX_UNROLLED_ITERATIONS}")
    names = [i.name for i in body.input]
    per_step = []
    for t in range(steps):
        rows = [_take(cx, v, steps - 1 - t if rev else t, a)
                for v, a, rev in zip(scanned, in_axes, in_reversed)]
        with cx.scope():
            outs = convert_subgraph(cx, body, dict(zip(names, states + rows)))
        states, step_outputs = outs[:len(states)], outs[len(states):]
        per_step.append(step_outputs)
    out_names = _output_names(cx, len(states) + len(out_axes))[len(states):]
    stacked = []
    for k, (axis, rev, name) in enumerate(zip(out_axes, out_reversed, out_names)):
        values = [step[k] for step in per_step]
        values = values[::-1] if rev else values
        rank = len(values[0].shape) + 1 if values else 1
        stacked.append(_stack(cx, values, norm_axis(axis, rank), name, f"Scan output {k}"))
    return states, stacked
