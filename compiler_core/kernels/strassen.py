"""One level of Strassen's algorithm for PackedGemm: seven half-size products instead of eight.

Split A (M x K), W (K x N) and Y (M x N) in quadrants (halves of each dimension):

    P1 = (A11 + A22)(W11 + W22)    -> Y11 +, Y22 +
    P2 = (A21 + A22) W11           -> Y21 +, Y22 -
    P3 = A11 (W12 - W22)           -> Y12 +, Y22 +
    P4 = A22 (W21 - W11)           -> Y11 +, Y21 +
    P5 = (A11 + A12) W22           -> Y11 -, Y12 +
    P6 = (A21 - A11)(W11 + W12)    -> Y22 +
    P7 = (A12 - A22)(W21 + W22)    -> Y11 +

W is constant, so its seven combinations are computed and packed at compile time (7/4 of
the weights' bytes); a product whose A is a sum of two quadrants has each register tile's
rows of the sum computed into L1 before the tile runs over its panels; each product's
register tiles add themselves, with their signs, into the quadrants of Y that need them,
so no product is ever stored on its own. The first product to write a quadrant adds the
bias, the last applies residual and activation (kernels/packed_gemm.py).

Why: a GEMM that already runs at the core's FMA peak can only get faster by doing fewer
multiplications. Half-size products run at the same rate as the whole one (AMD EPYC,
LLVM: znver4, 1 thread: seven products of BERT's halves took 0.86-0.90x the time of the
whole, 128 x 384 by 384 up to 512 x 1024 by 1024), so 7/8 of the FMAs is 10-12% less time.
The price is accuracy: each output sums products of sums, about 1.5x the rounding error of
the plain product (bounded at 4x in tests/compiler_core/test_strassen.py).

What did not pay (same CPU, 1 thread, BERT's shapes): one parallel sweep of all five sums
of A into scratch before the products (0.10-0.3 ms of a 4 ms product: its 3 MB of stores
missed the caches); each product's tiles adding the two quadrants of A as they broadcast
them, 1.00-1.13x the plain product's time (the adds and broadcasts compete with the FMAs);
all seven products at each register tile's place (Y's four tiles kept in L1), 1.01-1.08x
(each product's W panel then comes from L2). The extra writes into Y (12 tiles against 4)
still cost 0.05-0.2 ms of a 4 ms product where k is short (K/2 = 192).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# quadrants of A, W and Y as (row half, column half)
Q11, Q12, Q21, Q22 = (0, 0), (0, 1), (1, 0), (1, 1)


@dataclass(frozen=True)
class Product:
    a: tuple            # (sign, quadrant of A) terms, the first with sign 1
    w: tuple            # (sign, quadrant of W) terms
    outs: tuple         # (quadrant of Y, sign)


PRODUCTS = (
    Product(((1, Q11), (1, Q22)), ((1, Q11), (1, Q22)), ((Q11, 1), (Q22, 1))),
    Product(((1, Q21), (1, Q22)), ((1, Q11),), ((Q21, 1), (Q22, -1))),
    Product(((1, Q11),), ((1, Q12), (-1, Q22)), ((Q12, 1), (Q22, 1))),
    Product(((1, Q22),), ((1, Q21), (-1, Q11)), ((Q11, 1), (Q21, 1))),
    Product(((1, Q11), (1, Q12)), ((1, Q22),), ((Q11, -1), (Q12, 1))),
    Product(((1, Q21), (-1, Q11)), ((1, Q11), (1, Q12)), ((Q22, 1),)),
    Product(((1, Q12), (-1, Q22)), ((1, Q21), (1, Q22)), ((Q11, 1),)),
)


@dataclass(frozen=True)
class Write:
    """One product's contribution to one quadrant of Y."""
    quadrant: tuple
    sign: int
    first: bool  # the quadrant holds nothing yet: this write starts it (and adds the bias)
    last: bool   # no product writes the quadrant after this one: residual, activation


def writes(product: int) -> tuple[Write, ...]:
    """The writes of PRODUCTS[product], knowing which products write each quadrant before
    and after it."""
    def order(q):
        return [i for i, p in enumerate(PRODUCTS) for quad, _ in p.outs if quad == q]
    return tuple(Write(q, s, order(q)[0] == product, order(q)[-1] == product)
                 for q, s in PRODUCTS[product].outs)


def fits(M: int, N: int, K: int) -> bool:
    """Strassen needs even dimensions (the quadrants are views of A and Y)."""
    return M % 2 == 0 and N % 2 == 0 and K % 2 == 0


def weight_combinations(w: np.ndarray) -> list[np.ndarray]:
    """The seven (K/2, N/2) combinations of W's quadrants, in PRODUCTS order."""
    k2, n2 = w.shape[0] // 2, w.shape[1] // 2

    def quad(q):
        return w[q[0] * k2:(q[0] + 1) * k2, q[1] * n2:(q[1] + 1) * n2].astype(np.float32)
    return [sum(s * quad(q) for s, q in p.w) for p in PRODUCTS]

