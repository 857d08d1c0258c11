"""The bench table: one row per model and thread count, geometric means per group.

Speedups are baseline median / our median (above 1: we are faster). "best" is the faster of
ONNX Runtime and OpenVINO for that row, since users compare against the better one.
"x1->N" is our own thread scaling: our median at 1 thread over ours at N threads.
"""
from __future__ import annotations

import math

COLUMNS = [("model", "{:24s}", 24), ("thr", "{:>3d}", 3), ("ours ms", "{:9.3f}", 9),
           ("ORT ms", "{:9.3f}", 9), ("OV ms", "{:9.3f}", 9), ("ORT/ours", "{:8.2f}", 8),
           ("OV/ours", "{:7.2f}", 7), ("best/ours", "{:9.2f}", 9), ("x1->N", "{:5.2f}", 5),
           ("allclose", "{:>8s}", 8), ("compile s", "{:9.1f}", 9)]
ROW_KEYS = ["model", "threads", "ours_ms", "ort_ms", "openvino_ms", "speedup_ort",
            "speedup_openvino", "speedup_best", "scaling", "allclose", "compile_s"]
MEAN_KEYS = ["speedup_ort", "speedup_openvino", "speedup_best", "scaling"]


def header() -> str:
    return " ".join(f"{title:>{width}s}" if k else f"{title:{width}s}"
                    for k, (title, _, width) in enumerate(COLUMNS))


def _cell(fmt: str, width: int, value) -> str:
    if value is None:
        return " " * (width - 1) + "-"
    return fmt.format(str(value) if fmt.endswith("s}") and not isinstance(value, str) else value)


def format_row(row: dict) -> str:
    return " ".join(_cell(fmt, width, row.get(key))
                    for key, (_, fmt, width) in zip(ROW_KEYS, COLUMNS))


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def group_means(rows: list[dict], groups, threads) -> list[dict]:
    """One line per (group, threads): the geometric mean of each speedup column."""
    means = []
    for group in groups:
        for t in threads:
            members = [r for r in rows if r["group"] == group and r["threads"] == t]
            if members:
                means.append({"group": group, "threads": t, "models": len(members),
                              **{k: geomean(r[k] for r in members) for k in MEAN_KEYS}})
    return means


def format_mean(mean: dict) -> str:
    label = f"geomean {mean['group']} ({mean['models']})"
    cells = [_cell("{:8.2f}", 8, mean["speedup_ort"]), _cell("{:7.2f}", 7, mean["speedup_openvino"]),
             _cell("{:9.2f}", 9, mean["speedup_best"]), _cell("{:5.2f}", 5, mean["scaling"])]
    return f"{label:24s} {mean['threads']:>3d} {'':>9s} {'':>9s} {'':>9s} " + " ".join(cells)
