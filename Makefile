# Every target creates .venv on a fresh machine and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# the docs tools have their own stamp, so `make test` never installs them
DOCS_STAMP := $(VENV)/.docs-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-fast lint bench chaos soak docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m sqljobs lab all --quick

# Django 6 needs Python 3.12 or newer: its tests run a Django project under it, in a venv
# of its own (made when such a Python is found; without one they are skipped, but not in CI)
DJANGO_VENV := .venv-django
DJANGO_STAMP := $(DJANGO_VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTHON312 ?= $(shell for p in python3.13 python3.12 $$HOME/.pyenv/versions/3.1[23]*/bin/python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && echo $$p && break; done)

$(DJANGO_STAMP): pyproject.toml
	@if [ -z "$(PYTHON312)" ]; then echo "no Python 3.12+: the Django tests will be skipped"; else \
	  (test -x $(DJANGO_VENV)/bin/python || $(PYTHON312) -m venv $(DJANGO_VENV)) && \
	  $(DJANGO_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(DJANGO_VENV)/bin/python -m pip install -q -e '.[postgres,django]' && \
	  rm -f $(DJANGO_VENV)/.installed-* && touch $(DJANGO_STAMP); fi

# Two test processes (pytest-xdist), whole files to each: most tests wait on workers,
# servers and subprocesses, so two run side by side on two cores in about half the time.
test: $(STAMP) $(DJANGO_STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The inner loop: SQLite only, no test over ~3 s, no worker or CLI subprocesses.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not postgres and not slow and not processes and not browser"

lint: $(STAMP)
	$(BIN)/ruff check src tests chaos soak benchmarks examples docs/screenshots.py mkdocs_hooks.py
	$(BIN)/ruff format --check src tests chaos soak benchmarks examples docs/screenshots.py mkdocs_hooks.py
	$(BIN)/mypy  # strict, on src, tests, chaos, soak and examples (pyproject's [tool.mypy])

# BENCH_ARGS="--only postgres,drain" for a part, "--scale" (or "--scale --quick") for the
# scale suite: big tables, 1-16 worker processes on one PostgreSQL, enqueues under load.
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

# Faults all at once on both backends, then the checks (chaos/run.py); a short version
# runs in make test. Prints one table of figures; fails on any lost or doubled effect.
chaos: $(STAMP)
	$(BIN)/python -m chaos $(CHAOS_ARGS)

# A steady run at 70% of the measured capacity with the pruner on, 30 minutes a backend
# (SOAK_ARGS="--minutes 5 --backend sqlite" for less): trends judged, plots in soak-report/.
soak: $(STAMP)
	$(BIN)/python -m soak $(SOAK_ARGS)

# The documentation site (mkdocs.yml): built into site/, every warning an error.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

$(DOCS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[docs]'
	rm -f $(VENV)/.docs-* && touch $(DOCS_STAMP)

clean:
	rm -rf $(VENV) $(DJANGO_VENV) .pytest_cache .mypy_cache .ruff_cache site
