# packcli: make demo (install, pack the bundled sample, print stats) and make test (install, run the suite);
# make dist builds the sdist and the wheel into dist/.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
DEMO_OUT ?= build/demo-packed

.PHONY: install demo test lint bench dist clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: a bare or ranged torch resolved first would pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[dev,torch]"
	touch $@

demo: install
	$(VENV)/bin/packcli pack examples/sample.jsonl.gz --max-len 1024 --out $(DEMO_OUT) --overwrite
	$(VENV)/bin/packcli stats $(DEMO_OUT) --plot docs/demo-stats.png

# Two pytest workers (pytest-xdist); the tests that start Ray share one (see tests/conftest.py).
TEST_WORKERS ?= 2

test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

lint: install
	$(VENV)/bin/ruff check packcli tests bench
	$(VENV)/bin/ruff format --check packcli tests bench
	$(VENV)/bin/mypy packcli

bench: install
	$(PY) bench/run.py

# The sdist first, then the wheel built from it: a file missing from the sdist fails here, not at a user's.
dist: install
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
