# Quickstart: `make demo` runs the main job, `make test` runs the tests.
# Both create a virtual environment in .venv (unless one is active) and install tfdiag into it.

VENV ?= .venv
ifdef VIRTUAL_ENV
BIN := $(VIRTUAL_ENV)/bin
STAMP := $(VIRTUAL_ENV)/.tfdiag-installed
else
BIN := $(VENV)/bin
STAMP := $(VENV)/.tfdiag-installed
endif
PYTHON := $(BIN)/python

.PHONY: install demo test test-fast benchmarks clean

install: $(STAMP)

$(STAMP): pyproject.toml
ifndef VIRTUAL_ENV
	test -x $(PYTHON) || python3 -m venv $(VENV)
endif
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e '.[test]'
	touch $@

demo: install
	$(BIN)/tfdiag demo

# Tests start TensorFlow servers, which listen on all interfaces: run them where only loopback exists.
# Two pytest-xdist workers, a test file each at a time; a test marked `alone` runs with no other beside it
# (tests/turns.py). The slowest 15 are listed at the end: the suite is meant to take at most 12 minutes on a
# 2-core machine.
test: install
	tools/loopback-only $(PYTHON) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15

test-fast: install
	tools/loopback-only $(PYTHON) -m pytest -q -p no:cacheprovider -m "not cluster"

clean:
	rm -rf $(VENV) build *.egg-info demo-logs
