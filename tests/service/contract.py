"""Checks of live responses against the OpenAPI document the server publishes.

`response_schema` finds the schema an operation declares for a status code; `violations`
validates an instance against it with a JSON Schema 2020-12 validator (OpenAPI 3.1 schemas
are JSON Schema), resolving `#/components/...` references inside the document itself;
`undeclared` lists the fields of an instance that the schema does not name, as dotted
paths (`results.kernels[].name`), so a test can say which fields drifted, not just that
validation failed.
"""
from __future__ import annotations

import jsonschema_rs


def response_schema(spec: dict, method: str, path: str, status: int) -> dict:
    """The schema of `method path` answering `status`; path is the template (/jobs/{id})."""
    operation = spec["paths"][path][method.lower()]
    response = operation["responses"].get(str(status))
    assert response is not None, f"{method} {path} does not declare status {status}"
    return response["content"]["application/json"]["schema"]


def _rooted(spec: dict, schema: dict) -> dict:
    # The document is the root so that "#/components/schemas/X" resolves.
    return {**schema, "components": spec.get("components", {})}


def violations(spec: dict, schema: dict, instance) -> list[str]:
    validator = jsonschema_rs.Draft202012Validator(_rooted(spec, schema))
    return [f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}"
            for e in validator.iter_errors(instance)]


def _deref(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        node = spec
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _branches(spec: dict, schema: dict) -> list[dict]:
    schema = _deref(spec, schema)
    nested = schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", [])
    if not nested:
        return [schema]
    return [schema] + [b for s in nested for b in _branches(spec, s)]


def undeclared(spec: dict, schema: dict, instance, path: str = "") -> set[str]:
    """Field paths in instance that no branch of schema declares."""
    branches = _branches(spec, schema)
    if isinstance(instance, dict):
        return _undeclared_keys(spec, branches, instance, path)
    if isinstance(instance, list):
        items = [b["items"] for b in branches if isinstance(b.get("items"), dict)]
        found = set()
        for item in instance:
            found |= _first_fit(spec, items, item, f"{path}[]")
        return found
    return set()


def _undeclared_keys(spec: dict, branches: list[dict], instance: dict, path: str) -> set[str]:
    found = set()
    for key, value in instance.items():
        child = f"{path}.{key}" if path else key
        declared = [b["properties"][key] for b in branches if key in b.get("properties", {})]
        declared += [b["additionalProperties"] for b in branches
                     if isinstance(b.get("additionalProperties"), dict)]
        if not declared:
            found.add(child)
            continue
        found |= _first_fit(spec, declared, value, child)
    return found


def _first_fit(spec: dict, schemas: list[dict], value, path: str) -> set[str]:
    """The fewest undeclared fields over the candidate schemas (no candidate: nothing)."""
    results = [undeclared(spec, s, value, path) for s in schemas]
    return min(results, key=len) if results else set()
