"""Tensorforge compiler core: ONNX in, a native shared library out (see docs/architecture.md).

The public names load on first use (PEP 562): a process that needs only part of the
package, as the tuner's measure child does for every batch, does not pay for the ONNX
frontend (importing onnx alone took 0.6 s of the child's 0.9 s start).
"""
from importlib import import_module

from .version import __version__

_LAZY = {"Artifact": ".artifact", "compile": ".driver", "CompileError": ".errors",
         "RuntimeInputError": ".errors", "LoadedModel": ".runtime.loaded_model",
         "load": ".runtime.loaded_model"}

__all__ = ["Artifact", "CompileError", "LoadedModel", "RuntimeInputError", "__version__",
           "compile", "load"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
