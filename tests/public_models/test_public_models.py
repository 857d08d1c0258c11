"""Real OCR and speech models from public packages compile with input_shapes only and match
ONNX Runtime. `make test-public-models` (downloads the wheels with pip on first run)."""
import numpy as np
import pytest

import compiler_core as cc
from compiler_core.runtime.benchmark import ort_session

from .catalog import MODELS, feeds_for, fetch

pytestmark = pytest.mark.public_models


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_public_model_matches_onnxruntime(model):
    path = fetch(model)
    feeds = feeds_for(model)
    got = cc.compile(path, input_shapes=model.input_shapes).run(feeds)
    sess = ort_session(str(path), threads=1)
    expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for name, ref in expected.items():
        tol = 1e-4 + 1e-3 * float(np.max(np.abs(ref), initial=0))
        np.testing.assert_allclose(got[name], ref, rtol=1e-3, atol=tol, err_msg=name)
