# k3-uring build.  `make` builds ./k3-uring; `make test`, `make demo`, `make bench`,
# `make fixtures`, `make asan` / `make test-asan`.  `V=1` shows the commands.

# Debian packages the build, the tests and tests/ref need (installed by `make deps`).
DEB_PKGS := build-essential pkg-config clang libomp-dev liburing-dev libhwloc-dev hwloc libjansson-dev \
            libxxhash-dev xxhash libpcre2-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin curl jq \
            strace fio zlib1g-dev
DEB_PKGS_REF := python3-torch python3-numpy
DEB_PKGS_BENCH := fio gnuplot-nox bc python3

PKGS := liburing hwloc jansson libxxhash libpcre2-8 libmicrohttpd ompi-c zlib

CC ?= cc
# -ffp-contract=off: the determinism contract fixes every summation's rounding; letting
# the compiler fuse a*b+c into FMA in some builds and not others would change bytes.
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -ffp-contract=off -fno-math-errno -fopenmp -I. -MMD -MP
OPT ?= -O2
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LDLIBS := -lm

SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

ifeq ($(V),1)
Q :=
else
Q := @
endif

# Three libraries, by what links them: the inference engine (libk3.a: everything a run
# needs), synthetic checkpoints (libk3synth.a: synth and its BPE trainer and corpus, kept
# out of the inference path) and the command line (engine/cli).  Tests, fuzzers and the
# bench tools link the libraries, never main.c.
ENGINE_DIRS := base model forward kernels pack stream text grammar runtime serve cluster routes plan
LIB_SRC   := $(sort $(wildcard $(ENGINE_DIRS:%=engine/%/*.c) engine/plan/*.S iouring/*.c numa/*.c))
SYNTH_SRC := $(sort $(wildcard engine/synth/*.c engine/synth/*.S))
CLI_SRC   := $(sort $(wildcard engine/cli/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
BENCH_SRC := bench/kernels.c bench/readbench.c bench/routesim.c bench/grammar.c

objs = $(patsubst %.S,build/$(1)/%.o,$(patsubst %.c,build/$(1)/%.o,$(2)))

# Two flavours share one rule set: release in build/rel, sanitized in build/asan.
define flavour
$(1)_TESTS := $$(TEST_SRC:tests/unit/%.c=build/$(1)/tests/%)
$(1)_BENCH := $$(BENCH_SRC:bench/%.c=build/$(1)/bench/%)
$(1)_LIBS := build/$(1)/libk3synth.a build/$(1)/libk3.a

build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(if $$(Q),@echo "  CC [$(1)] $$<")
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$(PKG_CFLAGS) $$(CFLAGS) -c $$< -o $$@

build/$(1)/%.o: %.S
	@mkdir -p $$(@D)
	$(Q)$$(CC) -I. -c $$< -o $$@

build/$(1)/libk3.a: $$(call objs,$(1),$$(LIB_SRC))
	$(Q)rm -f $$@ && ar rcs $$@ $$^

build/$(1)/libk3synth.a: $$(call objs,$(1),$$(SYNTH_SRC))
	$(Q)rm -f $$@ && ar rcs $$@ $$^

build/$(1)/k3-uring: $$(call objs,$(1),$$(CLI_SRC)) $$($(1)_LIBS)
	$$(if $$(Q),@echo "  LD [$(1)] $$@")
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$^ $$(PKG_LIBS) $$(LDLIBS) -o $$@

build/$(1)/tests/%: build/$(1)/tests/unit/%.o $$($(1)_LIBS)
	@mkdir -p $$(@D)
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$^ $$(PKG_LIBS) $$(LDLIBS) -o $$@

build/$(1)/bench/%: build/$(1)/bench/%.o $$($(1)_LIBS)
	$$(if $$(Q),@echo "  LD [$(1)] $$@")
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$^ $$(PKG_LIBS) $$(LDLIBS) -o $$@
endef

# Plain `make` builds ./k3-uring: the first goal, whatever the templates below define.
.DEFAULT_GOAL := all
# Keep object files of test and bench programs (make would delete them as intermediates).
.SECONDARY:

$(eval $(call flavour,rel,$(OPT)))
$(eval $(call flavour,asan,-O1 $(SANITIZE)))
build/rel/engine/synth/corpus.o build/asan/engine/synth/corpus.o: $(wildcard engine/synth/corpus/*.txt)
build/rel/engine/plan/calibration.o build/asan/engine/plan/calibration.o build/fuzz/engine/plan/calibration.o: engine/plan/calibration.json

# libFuzzer harnesses (clang), one per untrusted input format: build/fuzz/bin/fuzz_*.
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/bin/%)
FUZZ_OBJ := $(call objs,fuzz,$(LIB_SRC) $(SYNTH_SRC))
FUZZ_SECONDS ?= 60

build/fuzz/%.o: %.c
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC [fuzz] $<")
	$(Q)$(FUZZ_CC) $(CFLAGS_BASE) -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(PKG_CFLAGS) -c $< -o $@

build/fuzz/%.o: %.S
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) -I. -c $< -o $@

build/fuzz/libk3.a: $(FUZZ_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

build/fuzz/bin/%: build/fuzz/tests/fuzz/%.o build/fuzz/libk3.a
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(CFLAGS_BASE) $(FUZZ_SAN) -fsanitize=fuzzer $^ $(PKG_LIBS) $(LDLIBS) -o $@

.PHONY: all deps deps-ref test test-asan asan demo fixtures check-slice bench bench-deps bench-tools clean fuzz
all: k3-uring

k3-uring: build/rel/k3-uring
	$(Q)cp $< $@

asan: build/asan/k3-uring $(asan_TESTS)

# The bench programs (bench/*.c), built with the engine's flags and objects.
bench-tools: $(rel_BENCH)

# Installs what is missing (nothing when all is present); needs root or sudo for apt.
deps:
	@.ci/install-deps $(DEB_PKGS)

deps-ref:
	@.ci/install-deps $(DEB_PKGS_REF)

test: deps
	$(Q)$(MAKE) --no-print-directory build/rel/k3-uring $(rel_TESTS)
	@tests/run.sh build/rel

test-asan: deps
	$(Q)$(MAKE) --no-print-directory asan
	@K3_TEST_TIMEOUT=$${K3_TEST_TIMEOUT:-900} ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh build/asan

# The main job on the built-in synthetic model: synthesize k3-tiny once, then generate.
DEMO_MODEL := build/demo/k3-tiny
demo: deps
	$(Q)$(MAKE) --no-print-directory k3-uring
	@test -d $(DEMO_MODEL) || ./k3-uring synth --config k3-tiny --seed 1 --out $(DEMO_MODEL)
	./k3-uring run -m $(DEMO_MODEL) -p "The history of the printing press" -n 48 --temp 0.7 --seed 42

# Regenerates fixtures/ from tests/ref, our own PyTorch implementation of the model written
# from the spec (needs python3-torch), and the small routing traces of tests/routes from
# ../shared/routing when it is there.
fixtures: deps deps-ref k3-uring
	@tests/ref/make_fixtures.sh fixtures
	@tests/routes/make_routes.sh

# k3-slice (K3's widths, 4 layers) against tests/ref: tens of minutes; writes
# its 13.75 GB checkpoint to K3_SLICE if missing (default: SLICE, else DATA's k3-slice,
# as bench/lib.sh says).
check-slice: deps deps-ref k3-uring
	@tests/ref/check_slice.sh $(K3_SLICE)

# Each harness for FUZZ_SECONDS (default 60) from seeds made out of a synthetic model.
fuzz: deps k3-uring $(FUZZ_BIN)
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

# The benchmark (root, about 30 minutes, about 22 GB free in DATA, 42 with k3-bench
# to synthesize): emulated boxes of 1-8 drives, or DRIVES=/mnt/a,/mnt/b (real drives);
# fio, the engine, the planner; results, table and plots in bench/results/.  bench/run.sh
# checks tools, drives and space first (PREFLIGHT_ONLY=1: only that); knobs in
# bench/README.md.
bench: deps k3-uring bench-deps
	@bench/run.sh

# What bench/run.sh needs beyond the build (it names what is missing, never installs).
bench-deps:
	@.ci/install-deps $(DEB_PKGS_BENCH)

clean:
	rm -rf build k3-uring

-include $(shell find build -name '*.d' 2>/dev/null)
