# packcli: make demo (install what the demo needs, pack the bundled sample, print stats) and make test (install the
# dev set, run the whole suite); make dist builds the sdist and the wheel into dist/.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
DEMO_OUT ?= build/demo-packed

.PHONY: install install-demo demo test lint bench dist clean

# Two install sets share one virtualenv, each with its own marker, so the lighter one never passes for the other:
# the demo's (the core and the plot extra, no torch) and the dev set (every extra and the test tools), which make
# test, lint and bench need. make demo then make test adds the dev set; make test then make demo adds no package.
# The dev set's marker keeps the name it had when it was the only one, so a .venv made before stays recognized.
install: $(VENV)/.installed
install-demo: $(VENV)/.installed-demo

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PIP) install -q -e ".[plot]"
	touch $@

$(VENV)/.installed: pyproject.toml | $(PY)
	# torch first and pinned: a bare or ranged torch resolved first would pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[dev,torch]"
	touch $@

demo: install-demo
	$(VENV)/bin/packcli pack examples/sample.jsonl.gz --max-len 1024 --out $(DEMO_OUT) --overwrite
	$(VENV)/bin/packcli stats $(DEMO_OUT) --plot docs/demo-stats.png

# Two pytest workers (pytest-xdist); the tests that start Ray share one (see tests/conftest.py). -m "" selects every
# test: a bare pytest leaves out the packaging and Ray tests (addopts in pyproject.toml), make test and CI run them.
TEST_WORKERS ?= 2

test: install
	$(PY) -m pytest -q -m "" -n $(TEST_WORKERS) --dist loadgroup

lint: install
	$(VENV)/bin/ruff check packcli tests bench
	$(VENV)/bin/ruff format --check packcli tests bench
	$(VENV)/bin/mypy packcli

bench: install
	$(PY) bench/run.py

# The sdist first, then the wheel built from it, as the release workflow builds them: a file missing from the sdist
# fails here, not at a user's. It needs build alone, not the dev set.
dist: | $(PY)
	$(PIP) install -q build
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
