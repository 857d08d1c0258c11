"""Where a compiled model spends its time, per original ONNX node, against the machine's limits.

Attribution. The artifact's profiling entry point (tf_profile) times every kernel call;
meta.json says which ONNX nodes each kernel computes (`onnx_nodes`) and what each ONNX node
costs as imported (`layers`, analysis/node_cost.py). A kernel that computes one ONNX node
gives it all its time, FLOPs and bytes. A fused kernel's time, FLOPs and bytes are split
among its ONNX nodes by their share of its FLOPs as imported (by their share of bytes when
none of them does arithmetic, evenly when neither is known; weight bytes go by the nodes'
own weights): a Conv with its fused Relu gives
the Relu a sliver, not the time a separate Relu would take. Every kernel's time lands on some
node, so the nodes' times add up to the kernels' total. Nodes that run no kernel (views,
folded constants) are not listed.

Roofline. The machine's limits (analysis/machine_limits.py) are a peak P in FLOP/s (numpy's
sgemm, times the thread count) and a bandwidth B in bytes/s: that of the cache level the
model's weights and arena fit in, run after run (per-core L2 times the thread count; the
shared L3 and memory as measured on one thread). A node doing F FLOPs over W bytes of
weights and A bytes of activations has a compute time F/P and a memory time (W + A)/B; the
larger names what bounds it, and its roofline time T = max(F/P, (W + A)/B) is the fastest
it could run. `roofline_pct` is T over the measured time.

What-ifs. A change to a node's weights changes F and W; the estimate assumes the node keeps
the fraction of its roofline it reaches now, so its time scales by T'/T:
* block-sparse at density d (80% sparse: d = 0.2; 90%: d = 0.1) in 1x8 blocks: F' = d F
  (products with zero blocks are skipped, and with them the bias/activation work is taken to
  be negligible), W' = d W (1 + 1/8) (one 4-byte column index per kept block of eight floats);
* float16 weights: W' = W / 2; int8 weights: W' = W / 4 (per-channel scales are negligible);
  both are widened in registers, F unchanged.
A memory-bound node gains by the bytes, a compute-bound one only by skipped FLOPs, so
reduced precision does nothing for a compute-bound Conv. The per-node speedup is T / T';
the model's speedup is total / (total - t + t T'/T). `all_layers` applies the change to every
node with weights at once and lets the bandwidth follow the smaller footprint to a faster
cache level: weights that shrink into the cores' own caches stream faster.
"""
from __future__ import annotations

from .machine_limits import MachineLimits

SCENARIOS = {"sparse80": ("density", 0.2), "sparse90": ("density", 0.1),
             "float16": ("bytes", 0.5), "int8": ("bytes", 0.25)}
BLOCK_INDEX_OVERHEAD = 1 / 8  # a 4-byte index per 1x8 block of 4-byte floats
UNATTRIBUTED = "(kernel without an ONNX node)"


def attribute(meta: dict, kernel_ms: list[float]) -> dict[str, dict]:
    """Per ONNX node: measured ms, FLOPs, weight and activation bytes, kernels it ran in."""
    if len(kernel_ms) != len(meta["kernels"]):
        raise ValueError(f"{len(kernel_ms)} kernel timings for {len(meta['kernels'])} kernels: "
                         "the timings come from another artifact")
    costs = {layer["onnx_node"]: layer for layer in meta.get("layers", [])}
    nodes: dict[str, dict] = {}
    for kernel, ms in zip(meta["kernels"], kernel_ms):
        names = list(kernel.get("onnx_nodes") or [UNATTRIBUTED])
        shares = _shares(names, costs, ("flops", "bytes"))
        weight_shares = _shares(names, costs, ("weight_bytes", "flops", "bytes"))
        for name, share, weight_share in zip(names, shares, weight_shares):
            row = nodes.setdefault(name, {"onnx_node": name, "op": costs.get(name, {}).get("op"),
                                          "ms": 0.0, "flops": 0.0,
                                          "weight_bytes": 0.0, "activation_bytes": 0.0,
                                          "kernels": 0})
            row["ms"] += share * ms
            row["flops"] += share * kernel.get("flops", 0)
            row["weight_bytes"] += weight_share * kernel.get("weight_bytes", 0)
            row["activation_bytes"] += share * (kernel.get("read_bytes", 0)
                                                + kernel.get("written_bytes", 0))
            row["kernels"] += 1
    return nodes


def _shares(names: list[str], costs: dict, keys: tuple[str, ...]) -> list[float]:
    """Each node's part of a kernel: by the first of `keys` any of them has, else evenly."""
    for key in keys:
        amounts = [costs.get(n, {}).get(key, 0) for n in names]
        if sum(amounts) > 0:
            return [a / sum(amounts) for a in amounts]
    return [1 / len(names)] * len(names)


def ceilings(meta: dict, limits: MachineLimits, threads: int,
             weight_scale: float = 1.0) -> dict:
    """Peak FLOP/s and the bandwidth the model's footprint gets, at `threads` threads."""
    stats = meta.get("stats", {})
    footprint = int(stats.get("weights_bytes", 0) * weight_scale + stats.get("arena_bytes", 0))
    level, gbps = limits.ceiling_for(footprint)
    if level == "L2":
        gbps *= threads  # each core reads its own L2
    return {"peak_flops": limits.peak_gflops * 1e9 * threads, "bandwidth": gbps * 1e9,
            "bandwidth_level": level, "footprint_bytes": footprint}


def roofline_seconds(flops: float, weight_bytes: float, activation_bytes: float,
                     limits: dict) -> tuple[float, float]:
    """(compute time, memory time) at the ceilings."""
    return flops / limits["peak_flops"], (weight_bytes + activation_bytes) / limits["bandwidth"]


def changed(row: dict, scenario: str) -> tuple[float, float]:
    """A node's (FLOPs, weight bytes) under a what-if scenario."""
    kind, factor = SCENARIOS[scenario]
    if kind == "density":
        return row["flops"] * factor, row["weight_bytes"] * factor * (1 + BLOCK_INDEX_OVERHEAD)
    return row["flops"], row["weight_bytes"] * factor


def time_scale(row: dict, scenario: str, now: dict, then: dict) -> float | None:
    """T'/T for a node (module docstring) at ceilings `then` instead of `now`; None for a
    node without weights when the ceilings stay: nothing about it changes."""
    has_weights = row["weight_bytes"] > 0
    if not has_weights and now is then:
        return None
    flops, weights = changed(row, scenario) if has_weights else (row["flops"], 0.0)
    before = max(roofline_seconds(row["flops"], row["weight_bytes"], row["activation_bytes"], now))
    after = max(roofline_seconds(flops, weights, row["activation_bytes"], then))
    return after / before if before > 0 else 1.0


def describe_node(row: dict, total_ms: float, now: dict) -> dict:
    compute, memory = roofline_seconds(row["flops"], row["weight_bytes"],
                                       row["activation_bytes"], now)
    seconds = row["ms"] / 1e3
    moved = row["weight_bytes"] + row["activation_bytes"]
    out = {**row, "flops": round(row["flops"]), "weight_bytes": round(row["weight_bytes"]),
           "activation_bytes": round(row["activation_bytes"]),
           "share": row["ms"] / total_ms if total_ms > 0 else 0.0,
           "gflops": row["flops"] / seconds / 1e9 if seconds > 0 else None,
           "intensity": row["flops"] / moved if moved > 0 else None,
           "bound": "compute" if compute >= memory else "memory",
           "roofline_pct": 100 * max(compute, memory) / seconds if seconds > 0 else None}
    out["what_if"], out["model_what_if"] = {}, {}
    for scenario in SCENARIOS:
        scale = time_scale(row, scenario, now, now)
        out["what_if"][scenario] = 1 / scale if scale else None
        out["model_what_if"][scenario] = (
            total_ms / (total_ms - row["ms"] * (1 - scale)) if scale and total_ms > 0 else None)
    return out


def all_layers_what_if(meta: dict, nodes: list[dict], limits: MachineLimits, threads: int,
                       now: dict) -> dict:
    """Model speedup with every node's weights changed at once, bandwidth level included."""
    total = sum(n["ms"] for n in nodes)
    out = {}
    for scenario, (kind, factor) in SCENARIOS.items():
        weight_scale = factor * (1 + BLOCK_INDEX_OVERHEAD) if kind == "density" else factor
        then = ceilings(meta, limits, threads, weight_scale)
        after = sum(n["ms"] * (time_scale(n, scenario, now, then) or 1.0) for n in nodes)
        out[scenario] = {"speedup": total / after if after > 0 else None,
                         "bandwidth_level": then["bandwidth_level"]}
    return out


def layer_report(meta: dict, kernel_timings: list[dict], limits: MachineLimits,
                 threads: int = 1) -> dict:
    """The per-ONNX-node report for one artifact and its kernel timings (`profile`)."""
    nodes = list(attribute(meta, [k["mean_ms"] for k in kernel_timings]).values())
    total = sum(n["ms"] for n in nodes)
    now = ceilings(meta, limits, threads)
    rows = sorted((describe_node(n, total, now) for n in nodes), key=lambda r: -r["ms"])
    return {"total_ms": total, "threads": threads, "cpu": limits.cpu,
            "cpu_model": limits.cpu_model,
            "peak_gflops": now["peak_flops"] / 1e9, "bandwidth_gbps": now["bandwidth"] / 1e9,
            "bandwidth_level": now["bandwidth_level"], "footprint_bytes": now["footprint_bytes"],
            "layers": rows, "all_layers": all_layers_what_if(meta, nodes, limits, threads, now)}


def format_layers(report: dict, top: int = 20) -> str:
    """The report as a table, slowest ONNX node first."""
    r = report
    lines = [f"per ONNX node, {r['threads']} thread(s) on {r['cpu']} ({r['cpu_model']}): "
             f"kernels total {r['total_ms']:.4f} ms; peak {r['peak_gflops']:.1f} GFLOP/s "
             f"(sgemm), bandwidth {r['bandwidth_gbps']:.1f} GB/s ({r['bandwidth_level']}: "
             f"weights + arena {r['footprint_bytes'] / 2**20:.2f} MiB)",
             "fused kernels are split among their ONNX nodes by FLOP share; what-ifs are "
             "roofline estimates (layer speedup / whole model)",
             f"{'onnx node':32s} {'op':14s} {'ms':>9s} {'share':>6s} {'GFLOP/s':>8s} {'weights':>9s} "
             f"{'activ.':>9s} {'bound':>7s} {'%roof':>5s}  " + " ".join(f"{s:>13s}" for s in SCENARIOS)]
    for row in r["layers"][:top]:
        lines.append(f"{row['onnx_node'][-32:]:32s} {(row['op'] or '?')[:14]:14s} {row['ms']:9.4f} {100 * row['share']:5.1f}% "
                     f"{_num(row['gflops'], 8, 1)} {_bytes(row['weight_bytes'])} "
                     f"{_bytes(row['activation_bytes'])} {row['bound']:>7s} "
                     f"{_num(row['roofline_pct'], 4, 0)}%  " + " ".join(
                         _what_if(row['what_if'][s], row['model_what_if'][s]) for s in SCENARIOS))
    if len(r["layers"]) > top:
        rest = r["layers"][top:]
        lines.append(f"... {len(rest)} more nodes, {sum(x['ms'] for x in rest):.4f} ms")
    lines.append("all layers at once: " + ", ".join(
        f"{s} {a['speedup']:.2f}x ({a['bandwidth_level']})" for s, a in r["all_layers"].items()))
    return "\n".join(lines)


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}s}" if value is None else f"{value:{width}.{digits}f}"


def _bytes(n: float) -> str:
    for unit, size in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:6.1f} {unit}"
    return f"{n:6.0f} B  "


def _what_if(layer: float | None, model: float | None) -> str:
    return f"{'-':>13s}" if layer is None else f"{layer:5.2f}x/{model:5.3f}x"
