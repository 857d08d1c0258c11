"""Conformance cases that do not pass yet, each with the reason. Regenerate the candidates
with `python -m tests.conformance --failures FILE` and review every reason by hand."""

EXPECTED_FAILURES: dict[str, str] = {}
