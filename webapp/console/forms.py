"""The compile form: one field per symbolic dimension, turned into a JSON-style job request
so the console and the API share validation (webapp/jobs/validation.py)."""
from __future__ import annotations

from webapp.jobs import fleet

OPT_LEVELS = [(3, "O3 — everything (recommended)"), (2, "O2 — no layout changes"),
              (1, "O1 — basic folding"), (0, "O0 — no optimization")]
WEIGHT_DTYPES = [("float32", "float32 — exact (default)"),
                 ("float16", "float16 — half the bytes; error measured and reported"),
                 ("int8", "int8 — a quarter of the bytes, per-channel scales; error measured "
                          "and reported")]


def symbolic_fields(model) -> list[dict]:
    """[{input, index, name, field}] for each dimension the user must give."""
    fields = []
    for spec in model.inputs:
        for k, d in enumerate(spec.get("shape") or []):
            if not isinstance(d, int) or d <= 0:
                fields.append({"input": spec["name"], "index": k, "name": str(d),
                               "field": f"dim__{spec['name']}__{k}"})
    return fields


def _number(raw: str):
    """Digits become an int; anything else stays text for validation to refuse by name."""
    raw = raw.strip()
    return int(raw) if raw.isdigit() else raw


def request_from_post(model, post) -> dict:
    shapes = {}
    for spec in model.inputs:
        dims = list(spec.get("shape") or [])
        for k, d in enumerate(dims):
            if not isinstance(d, int) or d <= 0:
                raw = post.get(f"dim__{spec['name']}__{k}", "").strip()
                dims[k] = int(raw) if raw.isdigit() else (raw or None)
        if any(not isinstance(d, int) for d in dims):
            missing = [d for d in dims if not isinstance(d, int)]
            if any(m is None for m in missing):
                continue  # validation reports the missing shape with the API's wording
        shapes[spec["name"]] = dims
    tuning = None
    budget = post.get("tuning_kind", "none")
    amount = post.get("tuning_amount", "")
    if budget in ("trials", "seconds"):
        tuning = {budget: _number(amount)}
    return {"model": str(model.id), "target": post.get("target", "native"),
            "input_shapes": shapes, "opt_level": _number(post.get("opt_level", "3")),
            "threads": _number(post.get("threads", "1")), "tuning": tuning,
            "weight_dtype": post.get("weight_dtype", "float32")}


def target_choices() -> list[dict]:
    return fleet.target_listing()
