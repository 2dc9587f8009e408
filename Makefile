# ds - DeepSeek-family LLM inference on the CPU.
#   make            build the programs into bin/ and libcore into build/libdscore.a
#   make test       build and run every C unit test and bats test
#   make sanitize   the same suite under -fsanitize=address,undefined
#   make fuzz       libFuzzer targets of every parser (tests/fuzz/README)
#   make fuzz-smoke each of them for FUZZ_TIME seconds (default 60), one
#                   per CPU at a time (FUZZ_JOBS)
#   make demo       convert the shipped demo model and run the pipeline
#   make bench      the benchmark suite, written to bench/report.md
#   make install    PREFIX=/usr/local DESTDIR=
#   make arm64      cross-build the programs and tests for AArch64 into
#                   bin-arm64/ and build-arm64/ (docs/arm64.md)
#   make test-arm64 run them under qemu-user: the unit tests on each
#                   emulated CPU, the golden-logit checks of ds-run
#                   (make test-arm64-kernels: test_kernels alone)
#   make clean

CC      ?= cc
O       ?= build
BIN     ?= bin
PREFIX  ?= /usr/local
DESTDIR ?=
OPT     ?= -O2
CFLAGS  ?=
CFLAGS  += -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -pthread -fopenmp \
	   -I. -Ilibcore
LDFLAGS ?=
# MPI (libcore/dist/: --mpi) is Debian's Open MPI through pkg-config's
# mpi-c, asked when first used, after deps.sh has installed it.  Only
# the programs that call it depend on libmpi (--as-needed); they call
# MPI_Init only under --mpi.  MPI=0 builds libcore/dist/nompi.c instead,
# where --mpi is refused: the AArch64 cross build uses it, as Debian's
# arm64 Open MPI cannot be installed beside the amd64 compilers.
MPI ?= 1
ifeq ($(MPI),1)
MPI_CFLAGS = $(shell pkg-config --cflags mpi-c)
MPI_LIBS   = $(shell pkg-config --libs mpi-c)
MPI_OUT    = libcore/dist/nompi.c
else
MPI_OUT    = libcore/dist/dist.c libcore/dist/step.c
endif
LDLIBS  = -Wl,--push-state,--as-needed $(MPI_LIBS) -Wl,--pop-state \
	  -ljansson -larchive -lz -lpcre2-8 -licuuc -lnuma -lmicrohttpd -lpthread -lm -fopenmp

# The architecture comes from the compiler's target: x86-64 or AArch64.
# Each has its own ISA files in kernels/ and, where they differ, its own
# files elsewhere (NAME_x86.c, NAME_arm.c); the other's are left out.
MACHINE := $(shell $(CC) -dumpmachine)
ifneq ($(filter x86_64-%,$(MACHINE)),)
ARCH = x86
NOT_ARCH = arm
else ifneq ($(filter aarch64-%,$(MACHINE)),)
ARCH = arm
NOT_ARCH = x86
else
$(error ds builds for x86-64 and AArch64; $(CC) targets "$(MACHINE)")
endif
ISA_SRC_x86 = kernels/avx2.c kernels/avxvnni.c kernels/avx512.c kernels/amx.c
ISA_SRC_arm = kernels/neon.c kernels/dotprod.c kernels/i8mm.c

# Each ISA's kernels are compiled with their own flags and chosen at run
# time; nothing else targets the build machine.  AArch64: neon.c is plain
# ARMv8-A (Advanced SIMD is part of it); sdot is ARMv8.2's DotProd,
# smmla and bfdot ARMv8.6's I8MM and BF16 (taken one by one, not as
# -march=armv8.6-a: Neoverse V1 has them without being 8.6).
# All three without GCC's scheduling before register allocation: it hoists
# a block's weight loads ahead of their products and spills the sums (the
# q4/q8 loops' stack loads and stores 7 to 14 times as many with it).
KFLAGS_neon   = -fno-schedule-insns
KFLAGS_dotprod = -march=armv8.2-a+dotprod -fno-schedule-insns
KFLAGS_i8mm   = -march=armv8.2-a+dotprod+i8mm+bf16 -fno-schedule-insns
KFLAGS_avx2   = -mavx2 -mfma -mf16c
KFLAGS_avx512 = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni \
		-mavx512bf16 -mfma -mf16c
KFLAGS_avxvnni = -mavx2 -mfma -mf16c -mavxvnni
KFLAGS_amx    = $(KFLAGS_avx512) -mamx-tile -mamx-int8

LIB_SRC  = $(filter-out $(ISA_SRC_$(NOT_ARCH)) %_$(NOT_ARCH).c $(MPI_OUT), \
	   $(wildcard base/*.c kernels/*.c libcore/*/*.c libcore/*/*/*.c))
LIB_OBJ  = $(LIB_SRC:%.c=$(O)/%.o)
CMD_SRC  = $(wildcard cmd/ds-*.c)
PROGS    = $(CMD_SRC:cmd/%.c=$(BIN)/%)
TEST_SRC = $(wildcard tests/unit/test_*.c)
TESTS    = $(TEST_SRC:tests/unit/%.c=$(O)/tests/%)
# Each fuzz target also links with a replay driver into a test that runs
# its saved inputs (tests/fuzz/regress/, tests/fuzz/corpus/).
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
TESTS   += $(FUZZ_SRC:tests/fuzz/%.c=$(O)/tests/test_%)
MANS     = $(wildcard man/*.[1-8])
LIB      = $(O)/libdscore.a

# Quiet by default; `make V=1` shows the commands.
ifeq ($(V),1)
Q =
say = @:
else
Q = @
say = @printf '  %-6s %s\n'
endif

all: $(PROGS)

# The packages are checked (and installed where missing) before anything
# compiles: an order-only prerequisite of every object, so that `make -j2`
# on a fresh machine does not compile beside the installation.
deps:
	@scripts/deps.sh
test-deps:
	@scripts/deps.sh --test

# KOPT replaces OPT for kernels/ (the fuzz build leaves them uninstrumented).
KOPT ?= $(OPT)
$(O)/kernels/%.o: kernels/%.c | deps
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(subst $(OPT),$(KOPT),$(CFLAGS)) $(KFLAGS_$*) -MMD -MP -c $< -o $@

$(O)/libcore/dist/%.o: CFLAGS += $(MPI_CFLAGS)

$(O)/%.o: %.c | deps
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(say) AR $@
	$(Q)$(AR) rcs $@ $^

$(BIN)/%: $(O)/cmd/%.o $(LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(O)/tests/%: $(O)/tests/unit/%.o $(LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(O)/tests/test_fuzz_%: $(O)/tests/fuzz/fuzz_%.o $(O)/tests/fuzz/replay.o $(LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

test: all $(TESTS) | test-deps
	@DS_BIN=$(BIN) scripts/run-tests.sh $(O)/tests

# The whole suite under ASan + UBSan (and LeakSanitizer, part of ASan: a
# leak exits 23, so no test expecting status 1 can take it for a refusal;
# tests/lsan-mpi.supp names what Open MPI keeps past MPI_Finalize).
sanitize: export ASAN_OPTIONS = detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
sanitize: export LSAN_OPTIONS = exitcode=23:suppressions=$(CURDIR)/tests/lsan-mpi.supp:print_suppressions=0
sanitize: export UBSAN_OPTIONS = print_stacktrace=1:halt_on_error=1
sanitize:
	@$(MAKE) --no-print-directory O=build/asan BIN=build/asan/bin \
		OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
		LDFLAGS="-fsanitize=address,undefined" test

# libFuzzer builds (clang): the library instrumented in build/fuzz/, one
# program per target in build/fuzz/bin/; scripts/fuzz.sh runs them.  The
# SIMD kernels are not instrumented: no target reaches them (they parse),
# make sanitize checks them, and clang took over 10 minutes and 4 GB on
# avx512.c under ASan + UBSan.
FUZZ_SAN  = -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_TIME ?= 60
FUZZ_JOBS ?=
fuzz:
	@scripts/deps.sh --fuzz
	@$(MAKE) --no-print-directory CC=clang O=build/fuzz BIN=build/fuzz/bin \
		OPT="-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
		KOPT="-O1 -gline-tables-only -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=fuzzer $(FUZZ_SAN)" fuzz-targets

fuzz-targets: $(FUZZ_SRC:tests/fuzz/%.c=$(BIN)/%)

$(BIN)/fuzz_%: $(O)/tests/fuzz/fuzz_%.o $(LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

# AArch64: a cross build with Debian's gcc-aarch64-linux-gnu and the
# arm64 libraries (scripts/deps.sh --arm64 installs them, multiarch), and
# its tests under qemu-user (scripts/test-arm64.sh).
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_AR ?= aarch64-linux-gnu-ar
ARM64_MAKE = $(MAKE) --no-print-directory CC=$(ARM64_CC) AR=$(ARM64_AR) O=build-arm64 \
	BIN=bin-arm64 MPI=0
arm64:
	@scripts/deps.sh --arm64
	+@$(ARM64_MAKE) all unit-tests

# the x86 programs too: their ds-convert writes the models the arm64
# ds-run must run unchanged
test-arm64: arm64 all
	@scripts/deps.sh --test
	@scripts/test-arm64.sh build-arm64/tests bin-arm64 $(BIN)

# test_kernels alone on the three emulated CPUs (what CI runs)
test-arm64-kernels:
	@scripts/deps.sh --arm64
	+@$(ARM64_MAKE) build-arm64/tests/test_kernels
	@scripts/test-arm64.sh build-arm64/tests bin-arm64 $(BIN) kernels

unit-tests: $(TESTS)

fuzz-smoke: fuzz
	@scripts/fuzz.sh smoke $(FUZZ_TIME) $(FUZZ_JOBS)

demo: all
	@scripts/demo.sh $(BIN) $(if $(CHAT),--chat)

bench: all
	@scripts/deps.sh --bench
	@scripts/bench.sh $(BIN)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin
	for m in $(MANS); do s=$${m##*.}; \
		install -d $(DESTDIR)$(PREFIX)/share/man/man$$s; \
		install -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$s; done

clean:
	rm -rf build bin build-arm64 bin-arm64

.PHONY: all deps test-deps test sanitize fuzz fuzz-targets fuzz-smoke demo bench install clean \
	arm64 test-arm64 test-arm64-kernels unit-tests
.SECONDARY: $(LIB_OBJ) $(TESTS:$(O)/tests/%=$(O)/tests/unit/%.o) $(CMD_SRC:cmd/%.c=$(O)/cmd/%.o) \
	$(FUZZ_SRC:%.c=$(O)/%.o) $(O)/tests/fuzz/replay.o

-include $(LIB_OBJ:.o=.d) $(wildcard $(O)/cmd/*.d $(O)/tests/unit/*.d $(O)/tests/fuzz/*.d)
