"""Importing this package registers every ONNX converter."""
from . import elementwise  # noqa: F401
from . import reduce  # noqa: F401
from . import tensor  # noqa: F401
from . import nn  # noqa: F401
