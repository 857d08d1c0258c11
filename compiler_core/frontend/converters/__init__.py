"""Importing this package registers every ONNX converter."""
from . import einsum  # noqa: F401
from . import misc, quantized_linear, sampling, signal  # noqa: F401  (misc ops)
from . import control_flow  # noqa: F401
from . import elementwise  # noqa: F401
from . import quantize  # noqa: F401
from . import recurrent  # noqa: F401
from . import reduce  # noqa: F401
from . import tensor  # noqa: F401
from . import resize  # noqa: F401
from . import nn  # noqa: F401
