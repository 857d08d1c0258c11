"""Kernels for DFT and STFT: direct transforms accumulated in float64.

Input and output hold complex numbers as a trailing (real, imaginary) pair, or a trailing 1
for real signals. The converter passes the twiddle table (see converters/signal.py).
"""
from __future__ import annotations

import numpy as np

from ..ir.loops import INDEX, as_expr, cast, select
from .registry import lowering

F64 = np.dtype(np.float64)


class _Twiddles:
    """cos and sin of 2*pi*k*j/n, read from rows [offset, offset + n) of the table."""

    def __init__(self, table, n: int, offset: int):
        self.table, self.n, self.offset = table, n, offset

    def at(self, k, j):
        row = (k * j) % self.n + self.offset
        return self.table[row, 0], self.table[row, 1]


def _load_complex(x, idx):
    """(real, imaginary or None) at idx (all but the trailing pair), widened to float64."""
    real = cast(x[(*idx, 0)], F64)
    return real, (cast(x[(*idx, 1)], F64) if x.shape[-1] == 2 else None)


def _rotate_into(kb, re, im, value, cos, sin, sign: int):
    """(re, im) += value * (cos + i * sign * sin)."""
    xr, xi = value
    dre, dim = xr * cos, xr * sin
    if xi is not None:
        dre, dim = dre - xi * sin * float(sign), xi * cos + dim * float(sign)
    else:
        dim = dim * float(sign)
    kb.set(re, kb.get(re) + dre)
    kb.set(im, kb.get(im) + dim)


def _store_complex(kb, y, idx, re, im, scale: float):
    kb.store(y, (*idx, 0), cast(re * scale, y.dtype))
    if y.shape[-1] == 2:
        kb.store(y, (*idx, 1), cast(im * scale, y.dtype))


# ---------------------------------------------------------------- DFT

def _half_spectrum_to_real(kb, x, tw, y, at, k, size):
    """One output sample of an inverse one-sided transform (numpy's irfft): every bin but
    the DC and (for even n) Nyquist ones stands for itself and its mirrored conjugate."""
    n = tw.n
    total = kb.local(F64, 0.0, "sum")
    with kb.loop(min(size, n // 2 + 1)) as j:
        cos, sin = tw.at(k, j)
        xr, xi = _load_complex(x, at(j))
        term = xr * cos if xi is None else xr * cos - xi * sin
        single = j.eq(0) | j.eq(n // 2) if n % 2 == 0 else j.eq(0)
        kb.set(total, kb.get(total) + term * select(single, as_expr(1.0, F64), 2.0))
    kb.store(y, (*at(k), 0), cast(kb.get(total) / float(n), y.dtype))


def _dft_along(kb, x, table, y, axis, n, out_len, offset, inverse, onesided):
    rank = len(x.shape)
    others = [d for d in range(rank - 1) if d != axis]
    tw, size = _Twiddles(table, n, offset), x.shape[axis]
    with kb.loops([x.shape[d] for d in others]) as rest:
        def at(pos):
            idx = list(rest)
            idx.insert(axis, pos)
            return tuple(idx)
        with kb.loop(out_len) as k:
            if inverse and onesided:
                _half_spectrum_to_real(kb, x, tw, y, at, k, size)
            else:
                _full_spectrum_sample(kb, x, tw, y, at, k, size, inverse)


def _full_spectrum_sample(kb, x, tw, y, at, k, size, inverse):
    re, im = kb.local(F64, 0.0, "re"), kb.local(F64, 0.0, "im")
    # past the input's end the signal is zero-padded; past n it is cut off
    with kb.loop(min(size, tw.n)) as j:
        _rotate_into(kb, re, im, _load_complex(x, at(j)), *tw.at(k, j), sign=1 if inverse else -1)
    _store_complex(kb, y, at(k), kb.get(re), kb.get(im), 1.0 / tw.n if inverse else 1.0)


@lowering("DFT")
def lower_dft(node, kb, ins, outs):
    x, table, y = ins[0], ins[1], outs[0]
    flags = node.attrs["inverse"], node.attrs["onesided"]
    plans = node.attrs["plans"]
    if len(ins) == 2:
        _dft_along(kb, x, table, y, *plans[0], *flags)
        return
    # run-time axis: one transform per possible axis, the matching one runs
    rank = len(x.shape)
    axis = kb.local(INDEX, cast(ins[2].flat(0), INDEX), "axis")
    for plan in plans:
        with kb.if_(kb.get(axis).eq(plan[0]) | kb.get(axis).eq(plan[0] - rank)):
            _dft_along(kb, x, table, y, *plan, *flags)


# ---------------------------------------------------------------- STFT

@lowering("STFT")
def lower_stft(node, kb, ins, outs):
    """y[b, f, k] = sum_j signal[b, f * step + j] * window[j] * exp(-2*pi*i*k*j/n)."""
    signal, table = ins[0], ins[1]
    window = ins[2] if len(ins) > 2 else None
    y = outs[0]
    step, n = node.attrs["frame_step"], node.attrs["frame_length"]
    tw = _Twiddles(table, n, 0)
    with kb.loops(y.shape[:2]) as (b, f), kb.loop(y.shape[2]) as k:
        re, im = kb.local(F64, 0.0, "re"), kb.local(F64, 0.0, "im")
        with kb.loop(n) as j:
            xr, xi = _load_complex(signal, (b, f * step + j))
            if window is not None:
                w = cast(window[(j,)], F64)
                xr, xi = xr * w, (None if xi is None else xi * w)
            _rotate_into(kb, re, im, (xr, xi), *tw.at(k, j), sign=-1)
        _store_complex(kb, y, (b, f, k), kb.get(re), kb.get(im), 1.0)
