import numpy as np
import pytest
from onnx import helper

from .helpers import assert_matches, make_model, rand

F = np.float32


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("i,i", [(6,), (6,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
])
def test_einsum(equation, shapes):
    feeds = {f"x{k}": rand(*s, seed=k) for k, s in enumerate(shapes)}
    out = np.einsum(equation, *feeds.values()).shape
    m = make_model([helper.make_node("Einsum", list(feeds), ["y"], equation=equation)],
                   [(n, F, a.shape) for n, a in feeds.items()], [("y", F, out)], opset=12)
    assert_matches(m, feeds)
