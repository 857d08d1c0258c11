"""The OpenAPI 3.1 description of /api/v1, written by hand next to the views it describes."""
from __future__ import annotations

from django.http import JsonResponse

from compiler_core.version import __version__

STATS = {"type": "object", "properties": {k: {"type": "number"} for k in (
    "median_ms", "mean_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms", "runs")}}
IO = {"type": "array", "items": {"type": "object", "properties": {
    "name": {"type": "string"}, "dtype": {"type": "string"},
    "shape": {"type": ["array", "null"], "items": {"type": ["integer", "string"]},
              "description": "strings are symbolic dimensions"}}}}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def errors(*codes: int) -> dict:
    text = {400: "invalid request", 401: "missing, invalid or revoked token",
            404: "not found (also for other users' objects)", 409: "state conflict",
            413: "upload too large", 503: "the job queue is unreachable; try again"}
    return {str(c): {"description": text[c], **json_content(ref("Error"))} for c in codes}


def page_of(item: str) -> dict:
    return {"type": "object", "properties": {
        "count": {"type": "integer"}, "page": {"type": "integer"},
        "page_size": {"type": "integer"}, "next": {"type": ["string", "null"]},
        "previous": {"type": ["string", "null"]}, "results": {"type": "array", "items": ref(item)}}}


PAGE_PARAMS = [{"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
               {"name": "page_size", "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 100}}]


def id_param(name: str) -> dict:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "format": "uuid"}}


SCHEMAS = {
    "Error": {"type": "object", "required": ["error"],
              "properties": {"error": {"type": "string"}}},
    "Model": {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "name": {"type": "string"},
        "sha256": {"type": "string"}, "size": {"type": "integer"},
        "opset": {"type": "integer"}, "producer": {"type": "string"}, "inputs": IO,
        "outputs": IO, "ops": {"type": "object", "additionalProperties": {"type": "integer"}},
        "unsupported_ops": {"type": "array", "items": {"type": "string"}},
        "created_at": {"type": "string", "format": "date-time"}}},
    "JobRequest": {"type": "object", "required": ["model"], "properties": {
        "model": {"type": "string", "format": "uuid"},
        "target": {"type": "string", "default": "native"},
        "input_shapes": {"type": "object", "additionalProperties": {
            "oneOf": [{"type": "array", "items": {"type": "integer"}},
                      {"type": "string", "example": "1x3x224x224"}]},
            "description": "required for every input with symbolic dimensions"},
        "opt_level": {"type": "integer", "minimum": 0, "maximum": 3, "default": 3},
        "tuning": {"oneOf": [{"type": "null"},
                             {"type": "object", "properties": {"trials": {"type": "integer"},
                                                               "seconds": {"type": "integer"}}}]},
        "threads": {"type": "integer", "minimum": 1, "maximum": 64, "default": 1}}},
    "Artifact": {"type": "object", "properties": {
        "name": {"type": "string"}, "size": {"type": "integer"}, "sha256": {"type": "string"},
        "url": {"type": "string"}}},
    "Results": {"type": "object", "properties": {
        "compiled": STATS, "onnxruntime": STATS, "speedup": {"type": "number"},
        "max_abs_err": {"type": "number"}, "max_rel_err": {"type": "number"},
        "allclose": {"type": "boolean"},
        "kernels": {"type": "array", "items": {"type": "object"}}}},
    "Job": {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "model": {"type": "string"},
        "target": {"type": "string"}, "input_shapes": {"type": "object"},
        "opt_level": {"type": "integer"}, "tuning": {"type": ["object", "null"]},
        "threads": {"type": "integer"},
        "state": {"enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
        "stage": {"type": "string", "description": "validate, optimize, tune, build, "
                                                   "benchmark, package or upload"},
        "progress": {"type": "number", "minimum": 0, "maximum": 1},
        "error": {"type": ["string", "null"]}, "attempts": {"type": "integer"},
        "results": {"oneOf": [ref("Results"), {"type": "null"}]},
        "artifacts": {"type": "array", "items": ref("Artifact")},
        "log_tail": {"type": "string", "description": "only on GET /jobs/{id}"}}},
    "Target": {"type": "object", "properties": {
        "name": {"type": "string"}, "description": {"type": "string"},
        "triple": {"type": "string"}, "cpu": {"type": "string"},
        "runs_here": {"type": "boolean", "description": "whether this deployment can benchmark it"}}},
}

PATHS = {
    "/models": {
        "get": {"summary": "List your models", "parameters": PAGE_PARAMS,
                "responses": {"200": json_content(page_of("Model")), **errors(400, 401)}},
        "post": {"summary": "Upload an ONNX model",
                 "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
                     "type": "object", "required": ["file"],
                     "properties": {"file": {"type": "string", "format": "binary"},
                                    "name": {"type": "string"}}}}}},
                 "responses": {"201": json_content(ref("Model")), **errors(400, 401, 413)}}},
    "/models/{id}": {"get": {"summary": "One of your models", "parameters": [id_param("id")],
                             "responses": {"200": json_content(ref("Model")), **errors(401, 404)}}},
    "/jobs": {
        "get": {"summary": "List your compile jobs", "parameters": PAGE_PARAMS + [
            {"name": "model", "in": "query", "schema": {"type": "string"}},
            {"name": "state", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": json_content(page_of("Job")), **errors(400, 401, 404)}},
        "post": {"summary": "Submit a compile job",
                 "requestBody": {"required": True, **json_content(ref("JobRequest"))},
                 "responses": {"201": json_content(ref("Job")), **errors(400, 401, 404, 503)}}},
    "/jobs/{id}": {"get": {"summary": "A job's state, stage, progress, results and artifacts",
                           "parameters": [id_param("id")],
                           "responses": {"200": json_content(ref("Job")), **errors(401, 404)}}},
    "/jobs/{id}/cancel": {"post": {"summary": "Cancel a queued or running job",
                                   "parameters": [id_param("id")],
                                   "responses": {"200": json_content(ref("Job")),
                                                 **errors(401, 404, 409)}}},
    "/jobs/{id}/artifacts/{name}": {"get": {
        "summary": "Download an artifact: a redirect to an expiring presigned URL "
                   "(?redirect=0 returns the URL as JSON). package.tar.gz is always there",
        "parameters": [id_param("id"), {"name": "name", "in": "path", "required": True,
                                        "schema": {"type": "string"}},
                       {"name": "redirect", "in": "query", "schema": {"enum": ["0", "1"]}}],
        "responses": {"302": {"description": "redirect to the file"}, **errors(401, 404)}}},
    "/targets": {"get": {"summary": "Targets this deployment compiles for",
                         "responses": {"200": json_content({"type": "object", "properties": {
                             "results": {"type": "array", "items": ref("Target")}}}),
                             **errors(401)}}},
}


def schema() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tensorforge API", "version": f"1 (compiler {__version__})",
                 "description": "Upload ONNX models, compile them for a target, compare their "
                                "latency with ONNX Runtime and download the artifacts."},
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                       "schemas": SCHEMAS},
        "paths": PATHS,
    }


def schema_view(request):
    return JsonResponse(schema(), json_dumps_params={"indent": 1})
