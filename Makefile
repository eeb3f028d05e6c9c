# The README's two commands: `make demo` (the main job) and `make test` (every test).
# Both create or reuse .venv; a second run installs nothing.

VENV := .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip --disable-pip-version-check
INSTALLED := $(VENV)/.installed
LOCK := requirements.lock
TORCH := torch==2.13.0
DB ?= sqlite:///decodelab.db
PORT ?= 8501

.PHONY: demo test test-lower-isa lint bench install lock

install: $(INSTALLED)

# torch first, pinned: the CPU wheel on local disk. Installing the project first would
# let pip resolve torch itself and pull a multi-GB CUDA build. Then exactly the versions in
# the lock (the ones the tests passed with), then the project without resolving anything.
$(INSTALLED): pyproject.toml $(LOCK)
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -r $(LOCK)
	$(PIP) install --quiet --no-deps -e '.[dev,bench]'
	$(PIP) check
	touch $(INSTALLED)

# Refresh the lock: every package to the newest version pyproject.toml allows, or only
# PACKAGE=name. Resolved against torch's CPU build; torch and pip stay out of the lock.
lock:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PIP) install --quiet 'pip-tools>=7.4'
	CUSTOM_COMPILE_COMMAND="make lock" $(PYTHON) -m piptools compile --quiet --strip-extras --extra dev --extra bench \
		--constraint constraints/torch-cpu.txt --unsafe-package torch --unsafe-package pip \
		--no-emit-index-url --no-emit-find-links \
		$(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade) --output-file $(LOCK) pyproject.toml
	! grep -E '^(torch|nvidia-|triton)' $(LOCK)

# Told as a story: what runs, what is stored where, the address to open. Ctrl-C stops the sweep,
# or the dashboard together with the worker it started for sweeps launched from its sidebar.
demo: $(INSTALLED)
	@$(VENV)/bin/python -m runner.spec.calibrated_estimate --preset quick --db '$(DB)'
	@echo "== 1/2 the quick sweep: train the small model (or reuse the stored one), then run every experiment"
	@echo "       (the speculative experiment trains its small draft model the first time); results go to $(DB)"
	@echo "       how long: the first line's estimate (this machine's earlier runs, else the cost model), with the range"
	@echo "       this sweep took here before; other work on the machine stretches it, and on a busy machine training"
	@echo "       takes one thread"
	@$(VENV)/bin/decodelab run --preset quick --db '$(DB)'
	@echo "== the CLI, in another terminal: 'source $(VENV)/bin/activate' puts decodelab on the PATH, then e.g."
	@echo "       decodelab --help; decodelab workers --db '$(DB)'   (or call $(VENV)/bin/decodelab without activating)"
	@echo "== 2/2 the dashboard on $(DB); stop it with Ctrl-C"
	@$(VENV)/bin/decodelab dashboard --db '$(DB)' --port $(PORT)

# Two test processes (pytest-xdist), a test file each at a time: the suite is CPU-bound, and a file's
# module fixtures (a dashboard server) are started once. TEST_WORKERS=1 runs it in one process.
TEST_WORKERS ?= 2
test: $(INSTALLED)
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The numerics group (tests/conftest.py: NUMERICS_FILES) again, with torch's kernels one capability
# below this CPU's (AVX-512 -> avx2, else default) and the fast path built one level below
# (x86-64-v3 = AVX2, else plain x86-64): a test that holds only for one CPU's rounding fails here.
test-lower-isa: $(INSTALLED)
	capability=$$($(PYTHON) -c "import torch; print('avx2' if torch.backends.cpu.get_cpu_capability() == 'AVX512' else 'default')"); \
	march=$$([ "$$capability" = avx2 ] && echo x86-64-v3 || echo x86-64); \
	echo "numerics group under ATEN_CPU_CAPABILITY=$$capability DECODELAB_FAST_MARCH=$$march"; \
	ATEN_CPU_CAPABILITY=$$capability DECODELAB_FAST_MARCH=$$march \
		$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m numerics

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/clang-format --dry-run -Werror runner/decoding/csrc/*.cpp runner/decoding/csrc/*.h

bench: $(INSTALLED)
	$(PYTHON) benchmarks/store_write.py
