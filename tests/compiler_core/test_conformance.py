"""ONNX's operator conformance suite, compiled and run case by case.

A fast, fixed subset runs by default; `make test-conformance` runs all of them. Cases that
are known not to pass are listed with a reason in conformance_expected_failures.py; a case
listed there that starts passing fails the run, so the list stays honest.
"""
import pytest

from tests.conformance import all_cases, run_case

from .conformance_expected_failures import EXPECTED_FAILURES

FAST_SUBSET_STRIDE = 8


def _params():
    for k, name in enumerate(sorted(all_cases())):
        marks = [] if k % FAST_SUBSET_STRIDE == 0 else [pytest.mark.conformance_full]
        if name in EXPECTED_FAILURES:
            marks.append(pytest.mark.xfail(reason=EXPECTED_FAILURES[name], strict=True))
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", _params())
def test_conformance_case(name):
    status, message = run_case(name)
    assert status == "pass", message
