# k3-uring build.  `make` builds ./k3-uring; `make test`, `make demo`, `make bench`,
# `make fixtures`, `make asan` / `make test-asan`.  `V=1` shows the commands.

# Debian packages the build, the tests and the reference need (installed by `make deps`).
DEB_PKGS := build-essential pkg-config clang libomp-dev liburing-dev libhwloc-dev hwloc libjansson-dev \
            libxxhash-dev xxhash libpcre2-dev strace fio
DEB_PKGS_REF := python3-torch python3-numpy
DEB_PKGS_BENCH := fio gnuplot-nox bc python3

PKGS := liburing hwloc jansson libxxhash libpcre2-8

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

LIB_SRC  := $(filter-out engine/main.c,$(sort $(wildcard engine/*.c iouring/*.c numa/*.c)))
ASM_SRC  := $(sort $(wildcard engine/*.S))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))

# Two flavours share one rule set: release in build/rel, sanitized in build/asan.
define flavour
$(1)_OBJ := $$(LIB_SRC:%.c=build/$(1)/%.o) $$(ASM_SRC:%.S=build/$(1)/%.o)
$(1)_TESTS := $$(TEST_SRC:tests/unit/%.c=build/$(1)/tests/%)

build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(if $$(Q),@echo "  CC [$(1)] $$<")
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$(PKG_CFLAGS) $$(CFLAGS) -c $$< -o $$@

build/$(1)/%.o: %.S
	@mkdir -p $$(@D)
	$(Q)$$(CC) -I. -c $$< -o $$@

build/$(1)/libk3.a: $$($(1)_OBJ)
	$(Q)rm -f $$@ && ar rcs $$@ $$^

build/$(1)/k3-uring: build/$(1)/engine/main.o build/$(1)/libk3.a
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$^ $$(PKG_LIBS) $$(LDLIBS) -o $$@

build/$(1)/tests/%: build/$(1)/tests/unit/%.o build/$(1)/libk3.a
	@mkdir -p $$(@D)
	$(Q)$$(CC) $$(CFLAGS_BASE) $(2) $$^ $$(PKG_LIBS) $$(LDLIBS) -o $$@
endef

$(eval $(call flavour,rel,$(OPT)))
$(eval $(call flavour,asan,-O1 $(SANITIZE)))
build/rel/engine/corpus.o build/asan/engine/corpus.o: $(wildcard engine/corpus/*.txt)

# libFuzzer harnesses (clang), one per untrusted input format: build/fuzz/bin/fuzz_*.
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/bin/%)
FUZZ_OBJ := $(LIB_SRC:%.c=build/fuzz/%.o) $(ASM_SRC:%.S=build/fuzz/%.o)
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

.PHONY: all deps deps-ref test test-asan asan demo fixtures bench clean fuzz
all: k3-uring

k3-uring: build/rel/k3-uring
	$(Q)cp $< $@

asan: build/asan/k3-uring $(asan_TESTS)

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

# Regenerates fixtures/ from the PyTorch reference (needs python3-torch).
fixtures: deps deps-ref k3-uring
	@tests/ref/make_fixtures.sh fixtures

# Each harness for FUZZ_SECONDS (default 60) from seeds made out of a synthetic model.
fuzz: deps k3-uring $(FUZZ_BIN)
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

# The benchmark (root, about 20 minutes): emulated boxes of 1-8 drives, fio, the engine,
# the planner; results, table and plots in bench/results/.  Knobs: see bench/run.sh.
bench: deps k3-uring
	@.ci/install-deps $(DEB_PKGS_BENCH)
	@bench/run.sh

clean:
	rm -rf build k3-uring

-include $(shell find build -name '*.d' 2>/dev/null)
