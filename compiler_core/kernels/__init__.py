"""Per-op lowerings to loop nests. Importing this package registers all of them."""
from . import attention, einsum  # noqa: F401
from . import misc, sampling, signal  # noqa: F401  (misc ops)
from . import elementwise  # noqa: F401
from . import quantize  # noqa: F401
from . import conv, conv_blocked, depthwise, matmul, norm, packed_gemm, pool  # noqa: F401  (nn ops)
from . import depthwise_blocked, pool_blocked  # noqa: F401
from . import recurrent, recurrent_step, sparse_gemm, winograd  # noqa: F401
from . import reduce  # noqa: F401
from . import tensor  # noqa: F401
from . import resize  # noqa: F401
from .registry import (LOWERINGS, add_error_flags, error_message, has_error_flag,
                       kernel_params, lower_node, lowering)

__all__ = ["LOWERINGS", "add_error_flags", "error_message", "has_error_flag", "kernel_params",
           "lower_node", "lowering"]
