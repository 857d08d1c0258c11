"""Tiny server-side SVG charts: bars at the median with whiskers up to p90 (no JS library)."""
from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, ROW, LEFT, RIGHT = 640, 44, 150, 90
COLORS = {"compiled": "#4f46e5", "onnxruntime": "#94a3b8"}


@dataclass
class Bar:
    label: str
    sublabel: str
    median: float
    p90: float
    color: str
    y: int = 0
    width: float = 0.0
    whisker: float = 0.0


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is at least value."""
    if value <= 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * base * (1 + 1e-9):
            return step * base
    return 10 * base


def _ticks(top: float) -> list[float]:
    return [top * k / 4 for k in range(5)]


def latency_chart(rows: list[tuple[str, str, dict]]) -> dict | None:
    """rows: (label, runtime, stats with median_ms/p90_ms) -> geometry for the SVG template."""
    bars = [Bar(label, runtime, s["median_ms"], s["p90_ms"], COLORS.get(runtime, "#0ea5e9"))
            for label, runtime, s in rows if s]
    if not bars:
        return None
    top = _nice_max(max(b.p90 for b in bars))
    span = WIDTH - LEFT - RIGHT
    for k, b in enumerate(bars):
        b.y = 28 + k * ROW
        b.width = max(span * b.median / top, 1.5)
        b.whisker = span * b.p90 / top
    height = 28 + len(bars) * ROW + 30
    ticks = [{"x": LEFT + span * t / top, "label": fmt_ms(t)} for t in _ticks(top)]
    return {"bars": bars, "width": WIDTH, "height": height, "left": LEFT, "ticks": ticks,
            "axis_y": height - 24, "span": span}


def fmt_ms(value: float) -> str:
    if value == 0:
        return "0"
    if value < 0.01:
        return f"{value * 1000:.1f} µs"
    if value < 1:
        return f"{value * 1000:.0f} µs"
    return f"{value:.3g} ms"


def job_chart(job) -> dict | None:
    r = job.results or {}
    if "compiled" not in r:
        return None
    return latency_chart([("Tensorforge", "compiled", r["compiled"]),
                          ("ONNX Runtime", "onnxruntime", r["onnxruntime"])])


def compare_chart(jobs) -> dict | None:
    rows = []
    for n, job in enumerate(jobs, 1):
        r = job.results or {}
        if "compiled" in r:
            rows.append((f"#{n} {job.target} O{job.opt_level}", "compiled", r["compiled"]))
    base = next((j.results["onnxruntime"] for j in jobs if "onnxruntime" in (j.results or {})),
                None)
    if base:
        rows.append(("ONNX Runtime", "onnxruntime", base))
    return latency_chart(rows)


CURVE_W, CURVE_H, CURVE_PAD = 640, 220, 48


def tuning_curve(progress: dict | None) -> dict | None:
    """The tuning curve: the tuned kernels' estimated time, as a share of their default
    schedules' time, against trials (a line; 100% is untuned)."""
    points = [p for p in (progress or {}).get("curve", [])
              if p.get("default_ms") and p.get("estimate_ms") is not None]
    if len(points) < 2:
        return None
    most = max(p["trials"] for p in points) or 1
    low = min(min(p["estimate_ms"] / p["default_ms"] for p in points), 0.9)
    low = math.floor(low * 10) / 10

    def xy(p):
        share = p["estimate_ms"] / p["default_ms"]
        x = CURVE_PAD + (CURVE_W - 2 * CURVE_PAD) * p["trials"] / most
        y = 16 + (CURVE_H - 56) * (1.0 - share) / (1.0 - low)
        return f"{x:.1f},{y:.1f}"
    last = points[-1]
    return {"width": CURVE_W, "height": CURVE_H, "left": CURVE_PAD,
            "right": CURVE_W - CURVE_PAD, "bottom": CURVE_H - 40,
            "points": " ".join(xy(p) for p in points), "trials": most,
            "low": f"{low:.0%}", "share": last["estimate_ms"] / last["default_ms"]}


TOP_LAYERS = 12
WHAT_IFS = [("sparse80", "80% sparse"), ("sparse90", "90% sparse"), ("float16", "float16"),
            ("int8", "int8")]


def layer_bars(job) -> dict | None:
    """The slowest ONNX nodes of a job's layer report, each with its bar's width (percent of
    the slowest) and its what-ifs in the order of WHAT_IFS; None without a report."""
    report = (job.results or {}).get("layer_report")
    if not report or not report["layers"]:
        return None
    top = report["layers"][:TOP_LAYERS]
    longest = max(top[0]["ms"], 1e-12)
    rows = [{**row, "bar_pct": max(100 * row["ms"] / longest, 0.5),
             "what_ifs": [(row["what_if"][k], row["model_what_if"][k]) for k, _ in WHAT_IFS]}
            for row in top]
    rest = report["layers"][TOP_LAYERS:]
    return {**report, "rows": rows, "what_if_labels": [label for _, label in WHAT_IFS],
            "rest": len(rest), "rest_ms": sum(r["ms"] for r in rest),
            "all_layers_row": [report["all_layers"][k] for k, _ in WHAT_IFS]}
