"""Ops that ONNX defines as functions of other ops (Attention, RMSNormalization, the losses,
MeanVarianceNormalization, ...) are expanded into their function bodies at import when we
have no converter of our own. The body is converted at the opset it was written for."""
from __future__ import annotations

import onnx
import onnx.defs
from onnx import helper

from ..ir import Value


def _schema(op_type: str, opset: int):
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def has_function(op_type: str, opset: int) -> bool:
    s = _schema(op_type, opset)
    return bool(s and (s.has_function or s.has_context_dependent_function))


def _pick(versions, opset):
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def function_body(node: onnx.NodeProto, opset: int, inputs: list[Value | None]):
    """The FunctionProto implementing `node` at `opset`, or None."""
    s = _schema(node.op_type, opset)
    if s is None:
        return None
    proto = onnx.FunctionProto()
    version = _pick(s.function_opset_versions, opset) if s.has_function else None
    if version is not None:
        proto.ParseFromString(s.get_function_with_opset_version(version))
        return proto
    version = _pick(s.context_dependent_function_opset_versions, opset)
    if version is None:
        return None
    types = [(helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              if v is not None else onnx.TypeProto()).SerializeToString() for v in inputs]
    proto.ParseFromString(s.get_context_dependent_function_with_opset_version(
        version, node.SerializeToString(), types))
    return proto


def schema_defaults(op_type: str, opset: int) -> dict[str, onnx.AttributeProto]:
    """Attribute defaults the schema declares (old-style function bodies rely on these)."""
    s = _schema(op_type, opset)
    if s is None:
        return {}
    out = {}
    for name, attr in s.attributes.items():
        default = attr.default_value
        if default.type != onnx.AttributeProto.UNDEFINED:
            out[name] = default
    return out


def body_opset(proto: onnx.FunctionProto, default: int) -> int:
    return next((imp.version for imp in proto.opset_import if imp.domain in ("", "ai.onnx")),
                default)


def expand(node: onnx.NodeProto, proto: onnx.FunctionProto, prefix: str,
           schema_default: dict) -> list[onnx.NodeProto]:
    """The body's nodes, wired to `node`'s inputs and outputs, attributes substituted."""
    names = {formal: actual for formal, actual in zip(proto.input, node.input)}
    names.update({formal: "" for formal in proto.input[len(node.input):]})
    names.update(zip(proto.output, node.output))
    for body_node in proto.node:
        for o in body_node.output:
            names.setdefault(o, f"{prefix}/{o}")
    given = {a.name: a for a in node.attribute}
    defaults = {**schema_default, **{a.name: a for a in proto.attribute_proto}}
    nodes = []
    for body_node in proto.node:
        n = onnx.NodeProto()
        n.CopyFrom(body_node)
        n.name = f"{prefix}/{body_node.name or body_node.op_type}"
        _rename(n, names)
        del n.attribute[:]
        n.attribute.extend(_resolve_attributes(body_node, given, defaults, names))
        nodes.append(n)
    return nodes


def _rename(n: onnx.NodeProto, names: dict) -> None:
    n.input[:] = [names.get(i, i) if i else "" for i in n.input]
    n.output[:] = [names.get(o, o) if o else "" for o in n.output]


def _resolve_attributes(body_node, given, defaults, names) -> list[onnx.AttributeProto]:
    attrs = []
    for a in body_node.attribute:
        if a.ref_attr_name:
            source = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if source is None:
                continue
            resolved = onnx.AttributeProto()
            resolved.CopyFrom(source)
            resolved.name = a.name
            attrs.append(resolved)
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            attrs.append(_rename_captures(a, names))
        else:
            attrs.append(a)
    return attrs


def _rename_captures(attr: onnx.AttributeProto, names: dict) -> onnx.AttributeProto:
    """Subgraphs keep their own names but must see the function's values under their new
    names; a name the subgraph defines itself shadows the outer one."""
    out = onnx.AttributeProto()
    out.CopyFrom(attr)
    for g in [out.g] if out.type == onnx.AttributeProto.GRAPH else out.graphs:
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        local |= {o for n in g.node for o in n.output}
        outer = {k: v for k, v in names.items() if k not in local}
        for n in g.node:
            n.input[:] = [outer.get(i, i) if i else "" for i in n.input]
            for a in n.attribute:
                if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    a.CopyFrom(_rename_captures(a, outer))
        for o in g.output:
            if o.name not in local and o.name in outer:
                o.name = outer[o.name]
    return out
