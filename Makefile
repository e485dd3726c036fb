# flexrt: the README's two commands are `make demo` and `make test`; both work from nothing
# (they create .venv, install flexrt editable with its test extra, and build the Cython extension).
#
#   make demo      build a zoo model, simulate it data-parallel on a DGX-1 and write a Chrome trace;
#                  then simulate Unity's Fig. 2b strategy; then search a strategy for an MLP on this
#                  host (MCMC) and train it on the NumPy devices, measured time beside simulated
#   make test      run the test suite (pass pytest flags with PYTEST_ARGS="-k graph -x"); the first run
#                  also installs torch (CPU build) and onnx for the front ends' tests
#   make install   create .venv and install flexrt (re-run only when packaging or .pyx files change)
#   make bench     compiled vs pure-Python graph algorithms and engine; delta vs full simulation (quick)
#   make clean     remove build products (keeps .venv); `make distclean` removes .venv too

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-install when the packaging or a Cython source changes; the editable install builds the
# extension in place, so an edited .pyx needs this too.
STAMP := $(VENV)/.flexrt-install-stamp
# The front ends' optional packages (flexrt.torch, flexrt.onnx), installed once for their tests: a CPU
# build of torch and onnx, failing fast (no retries) where an index is unreachable: a local wheel
# still serves. Without any, the tests skip with a reason; FLEXRT_NO_FRONTENDS=1 leaves them out.
FRONTENDS_STAMP := $(VENV)/.flexrt-frontends-stamp
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
INSTALL_DEPS := setup.py pyproject.toml $(shell find flexrt kernels simulator search -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' 2>/dev/null)
PYTEST_ARGS ?=
DEMO_MODEL ?= resnet50
DEMO_BATCH ?= 64
DEMO_MACHINE ?= dgx1_v100
DEMO_TRACE ?= demo_trace.json

.PHONY: demo test install bench clean distclean

demo: $(STAMP)
	$(VENV)/bin/flexrt show $(DEMO_MODEL) -b $(DEMO_BATCH) | tail -n 4
	$(VENV)/bin/flexrt simulate $(DEMO_MODEL) -b $(DEMO_BATCH) --machine $(DEMO_MACHINE) --data-parallel --trace $(DEMO_TRACE)
	$(VENV)/bin/flexrt simulate mlp_unity_fig2 --machine dgx1_v100 --strategy examples/strategies/unity_fig2_reduction.json
	$(VENV)/bin/flexrt search mlp_unity_fig2 -b 64 --machine local --cost profiled --budget 200 --enable-parameter-parallel --no-progress --export demo_strategy.json
	$(VENV)/bin/flexrt train mlp_unity_fig2 -b 64 --machine local --cost profiled --strategy demo_strategy.json --steps 5 --trace demo_train_trace.json

# pytest exits 5 when it collects no tests; that alone is not a failure.
test: $(STAMP) $(FRONTENDS_STAMP)
	@echo "$(PY) -m pytest -q $(PYTEST_ARGS)"
	@$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); not a failure"; exit 0; fi; \
	exit $$rc

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(INSTALL_DEPS) | $(PY)
	@echo "make: installing flexrt into $(VENV) (pip install -e \".[test,mpi]\", builds the Cython extension)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -q -e ".[test,mpi]"
	@touch $@

$(FRONTENDS_STAMP): | $(STAMP)
	@if [ -n "$(FLEXRT_NO_FRONTENDS)" ]; then echo "make: FLEXRT_NO_FRONTENDS set: torch and onnx not installed (their tests skip)"; \
	else echo "make: installing torch (CPU build, $(TORCH_INDEX)) and onnx for the front ends' tests"; \
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -q --retries 0 --timeout 15 torch \
	  --index-url $(TORCH_INDEX) \
	  && $(PY) -m pip install --disable-pip-version-check --progress-bar off -q --retries 0 --timeout 15 onnx \
	  || echo "make: torch or onnx could not be installed: the front ends' tests will skip"; fi
	@touch $@

bench: $(STAMP)
	$(PY) bench/bench_graph.py
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_simulator.py --quick
	$(PY) bench/bench_runtime_overhead.py --quick
	$(PY) bench/bench_sim_accuracy.py --quick
	$(PY) bench/bench_sim_accuracy_mpi.py --quick

# Generated C only: the .c beside a .pyx (kernels/ may hold hand-written C).
clean:
	rm -rf build *.egg-info .pytest_cache .hypothesis .benchmarks $(STAMP)
	find flexrt kernels simulator search examples tests bench -name '__pycache__' -type d -prune -exec rm -rf {} + 2>/dev/null || true
	find flexrt kernels simulator search -name '*.so' -delete 2>/dev/null || true
	for f in $$(find flexrt kernels simulator search -name '*.pyx' 2>/dev/null); do rm -f "$${f%.pyx}.c" "$${f%.pyx}.cpp"; done

distclean: clean
	rm -rf $(VENV)
