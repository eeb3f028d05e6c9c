# The README's two commands: `make demo` (the main job) and `make test` (every test).
# Both create or reuse .venv; a second run installs nothing.

VENV := .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
DB ?= sqlite:///decodelab.db
PORT ?= 8501

.PHONY: demo test lint bench install

install: $(INSTALLED)

# torch first, pinned: the CPU wheel on local disk. Installing the project first would
# let pip resolve torch itself and pull a multi-GB CUDA build.
$(INSTALLED): pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $(INSTALLED)

demo: $(INSTALLED)
	$(VENV)/bin/decodelab run --preset quick --db '$(DB)'
	$(VENV)/bin/decodelab dashboard --db '$(DB)' --port $(PORT)

test: $(INSTALLED)
	$(PYTHON) -m pytest -q

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/clang-format --dry-run -Werror runner/csrc/*.cpp

bench: $(INSTALLED)
	$(PYTHON) benchmarks/store_write.py
