"""ONNX -> graph IR.

The importer walks the graph in order with every input shape known, so each converter sees
static shapes and constant values and emits IR nodes with static output shapes. A node
whose inputs are all constants is evaluated on the spot with onnx's reference evaluator,
which folds shape arithmetic (Shape, Gather, Concat, Range, ...) at compile time.
"""
from __future__ import annotations

import contextlib
import re
from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import CompileError
from ..ir import Graph, Guard, Node, Value
from .functions import body_opset, expand, function_body, has_function, schema_defaults
from .limits import check_tensor
from .model_file import load_model, model_opset
from .registry import find_converter

NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                "Multinomial", "Bernoulli"}
MAX_FOLD_BYTES = 256 * 2**20


def import_model(model, input_shapes: dict | None = None) -> Graph:
    proto, _ = load_model(model)
    opset = model_opset(proto)
    check_supported(proto.graph, opset)
    importer = Importer(opset)
    return importer.run(proto.graph, input_shapes or {})


SUPPORTED_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                    "uint16", "uint32", "uint64", "bool"}


def np_dtype(elem_type: int) -> np.dtype:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        dtype = None
    if dtype is None or dtype.name not in SUPPORTED_DTYPES:
        known = elem_type in onnx.TensorProto.DataType.values()
        name = onnx.TensorProto.DataType.Name(elem_type) if known else str(elem_type)
        raise CompileError(f"tensor element type {name} is not supported; use float16/32/64, "
                           "(u)int8/16/32/64 or bool")
    return dtype


# ---------------------------------------------------------------- support check

def check_supported(graph: onnx.GraphProto, opset: int) -> None:
    missing: Counter = Counter()
    names: dict[str, list[str]] = {}
    for node in _nodes_needing_converters(graph, opset):
        missing[node.op_type] += 1
        names.setdefault(node.op_type, []).append(node.name or "(unnamed)")
    if missing:
        parts = [f"{op} x{n} (nodes: {', '.join(names[op][:3])}{', ...' if n > 3 else ''})"
                 for op, n in sorted(missing.items())]
        raise CompileError(f"{sum(missing.values())} node(s) use operators Tensorforge does not "
                           f"support at opset {opset}: " + "; ".join(parts))


def _nodes_needing_converters(graph: onnx.GraphProto, opset: int, outer=frozenset()):
    consts = set(outer) | {t.name for t in graph.initializer}
    for node in graph.node:
        inputs_const = all(i == "" or i in consts for i in node.input)
        if node.op_type == "Constant" or (inputs_const and node.op_type not in NOT_FOLDABLE
                                          and not _has_subgraph(node)):
            consts.update(node.output)
            continue
        if find_converter(node.op_type, opset) is None and not has_function(node.op_type, opset):
            yield node
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from _nodes_needing_converters(g, opset, frozenset(consts))


def _has_subgraph(node) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)


# ---------------------------------------------------------------- importer

class Importer:
    """Holds the conversion state; converters reach it as `cx`."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[Node] = []
        self.onnx_ops: dict[str, str] = {}  # ONNX node label -> op type, for reports
        self._unnamed: dict[str, int] = {}
        self.scopes: list[dict[str, Value]] = [{}]
        self.guards: tuple[Guard, ...] = ()
        self.node: onnx.NodeProto | None = None
        self.attrs: dict = {}
        self._names: Counter = Counter()

    # -- driving
    def run(self, graph: onnx.GraphProto, input_shapes: dict) -> Graph:
        for o in graph.output:
            if o.type.WhichOneof("value") not in (None, "tensor_type"):
                raise CompileError(f"output {o.name!r} is a {o.type.WhichOneof('value')[:-5]}; "
                                   "only tensor outputs are supported")
        inputs = self._graph_inputs(graph, input_shapes)
        self.convert_nodes(graph)
        outputs = [self._named_output(o.name) for o in graph.output]
        return Graph(inputs, outputs, self.nodes, name=graph.name or "model", opset=self.opset,
                     onnx_ops=self.onnx_ops)

    def _named_output(self, name: str) -> Value:
        """Graph outputs keep their ONNX names, also when a converter returned an existing
        Value (an input, a constant, or its own input for no-op ops such as Identity)."""
        v = self.lookup(name)
        if v.name == name:
            return v
        self.node = None
        out = self.emit("Copy", [v], [(v.shape, v.dtype)], names=[name])[0]
        out.name = name  # exactly, even where a subgraph's value took the name first
        return out

    def _graph_inputs(self, graph, input_shapes) -> list[Value]:
        for t in graph.initializer:
            self.define(t.name, self.const(numpy_helper.to_array(t), t.name))
        init_names = {t.name for t in graph.initializer}
        real = [i for i in graph.input if i.name not in init_names]
        unknown = set(input_shapes) - {i.name for i in real}
        if unknown:
            raise CompileError(f"input_shapes names {sorted(unknown)}, which are not model inputs; "
                               f"the inputs are {[i.name for i in real]}")
        values = []
        for vi in real:
            v = Value(vi.name, resolve_input_shape(vi, input_shapes.get(vi.name)),
                      np_dtype(vi.type.tensor_type.elem_type))
            check_tensor(v.shape, v.dtype, f"input {vi.name!r}")
            self.define(vi.name, v)
            values.append(v)
        return values

    def convert_nodes(self, graph: onnx.GraphProto) -> None:
        for t in graph.initializer:
            if t.name not in self.scopes[-1]:
                self.define(t.name, self.const(numpy_helper.to_array(t), t.name))
        for node in graph.node:
            self.convert_node(node)

    def convert_node(self, node: onnx.NodeProto) -> None:
        inputs = [self.lookup(n) if n else None for n in node.input]
        self.node, self.attrs = node, parse_attributes(node)
        self.label = node.name or self._unnamed_label(node.op_type)
        start = len(self.nodes)
        try:
            outputs = self._fold(node, inputs)
            if outputs is None:
                fn = find_converter(node.op_type, self.opset)
                if fn is None:
                    self._expand_function(node, inputs)
                    return
                outputs = fn(self, inputs)
        except CompileError as exc:
            raise CompileError(f"node {node.name or node.op_type} ({node.op_type}): {exc}") from None
        except MemoryError:
            raise CompileError(f"node {node.name or node.op_type} ({node.op_type}) needs more "
                               "memory than the compiler may use: check its sizes") from None
        fresh = {v for n in self.nodes[start:] for v in n.outputs}
        for name, v in zip(node.output, outputs):
            if name:
                if v in fresh and v.name != name:
                    v.name = self.unique(name)
                self.define(name, v)

    def _unnamed_label(self, op_type: str) -> str:
        """Conv#1, Conv#2, ...: reports name every ONNX node apart, named or not."""
        self._unnamed[op_type] = self._unnamed.get(op_type, 0) + 1
        return f"{op_type}#{self._unnamed[op_type]}"

    def _expand_function(self, node, inputs) -> None:
        """No converter: convert the ONNX function body that defines the op instead."""
        proto = function_body(node, self.opset, inputs)
        if proto is None:
            raise CompileError(f"operator {node.op_type} is not supported")
        saved = self.opset
        self.opset = body_opset(proto, saved)
        try:
            defaults = schema_defaults(node.op_type, saved)
            for n in expand(node, proto, self.unique(node.name or node.op_type), defaults):
                self.convert_node(n)
        finally:
            self.opset = saved

    def _fold(self, node, inputs):
        present = [v for v in inputs if v is not None]
        if (node.op_type in NOT_FOLDABLE or _has_subgraph(node) or node.op_type == "Constant"
                or not all(v.is_const for v in present)
                or sum(v.nbytes for v in present) > MAX_FOLD_BYTES):
            return None
        if not present and find_converter(node.op_type, self.opset) is not None:
            return None
        check_fold_outputs(node, inputs, self.opset)
        results = evaluate_node(node, [None if v is None else v.const for v in inputs], self.opset)
        return [self.const(r, name) for r, name in zip(results, node.output)]

    # -- scopes
    def define(self, name: str, v: Value) -> None:
        self.scopes[-1][name] = v

    def lookup(self, name: str) -> Value:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise CompileError(f"value {name!r} is used before it is produced")

    @contextlib.contextmanager
    def scope(self, guard: Guard | None = None):
        saved = self.guards
        self.scopes.append({})
        if guard is not None:
            self.guards = (*self.guards, guard)
        try:
            yield self.scopes[-1]
        finally:
            self.scopes.pop()
            self.guards = saved

    # -- helpers for converters
    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def unique(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        self._names[base] += 1
        return base if self._names[base] == 1 else f"{base}_{self._names[base]}"

    def const(self, array, name: str = "const") -> Value:
        array = np.asarray(array)
        check_tensor(array.shape, array.dtype, f"constant {name!r}")
        if array.dtype.name not in SUPPORTED_DTYPES:
            raise CompileError(f"constant {name!r} has element type {array.dtype.name}, which is "
                               "not supported; use float16/32/64, (u)int8/16/32/64 or bool")
        # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
        return Value(self.unique(name), array.shape, array.dtype,
                     const=np.require(array, requirements="C"))

    def emit(self, op: str, inputs: list, outputs: list[tuple], attrs: dict | None = None,
             names: list[str] | None = None) -> list[Value]:
        """Add one IR node; `outputs` are (shape, dtype) pairs."""
        # provisional names; convert_node renames the values that become ONNX outputs
        base = next((o for o in self.node.output if o), op) if self.node is not None else op
        names = names or [f"{base}.{op}{k}" for k in range(len(outputs))]
        for name, (shape, dtype) in zip(names, outputs):
            check_tensor(shape, dtype, f"tensor {name!r}")
        outs = [Value(self.unique(n), shape, dtype) for n, (shape, dtype) in zip(names, outputs)]
        label = self.label if self.node is not None else op
        self.onnx_ops.setdefault(label, self.node.op_type if self.node is not None else op)
        self.nodes.append(Node(op, list(inputs), outs, dict(attrs or {}), label, self.guards))
        return outs

    def emit1(self, op: str, inputs: list, shape, dtype, attrs: dict | None = None) -> Value:
        return self.emit(op, inputs, [(tuple(shape), np.dtype(dtype))], attrs)[0]


def parse_attributes(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        val = helper.get_attribute_value(a)
        if isinstance(val, bytes):
            val = val.decode("utf-8", "replace")
        elif isinstance(val, list) and val and isinstance(val[0], bytes):
            val = [x.decode("utf-8", "replace") for x in val]
        elif isinstance(val, onnx.TensorProto):
            val = numpy_helper.to_array(val)
        out[a.name] = val
    return out


def resolve_input_shape(vi: onnx.ValueInfoProto, given) -> tuple[int, ...]:
    if not vi.type.HasField("tensor_type"):
        raise CompileError(f"input {vi.name!r} is not a tensor; only tensor inputs are supported")
    tt = vi.type.tensor_type
    if given is not None:
        given = tuple(int(d) for d in given)
        if tt.HasField("shape") and len(tt.shape.dim) != len(given):
            raise CompileError(f"input_shapes gives {vi.name!r} {len(given)} dims but the model "
                               f"declares {len(tt.shape.dim)}")
        for d, g in zip(tt.shape.dim if tt.HasField("shape") else [], given):
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != g:
                raise CompileError(f"input_shapes gives {vi.name!r} shape {list(given)} but the "
                                   f"model fixes a dimension to {d.dim_value}")
        if any(g < 0 for g in given):
            raise CompileError(f"input_shapes for {vi.name!r} must not be negative, got {list(given)}")
        return given
    if not tt.HasField("shape"):
        raise CompileError(f"input {vi.name!r} has no declared shape; give it in input_shapes, "
                           f"e.g. input_shapes={{'{vi.name}': (1, 3, 224, 224)}}")
    dims, symbolic = [], []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            symbolic.append(d.dim_param or f"dim {k}")
    if symbolic:
        raise CompileError(f"input {vi.name!r} has symbolic dimensions {symbolic}; give its "
                           f"full shape in input_shapes, e.g. --input {vi.name}=1x3x224x224")
    return tuple(dims)


SHAPE_ARGUMENT_ELEMENTS = 64  # constants small enough to be shapes, pads, repeats or scales


def check_fold_outputs(node: onnx.NodeProto, inputs: list, opset: int) -> None:
    """Predict the shapes a constant node would produce (ONNX shape inference, given its
    small inputs' values) and refuse size bombs (ConstantOfShape, Expand, Tile, Pad, Range,
    Resize of constants) before evaluating them."""
    given = [(n, v) for n, v in zip(node.input, inputs) if n and v is not None]
    inits = [numpy_helper.from_array(v.const, n) for n, v in given
             if v.size <= SHAPE_ARGUMENT_ELEMENTS]
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for n, v in given]
    graph = helper.make_graph([node], "fold", infos, [helper.make_empty_tensor_value_info(o)
                                                      for o in node.output if o], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output
    except Exception:  # noqa: BLE001  inference gives up on odd nodes: evaluation decides
        return
    for out in inferred:
        dims = out.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            elem = out.type.tensor_type.elem_type or onnx.TensorProto.UINT8
            check_tensor([d.dim_value for d in dims], helper.tensor_dtype_to_np_dtype(elem),
                         f"the folded constant {out.name!r}")


def evaluate_node(node: onnx.NodeProto, arrays: list, opset: int) -> list[np.ndarray]:
    """Run one ONNX node on constant inputs with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.input]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(names, arrays) if n and a is not None]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in zip(names, arrays) if n and a is not None}
    try:
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # noqa: BLE001  it raises anything: a model error
        raise CompileError(f"could not evaluate constant node: {exc}") from None
    results = iter(np.asarray(r) for r in results)
    return [next(results) if o else None for o in node.output]
