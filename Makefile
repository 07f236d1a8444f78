# The two commands a new user needs: `make demo` and `make check`.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
LIT_ARGS ?= -v

.PHONY: demo check check-slow test lit lint bench wheel clean install fuzz

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/mnist.py

check: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/lit test/lit $(LIT_ARGS)

# The `slow` tests `make check` leaves out for CI's time budget (the larger model-zoo families,
# the fuzzer's fixed budget on iree-vulkan).
check-slow: $(STAMP)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lit: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/lit test/lit $(LIT_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

# The differential fuzzer's large budget (a small one runs in `make check`, test/test_fuzz.py).
FUZZ_PROGRAMS ?= 5000
FUZZ_SEEDS ?= 3
fuzz: $(STAMP)
	FUZZ_PROGRAMS=$(FUZZ_PROGRAMS) FUZZ_SEEDS=$(FUZZ_SEEDS) $(PY) -m tools.fuzz

bench: $(STAMP)
	$(PY) bench/run_all.py

# dist/lazy_mlir-*.whl: installs lazy_core and lazy_mlir (test/test_wheel.py checks it).
wheel: $(STAMP)
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

clean:
	rm -rf $(VENV) build dist test/lit/Output
