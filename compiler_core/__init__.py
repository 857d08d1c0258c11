"""Tensorforge compiler core: ONNX in, a native shared library out (see docs/architecture.md)."""
from .frontend import converters  # noqa: F401  registers every ONNX converter
from .artifact import Artifact
from .driver import compile
from .errors import CompileError, RuntimeInputError
from .runtime.loaded_model import LoadedModel, load
from .version import __version__

__all__ = ["Artifact", "CompileError", "LoadedModel", "RuntimeInputError", "__version__",
           "compile", "load"]
