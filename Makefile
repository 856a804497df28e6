# kiln developer entry points. `make demo` and `make test` work on a fresh Debian/Ubuntu
# machine: they install what is missing (Debian packages, PyPI packages), build, then run.
PYTHON ?= python3
BUILD ?= build
LLVM_PREFIX ?= /usr/lib/llvm-19
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := llvm-19-dev libmlir-19-dev mlir-19-tools cmake gcc g++ libopenblas0 zlib1g-dev libzstd-dev libtinfo-dev python3-dev
PIP_PACKAGES := numpy pytest ml_dtypes scipy
# the reference the differential fuzzer compares against (tests/fuzz): CPU JAX, the version issue 32 names
JAX_PACKAGE := jax==0.10.2

.PHONY: all deps build test test-c test-py demo wheel asan bench clean fuzz

all: build

deps: $(BUILD)/.deps
$(BUILD)/.deps:
	@mkdir -p $(BUILD)
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "kiln: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; fi
	@$(PYTHON) -c "import numpy, pytest, ml_dtypes, scipy" 2>/dev/null || $(PYTHON) -m pip install -q $(PIP_PACKAGES)
	@$(PYTHON) -c "import jax" 2>/dev/null || $(PYTHON) -m pip install -q "$(JAX_PACKAGE)" || echo "kiln: JAX not installed: the differential tests against it (tests/test_fuzz.py) will be skipped"
	@touch $@

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) -DLLVM_PREFIX=$(LLVM_PREFIX) >/dev/null
	cmake --build $(BUILD) -j$$(nproc)
	cp $(BUILD)/_kiln.abi3.so python/kiln/.kiln.so.tmp && mv -f python/kiln/.kiln.so.tmp python/kiln/_kiln.abi3.so

test-c: build
	cd $(BUILD) && ctest --output-on-failure

test-py: build
	PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q -x tests

test: test-c test-py

demo: build
	PYTHONPATH=$(CURDIR)/python $(PYTHON) examples/demo.py

# ASan/UBSan build of the core and extension, then the Python suite under it, with LLVM's IR
# verifier around every CPU kernel's passes (KILN_LLVM_VERIFY=1: broken IR fails its compile).
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) >/dev/null
	cmake --build build-asan -j$$(nproc)
	cd build-asan && ctest --output-on-failure
	mkdir -p build-asan/pkg && rm -rf build-asan/pkg/kiln && cp -r python/kiln build-asan/pkg/kiln && cp build-asan/_kiln.abi3.so build-asan/pkg/kiln/
	ASAN_OPTIONS=detect_leaks=0 KILN_LLVM_VERIFY=1 LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  PYTHONPATH=$(CURDIR)/build-asan/pkg $(PYTHON) -m pytest -q -x tests -p no:cacheprovider

# One abi3 wheel with MLIR/LLVM linked statically (needs only libc, libm, libstdc++-free).
wheel: deps
	$(PYTHON) -c "import scikit_build_core" 2>/dev/null || $(PYTHON) -m pip install -q scikit-build-core
	$(PYTHON) -m pip wheel --no-deps --no-build-isolation -w dist . -C cmake.define.KILN_STATIC_MLIR=ON -C build-dir=build-wheel
	@ls -la dist/*.whl

bench: build
	PYTHONPATH=$(CURDIR)/python $(PYTHON) bench/run.py

# Differential fuzzing against JAX (needs jax): FUZZ_N programs from seed FUZZ_SEED, counts by
# class, report in tests/fuzz/last_report.md, one regressions/*.json per signature (tests/fuzz/README.md).
FUZZ_N ?= 2000
FUZZ_SEED ?= 0
fuzz: build
	PYTHONPATH=$(CURDIR)/python nice -n 5 $(PYTHON) -m tests.fuzz -n $(FUZZ_N) --seed $(FUZZ_SEED) --save-regressions

clean:
	rm -rf $(BUILD) build-asan build-wheel dist python/kiln/_kiln.abi3.so

# How much of JAX's library ecosystem (optax, chex, flax, equinox, diffrax, numpyro, distrax,
# dm-haiku, blackjax) runs on kiln unmodified: each library's own tests on JAX and on kiln
# (tests/ecosystem/README.md). Downloads into build/ecosystem/ (git-ignored); report.md there.
# ECO_LIBS: libraries to measure (default all); ECO_SAMPLE: fraction of each suite run.
.PHONY: ecosystem
ECO_LIBS ?=
ECO_SAMPLE ?= 0.1
ecosystem: build
	@$(PYTHON) -c "import jax" 2>/dev/null || $(PYTHON) -m pip install -q "$(JAX_PACKAGE)"
	nice -n 10 $(PYTHON) -m tests.ecosystem $(ECO_LIBS) --eco-sample $(ECO_SAMPLE)
