# nodegate developer entry points. Each target does its own set-up on a fresh machine.
#   make demo   - the main job on the embedded lab / simulated boards
#   make test   - the whole test suite (unit, simulator, lab end-to-end)
# The venv holds two distributions of this checkout: nodegate (the node side, src/, and the
# control side as its `deploy` extra) and nodegate-lab (the lab harness, lab/).

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.nodegate-installed
# Both parts on pytest-xdist workers, whole test files per worker; the slow part's workers
# each get their own lab instance and the files that share a lab stay together
# (tests/parallel.py). FAST_WORKERS=0 / TEST_WORKERS=0 run a part serially. Four slow
# workers measured slower than three on 2 cores, twice (docs/dev/testing.md: runs 1 and 10).
FAST_WORKERS ?= 2
TEST_WORKERS ?= 3
xdist   = $(if $(filter 0,$(1)),,-n $(1) --dist loadgroup --no-loadscope-reorder)

.PHONY: setup host-setup test test-fast lint demo bench fuzz clean

$(STAMP): pyproject.toml lab/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch: pinned to the version this project's machines carry as a CPU build (pip takes it
	# from their local package source). On another machine torch==2.13.0 from PyPI is the
	# multi-GB CUDA build: add --index-url https://download.pytorch.org/whl/cpu for the CPU one.
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[deploy,dev,torch,power,ledger]" -e ./lab
	touch $(STAMP)

setup: $(STAMP)

host-setup:
	bash scripts/setup-host.sh

test: host-setup setup
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest tests -m "not slow" -q --durations=15 $(call xdist,$(FAST_WORKERS))
	# pytest exits 5 when no test is marked slow: that is not a failure
	$(PY) -m pytest tests -m "slow" -q --durations=30 $(call xdist,$(TEST_WORKERS)) || [ $$? -eq 5 ]

test-fast: setup
	$(PY) -m pytest tests -m "not slow" -q $(call xdist,$(FAST_WORKERS))

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

demo: host-setup setup
	bash scripts/demo.sh

fuzz: setup
	# the fuzz tests with a long random budget (make test runs them with a small fixed one)
	NODEGATE_FUZZ=long $(PY) -m pytest tests -m fuzz -q

bench: setup
	$(PY) bench/health_speed.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info lab/build lab/src/*.egg-info
