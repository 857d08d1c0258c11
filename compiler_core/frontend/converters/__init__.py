"""Importing this package registers every ONNX converter."""
from . import elementwise  # noqa: F401
