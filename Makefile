# moe.c: build, test and demo.
#
#   make demo          install what is missing, build, make the corpus, train, plot, sample
#   make test          install what is missing, build and run every test suite (MOE_TEST_JOBS
#                      of them at a time, default 4; each one's seconds, the slowest listed)
#   make test SANITIZE=1   the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-slow     the slow variants make test leaves out, and the C for Arm (CI runs it)
#   make test-full     make test, make test-slow and make test SANITIZE=1
#   make mpi           build build/mpi/moe with mpicc: expert parallelism across processes
#   make cuda          build build/cuda/moe with the CUDA backend (train.device=cuda; nvcc, cuBLAS)
#   make cuda MPI=1    build build/cuda-mpi/moe: one process per GPU (NCCL where the toolkit has it)
#   make cross         compile every C file for 64-bit Arm (aarch64 cross compiler, make deps-cross)
#   make test-mpi      build with MPI and run the multi-process tests under mpirun
#   make deps          install the Debian packages the project needs (apt-get / sudo)
#   make data          build the multi-domain corpus shards in data/corpus/
#   make fuzz          build the file readers' libFuzzer harnesses (clang) and run each briefly
#   make book-check    check every number handbook.md and README.md quote against plots/
#   make book          rewrite those numbers (and the copied tables) from plots/ after a rerun
#   make               build build/moe
#   make HAVE_OPENMP=0 build build/noomp/moe without OpenMP (make CC=clang HAVE_OPENMP=0: a laptop's
#                      compiler without an OpenMP runtime; macOS: README.md, "Platforms")
#
# The probes below print one line per optional feature; the CPU build needs only a C
# compiler and a BLAS (OpenBLAS; on macOS Apple's Accelerate where OpenBLAS is absent).

SHELL := /bin/bash
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

# Each variant of the build (SANITIZE=1, MPI=1, CUDA=1, HAVE_OPENMP=0, and their combinations)
# has a folder of its own under build/, named by its words in this order: build/san,
# build/mpi, build/cuda-san-mpi, build/noomp, ...; the default build is build/ itself.
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
VARIANT := san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1 -g
else
VARIANT :=
SANFLAGS :=
# -O3 over -O2: GCC's vectorizer at full strength (the elementwise loops of rmsnorm, RoPE, the
# residual adds). It never reorders a float sum without -ffast-math and never fuses a multiply
# and an add under -std=c11, so the bits are -O2's (the smoke references of
# tests/test_ablations.sh compare every loss exactly). What it buys on a machine, the two builds
# one after the other (the milliseconds a step, each the median of three rounds):
#   make && make BUILD=build/O2 OPT="-O2 -g"
#   for b in build build/O2; do $b/moe bench --config tiny --rounds 3; done
OPT := -O3 -g
endif
# MPI=1: the same sources through mpicc with MOE_HAVE_MPI=1 (src/parallel/dist_mpi.c), in their
# own build folder; the default build has no MPI dependency.
MPI ?= 0
ifeq ($(MPI),1)
VARIANT += mpi
CC := mpicc
endif
# CUDA=1 (make cuda): the same sources plus the CUDA backend (src/backend/cuda/*.cu, nvcc) in
# build/cuda/, one binary holding every backend: train.device=cuda runs on the GPU, cpu stays
# the default. CUDA_ARCH lists the GPU generations to build for (90 Hopper, 80 Ampere, ...):
# each gets its SASS and PTX, so a later GPU runs the PTX.
CUDA ?= 0
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= 90
ifeq ($(CUDA),1)
VARIANT := cuda $(VARIANT)
endif

# ---- dependency probes ------------------------------------------------------------------
# Each probe is a cheap shell test; the result turns into a -D flag and one ✓/✗ line. OpenMP
# and the BLAS (OpenBLAS; Accelerate on macOS without it) and Check: probes.mk, which
# labs/Makefile shares.
include probes.mk
# HAVE_OPENMP=0 given, on the command line or in the environment (make CC=clang HAVE_OPENMP=0:
# a laptop's compiler without an OpenMP runtime): its own build folder, so that its objects
# never mix with the default build's
ifneq ($(filter command0 environment0,$(firstword $(origin HAVE_OPENMP))$(HAVE_OPENMP)),)
VARIANT += noomp
endif
BUILD := build$(if $(strip $(VARIANT)),/$(subst $() ,-,$(strip $(VARIANT))))
HAVE_GNUPLOT := $(shell command -v gnuplot >/dev/null 2>&1 && echo 1 || echo 0)
HAVE_CUDA := $(shell [ -x "$(NVCC)" ] && echo 1 || echo 0)
HAVE_MPI := $(shell command -v mpicc >/dev/null 2>&1 && echo 1 || echo 0)

# the compilers make demo and make test run side by side: one a core
JOBS ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

mark = $(if $(filter 1,$(1)),✓,✗)
space := $(subst ,, )
ifeq ($(MAKELEVEL),0)
ifeq ($(filter deps deps-fuzz deps-cross clean help features commit book book-check,$(MAKECMDGOALS)),)
$(info moe.c features:)
$(info $(space) $(call mark,$(HAVE_BLAS)) $(if $(filter Accelerate,$(BLAS_NAME)),Accelerate (required: matrix products; no OpenBLAS: brew install openblas),OpenBLAS   (required: matrix products; $(OPENBLAS_KIND))))
$(info $(space) $(call mark,$(HAVE_OPENMP)) OpenMP     (threads for the elementwise ops))
$(info $(space) $(call mark,$(HAVE_CHECK)) Check      (unit tests))
$(info $(space) $(call mark,$(HAVE_GNUPLOT)) gnuplot    (plots))
$(info $(space) $(call mark,$(HAVE_CUDA)) CUDA       (GPU build: make cuda))
$(info $(space) $(call mark,$(HAVE_MPI)) MPI        (expert parallelism across processes))
endif
endif

CPPFLAGS := -Isrc $(BLAS_CPPFLAGS) -DMOE_HAVE_OPENMP=$(HAVE_OPENMP) -DMOE_HAVE_MPI=$(MPI) \
            -DMOE_HAVE_CUDA=$(CUDA)
# The commit a binary was built from (with -dirty for uncommitted changes), for provenance.txt.
# Changes under plots/ and to the Markdown files do not count: they are what the ablation
# scripts and `make book` write, not what the binary is built from, so rerunning an ablation
# after another (whose summary rewrote plots/) still builds a clean binary. version.c is
# rewritten only when the text changes, so it relinks but rebuilds nothing else.
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- . ':(exclude)plots' ':(exclude)*.md' 2>/dev/null || echo -dirty)
# -fno-math-errno: nothing reads errno after a math call, and without it sqrtf keeps a scalar
# path for errno, which stops the vectorizer (AdamW). -fno-trapping-math: no code here traps on
# floating-point exceptions, and without it a comparison may not become a lane select, which
# stops the vectorizer in loops with a branch (nn/exp.h). Neither changes a result's bits.
# -ffp-contract=off: GCC's rule under -std=c11 said for every compiler. clang fuses a * b + c
# within an expression by default, and folds such a constant with one rounding where the
# running code (no FMA in the baseline instruction set) makes two: the same expression then
# gives two floats (tests/test_ops.c, adamw_grad_scale, failed so under clang).
CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) -fno-math-errno -fno-trapping-math -ffp-contract=off \
          -Wall -Wextra -Wshadow \
          -Wno-unused-parameter $(OMP_CFLAGS) $(SANFLAGS) $(EXTRA_CFLAGS)
LDLIBS := $(BLAS_LIBS) -lm
LDFLAGS := $(OMP_LDFLAGS) $(SANFLAGS)

# nvcc for the .cu files: C++17, every warning an error, and ptxas reports any register spill
# or local-memory use (tests/test_cuda_build.sh fails on one). No fast-math: the kernels round
# as the tests expect.
NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=[sm_$(a),compute_$(a)])
NVCCFLAGS := -std=c++17 -O2 -lineinfo $(NVCC_GENCODE) -Xptxas -v,-warn-spills,-warn-lmem-usage \
             -Werror all-warnings -Xcompiler -Wall,-Wextra,-Wno-unused-parameter $(EXTRA_NVCCFLAGS)
ifeq ($(CUDA),1)
CUDA_LIBDIR := $(CUDA_HOME)/lib64
LDLIBS += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcudart -lstdc++
# NCCL (dist.collectives=nccl: the GPU's buffers across processes) where the toolkit, or
# NCCL_HOME, has it; without it a GPU run across processes stages through the host
NCCL_HOME ?= $(CUDA_HOME)
HAVE_NCCL := $(if $(wildcard $(NCCL_HOME)/include/nccl.h),1,0)
ifeq ($(HAVE_NCCL),1)
# lib64 (the toolkit) or lib (the nvidia-nccl Python wheel, which has no libnccl.so link)
NCCL_LIBDIR := $(if $(wildcard $(NCCL_HOME)/lib64/libnccl.so*),$(NCCL_HOME)/lib64,$(NCCL_HOME)/lib)
CPPFLAGS += -I$(NCCL_HOME)/include
LDLIBS += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -l:libnccl.so.2
endif
endif
CPPFLAGS += -DMOE_HAVE_NCCL=$(if $(filter 1,$(HAVE_NCCL)),1,0)

# ---- sources ----------------------------------------------------------------------------
# (src/backend/ keeps its CPU tables in cpu/ and the CUDA backend, the .cu files, in cuda/)
LIB_SRC := $(filter-out src/cli/%,$(wildcard src/*/*.c src/*/*/*.c))
CU_SRC := $(if $(filter 1,$(CUDA)),$(wildcard src/backend/cuda/*.cu),)
CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
CLI_SRC := $(wildcard src/cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
CHAPTER_SRC := $(wildcard chapters/*/*.c)
CHAPTER_BIN := $(CHAPTER_SRC:chapters/%.c=$(BUILD)/chapters/%)
TEST_SRC := $(wildcard tests/test_*.c tests/mpi/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_UTIL_OBJ := $(BUILD)/obj/tests/testutil.o

.SECONDARY:
.PHONY: FORCE features chapters all deps need-openblas data demo demo-run test test-run test-build test-build-cuda \
        test-build-mpi plots clean help
.DEFAULT_GOAL := all

all: need-openblas $(BUILD)/moe

need-openblas:
	@if [ "$(HAVE_BLAS)" != 1 ]; then \
	  echo "error: OpenBLAS not found (pkg-config openblas). Run 'make deps' or: sudo apt-get install libopenblas-dev pkg-config"; \
	  exit 2; fi

# the C compiler's flags as a file that changes only when they do, so that a new OPT or
# EXTRA_CFLAGS rebuilds the objects (as nvcc.flags below does the .cu ones). Written to a name
# of this shell's own and renamed, as version.c and nvcc.flags are: two makes side by side (the
# suites of make test that run make) never remove each other's file.
$(BUILD)/cc.flags: FORCE
	@mkdir -p $(dir $@)
	@new=$@.new.$$$$; echo '$(CC) $(CFLAGS)' > $$new; cmp -s $$new $@ && rm $$new || mv $$new $@

# Each object's headers are those the compiler read: -MMD writes them to a .d beside the object
# (-MP: a phony target for each, so a header deleted or moved is no error), and make reads every
# .d there is (the -include lines below). A change to a header rebuilds the objects that include
# it, directly or not, and no other; a first build has no .d and builds everything.
DEPFLAGS = -MMD -MP -MF $(@:.o=.d)
$(BUILD)/obj/%.o: %.c $(BUILD)/cc.flags
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# nvcc's flags (the architectures among them) as a file that changes only when they do, so
# that a new CUDA_ARCH rebuilds the .cu objects
$(BUILD)/nvcc.flags: FORCE
	@mkdir -p $(dir $@)
	@new=$@.new.$$$$; echo '$(NVCC) $(CPPFLAGS) $(NVCCFLAGS)' > $$new; cmp -s $$new $@ && rm $$new || mv $$new $@

# ptxas's report (registers, spills, stack) of each .cu goes beside its object, .ptxas
# (nvcc takes -MMD -MP -MF as gcc does: its .d, build/obj/src/.../NAME.cu.d, names the .cuh and
# .h files the .cu includes)
$(BUILD)/obj/%.cu.o: %.cu $(BUILD)/nvcc.flags
	@mkdir -p $(dir $@)
	@[ -x "$(NVCC)" ] || { echo "error: no nvcc at $(NVCC): install the CUDA toolkit or set CUDA_HOME"; exit 2; }
	$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) $(DEPFLAGS) -c $< -o $@ 2> $(@:.o=.ptxas) || { cat $(@:.o=.ptxas); exit 1; }

$(BUILD)/libmoe.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/version.c: FORCE
	@mkdir -p $(dir $@)
	@new=$@.new.$$$$; echo 'const char moe_git_commit[] = "$(GIT_COMMIT)";' > $$new; cmp -s $$new $@ && rm $$new || mv $$new $@

$(BUILD)/moe: $(CLI_OBJ) $(BUILD)/libmoe.a $(BUILD)/version.c
	$(CC) $(CFLAGS) $(LDFLAGS) $(CLI_OBJ) $(BUILD)/version.c $(BUILD)/libmoe.a -o $@ $(LDLIBS)

FORCE:

# the headers each object read, from its last compile (DEPFLAGS above)
ALL_OBJ := $(LIB_OBJ) $(CU_OBJ) $(CLI_OBJ) $(TEST_UTIL_OBJ) $(TEST_SRC:%.c=$(BUILD)/obj/%.o) \
           $(CHAPTER_SRC:%.c=$(BUILD)/obj/%.o)
-include $(ALL_OBJ:.o=.d)
# An object with no .d beside it (compiled by a Makefile of before -MMD, or its .d lost) would
# never see a header change: it is rebuilt once, and has its .d from then on.
without_deps = $(foreach o,$(wildcard $(1)),$(if $(wildcard $(o:.o=.d)),,$(o)))
$(call without_deps,$(ALL_OBJ)): FORCE

# ---- chapter programs: build/chapters/NN-name/prog -----------------------------------------
chapters: $(CHAPTER_BIN)

# (compiled to build/obj/chapters/NN-name/prog.o first, by the rule of every object, so that
# its .d names the headers it reads)
$(BUILD)/chapters/%: $(BUILD)/obj/chapters/%.o $(BUILD)/libmoe.a $(BUILD)/version.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(BUILD)/version.c $(BUILD)/libmoe.a -o $@ $(LDLIBS)

# ---- Debian packages ----------------------------------------------------------------------
# Required: what `make demo` and the single-process suites of `make test` cannot do without
# (OpenBLAS, Check, gnuplot, the corpus's fortunes; a C compiler and make are assumed).
# Optional: Open MPI, for expert parallelism and the multi-process suites; without it they are
# skipped. make deps installs both where it can (root, or password-less sudo); where it cannot,
# a missing required package stops it (exit 2, with the command to run) and a missing optional
# one is reported and skipped. The CUDA toolkit (make cuda) and the aarch64 cross compiler
# (make deps-cross, for make cross) are optional too and never installed by make deps.
# (libopenblas0-pthread: the OpenBLAS of a build without OpenMP, make HAVE_OPENMP=0, which apt
# may leave out when it installs the OpenMP build alongside libopenblas-dev)
APT_REQUIRED := libopenblas-dev libopenblas-openmp-dev libopenblas0-pthread check pkg-config gnuplot-nox \
                fortunes fortunes-de fortunes-es fortunes-it fortunes-ru
APT_OPTIONAL := openmpi-bin libopenmpi-dev
APT_PKGS := $(APT_REQUIRED) $(APT_OPTIONAL)

# The fuzzers' compiler and libFuzzer runtime (make fuzz installs them through deps-fuzz).
FUZZ_PKGS := clang libclang-rt-14-dev

# $(call apt_install,REQUIRED,OPTIONAL,WHAT THE OPTIONAL ONES ARE FOR): install those of the
# packages that are missing (apt-get, as root or through password-less sudo); the target's name
# starts each message. Without a way to install: exit 2 when a required package is missing,
# else say which optional ones are and go on.
define apt_install
@missing=""; optional=""; \
for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
for p in $(2); do dpkg -s $$p >/dev/null 2>&1 || optional="$$optional $$p"; done; \
if [ -z "$$missing$$optional" ]; then echo "$@: all packages present"; exit 0; fi; \
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$$missing$$optional"; \
if [ "$$(id -u)" = 0 ]; then echo "$@: installing$$missing$$optional"; bash -c "$$cmd"; \
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
  echo "$@: installing$$missing$$optional"; sudo bash -c "$$cmd"; \
elif [ -n "$$missing" ]; then \
  echo "$@: required packages missing:$$missing"; \
  echo "$@: cannot install them (not root, no password-less sudo). Run as root:"; \
  echo "  $$cmd"; exit 2; \
else echo "$@: optional packages missing:$$optional ($(3)); to install them, as root:"; \
  echo "  $$cmd"; echo "$@: going on without them"; fi
endef

# macOS: Homebrew's formulas, which install as the user, so make deps names the missing ones
# in one brew command and leaves running it to them. Required: Check and pkg-config (the unit
# tests), gnuplot (the plots). Optional: openblas (else Apple's Accelerate is the BLAS), libomp
# (else the elementwise ops run on one thread), open-mpi. The corpus has no Homebrew
# equivalent: it is read from Debian's fortunes packages and libc6-dev's headers (src/io/corpus.c),
# under /usr/share/games/fortunes and /usr/include, which macOS has not (Homebrew's fortune
# has the English ones alone, under its own prefix).
BREW_REQUIRED := check pkg-config gnuplot
BREW_OPTIONAL := openblas libomp open-mpi
ifeq ($(UNAME_S),Darwin)
deps:
	@if ! command -v brew >/dev/null 2>&1; then \
	  echo "deps: macOS without Homebrew: install it from https://brew.sh, then run make deps again"; exit 2; fi; \
	missing=""; optional=""; \
	for p in $(BREW_REQUIRED); do brew list --versions $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	for p in $(BREW_OPTIONAL); do brew list --versions $$p >/dev/null 2>&1 || optional="$$optional $$p"; done; \
	if [ -z "$$missing$$optional" ]; then echo "deps: all Homebrew formulas present"; \
	else echo "deps: macOS: Homebrew formulas missing:$$missing$$optional; install them with:"; \
	  echo "  brew install$$missing$$optional"; fi; \
	if [ ! -f $(CORPUS)/train.bin ]; then \
	  echo "deps: macOS has no Debian fortunes (fortunes, fortunes-de, -es, -it, -ru) nor libc6-dev's headers," \
	       "which the corpus is built from: run make data on Debian and copy $(CORPUS)/ here"; fi; \
	if [ -n "$$missing" ]; then echo "deps: required:$$missing (Check, pkg-config: the unit tests; gnuplot: the plots)"; exit 2; fi
else
deps:
	$(call apt_install,$(APT_REQUIRED),$(APT_OPTIONAL),Open MPI: expert parallelism and the multi-process tests)
	@[ "$(HAVE_CUDA)" = 1 ] || echo "deps: optional: no CUDA toolkit (nvcc), so make cuda is not available; install it from https://developer.nvidia.com/cuda-downloads"
endif

deps-fuzz:
	$(call apt_install,$(FUZZ_PKGS),,)

# The aarch64 cross compiler and its C library's headers (a recommendation of the compiler's
# package, which --no-install-recommends leaves out) for `make cross` (tests/test_cross.sh runs
# it when it is here).
deps-cross:
	$(call apt_install,gcc-aarch64-linux-gnu libc6-dev-arm64-cross,,)

# The C for 64-bit Arm (Grace-Hopper nodes): every file compiled by the cross compiler with the
# warnings as errors, without and with MPI (tests/lib/cross_aarch64.sh; compiling only).
.PHONY: cross deps-cross
cross: deps deps-cross
	@bash tests/lib/cross_aarch64.sh build/aarch64

# ---- data -----------------------------------------------------------------------------------
# The Debian corpus (moe corpus: the fortunes under /usr/share/games/fortunes and libc6-dev's
# headers; the handbook's numbers come from it) when FORTUNES_DIR holds the four language
# folders, else the fallback corpus (data/fallback/README.md): the texts in data/fallback/ and
# the project's own headers, through moe corpus --from. FORTUNES_DIR only decides which one;
# point it at a folder that does not exist to build the fallback on Debian too.
# $(CORPUS)/source.txt names the kind built, so that a change of kind rebuilds the shards.
CORPUS := data/corpus
FORTUNES_DIR := /usr/share/games/fortunes
CORPUS_KIND := $(if $(filter 4,$(words $(wildcard $(addprefix $(FORTUNES_DIR)/,de es it ru)))),debian,fallback)
# the Debian corpus's order of domains
FALLBACK_FROM := $(addprefix data/fallback/,en.txt de.txt es.txt it.txt ru.txt) \
                 $(addprefix code=,$(sort $(wildcard src/*/*.h src/*/*/*.h)))
# make deps (apt-get: the fortunes, for the Debian corpus) where dpkg is; elsewhere (macOS, other
# distributions) straight to the fallback
data: $(if $(shell command -v dpkg 2> /dev/null),deps)
	@$(MAKE) --no-print-directory $(CORPUS)/train.bin

# (a temporary name of its own per shell: two makes side by side never take each other's)
$(CORPUS)/source.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(CORPUS_KIND)' > $@.$$$$; cmp -s $@.$$$$ $@ && rm -f $@.$$$$ || mv -f $@.$$$$ $@

# rebuilt when the corpus builder (or the fallback's text) changes, not whenever the binary
# relinks
$(CORPUS)/train.bin: src/io/corpus.c src/io/shard.c $(CORPUS)/source.txt \
                     $(if $(filter fallback,$(CORPUS_KIND)),$(subst code=,,$(FALLBACK_FROM))) | $(BUILD)/moe
ifeq ($(CORPUS_KIND),debian)
	@echo "data: the Debian corpus (the fortunes in $(FORTUNES_DIR), libc6-dev's headers)"
	$(BUILD)/moe corpus --out $(CORPUS)
else
	@echo "data: no fortunes in $(FORTUNES_DIR) (de, es, it, ru): the fallback corpus (data/fallback/README.md)"
	$(BUILD)/moe corpus --from $(FALLBACK_FROM) --out $(CORPUS)
endif

# ---- tests ----------------------------------------------------------------------------------
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_UTIL_OBJ) $(BUILD)/libmoe.a $(BUILD)/version.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/obj/tests/%.o: CPPFLAGS += $(CHECK_CFLAGS) -Itests

# make test: the binaries first, a compiler a core (JOBS), the one-process build and, with Open
# MPI, its MPI variant (build/mpi; build/san-mpi with SANITIZE=1), and with the CUDA toolkit the
# CUDA build tests/test_cuda_build.sh checks (build/cuda for Hopper, and the unit suites it runs
# there; a build that fails is left to the suite to report); then every suite, the
# single-process ones and the MPI ones (tests/mpi/, which run the MPI variant's binaries) side by
# side in one queue, the slowest first.
# The suites, their order and their environment, for this target and the others below:
# tests/lib/make_test.sh (which runs them through tests/lib/run_suites.sh).
HAVE_MPIRUN := $(shell command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && echo 1 || echo 0)
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) test-build
	@if [ "$(HAVE_MPIRUN)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) MPI=1 test-build-mpi; \
	 else echo "test: skipped: the multi-process suites (tests/mpi/) need Open MPI (mpicc, mpirun); install it with make deps"; fi
	@if [ "$(HAVE_CUDA)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) SANITIZE=0 MPI=0 CUDA=1 \
	   CUDA_ARCH=90 test-build-cuda || echo "test: the CUDA build failed; tests/test_cuda_build.sh says why"; fi
	@bash tests/lib/make_test.sh test $(BUILD)

# The slow variants make test leaves out to stay within three minutes, and the C for Arm: the
# CUDA build for Hopper and Ampere with every unit suite on it and the GPU build across
# processes (tests/test_cuda_build.sh with MOE_TEST_FULL=1), and every C file through the aarch64
# cross compiler, which make deps-cross installs (tests/test_cross.sh); then a laptop's build:
# clang without OpenMP (the pthreads OpenBLAS, build/noomp/) and every unit suite on it (clang
# from make deps-fuzz); and with Open MPI the sweep of the process grid's layouts (every
# dist.tp x dist.ep x data-parallel grid of 2 to 8 processes under each dist.zero,
# tests/mpi/test_layouts.sh with MOE_TEST_FULL=1), with the other suites' MOE_TEST_FULL parts
# (the pipeline's layouts, the spike actions' 4-process runs, the cheating submissions of labs
# 02 and 03, lab 07's mutants). CI runs it after make test; make test-full runs make test, this,
# and make test SANITIZE=1.
.PHONY: test-slow test-full
test-slow: deps deps-cross deps-fuzz need-openblas $(BUILD)/moe
	@if [ "$(HAVE_MPIRUN)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) MPI=1 all; fi
	@bash tests/lib/make_test.sh test-slow $(BUILD)
	@$(MAKE) --no-print-directory -j$(JOBS) CC=clang HAVE_OPENMP=0 test-units

test-full:
	@$(MAKE) --no-print-directory test && $(MAKE) --no-print-directory test-slow && \
	 $(MAKE) --no-print-directory test SANITIZE=1

# ---- MPI: expert parallelism across processes ------------------------------------------------
.PHONY: mpi test-mpi test-run-mpi
mpi:
	@command -v mpicc >/dev/null 2>&1 || { echo "error: no mpicc: run make deps (Open MPI) first"; exit 2; }
	@$(MAKE) --no-print-directory MPI=1 all

test-mpi: deps
	@$(MAKE) --no-print-directory -j$(JOBS) MPI=1 test-build-mpi && $(MAKE) --no-print-directory MPI=1 test-run-mpi

# Every tests/mpi/*.sh, each starting its own mpirun (tests/lib/make_test.sh: without leak
# checking, and with what mpirun needs to run as root or on more processes than cores).
test-build-mpi: need-openblas $(BUILD)/moe $(filter $(BUILD)/tests/mpi/%,$(TEST_BIN)) $(CHAPTER_BIN)
test-run-mpi: test-build-mpi
	@bash tests/lib/make_test.sh test-run-mpi $(BUILD)

test-build: need-openblas $(BUILD)/moe $(TEST_BIN) $(CHAPTER_BIN)
# (with CUDA=1) what tests/test_cuda_build.sh runs of build/cuda: make cuda's binaries and the
# backends' unit suites
CUDA_TEST_SUITES := test_backend_ops test_cuda_gemm test_backend_cpu test_backend_coll
test-build-cuda: need-openblas all $(addprefix $(BUILD)/tests/,$(CUDA_TEST_SUITES))
test-run: test-build
	@bash tests/lib/make_test.sh test-run $(BUILD)

# ---- demo -----------------------------------------------------------------------------------
demo: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/moe && $(MAKE) --no-print-directory demo-run

# The demo trains the embedded default model (build/moe info --keys lists it) and replaces any
# earlier demo run. DEMO_OUT, DEMO_SET (extra --set options) and CORPUS let tests/test_demo.sh
# run the same recipe on a tiny model in a scratch folder.
DEMO_OUT ?= runs/demo
DEMO_SET ?=
DEMO_DATA := $(if $(filter-out data/corpus,$(CORPUS)),--set data.train=$(CORPUS)/train.bin --set data.val=$(CORPUS)/val.bin)
demo-run: $(BUILD)/moe $(CORPUS)/train.bin
	@if [ -d $(DEMO_OUT) ]; then echo "demo: replacing the previous $(DEMO_OUT)"; rm -rf $(DEMO_OUT); fi
	$(BUILD)/moe train --out $(DEMO_OUT) $(DEMO_DATA) $(DEMO_SET)
	bash plots/plot_run.sh $(DEMO_OUT)
	@echo; echo "--- a sample from the trained model (build/moe sample --ckpt $(DEMO_OUT)/ckpt.bin) ---"
	@$(BUILD)/moe sample --ckpt $(DEMO_OUT)/ckpt.bin --prompt "The " --tokens 300
	@echo "---"; echo "demo: done. Run directory $(DEMO_OUT): config.txt provenance.txt train.csv router.csv domains.csv ckpt.bin and the PNGs above"

plots:
	@[ -n "$(RUN)" ] || { echo "usage: make plots RUN=runs/NAME"; exit 2; }
	bash plots/plot_run.sh $(RUN)

# How fast the CPU training step runs on the reference configs, op by op (src/README.md,
# "Benchmark"): the table on stdout, the per-op times in bench_profile.csv and .png.
.PHONY: bench bench-handbook
bench: need-openblas $(BUILD)/moe
	$(BUILD)/moe bench --profile --profile-out $(BUILD)/bench_profile.csv
	@if [ "$(HAVE_GNUPLOT)" = 1 ]; then \
	  gnuplot -e "data='$(BUILD)/bench_profile.csv'; out='$(BUILD)/bench_profile.png'" plots/bench_profile.gp && \
	  echo "wrote $(BUILD)/bench_profile.png"; \
	else echo "bench: gnuplot is not installed (make deps): no $(BUILD)/bench_profile.png"; fi

# The handbook's figures for "Where the time goes" (plots/bench/): the four reference configs
# and tiny-e64 over three interleaved rounds (bench.txt, profile.csv/.png); the tiny MoE with
# the loop reference attention, to show what the GEMM attention buys; and the tiny MoE on the
# cpu-ref backend, the plain loops end to end ("naive, then fast"; few steps: it is slow); the
# tiny MoE on OpenBLAS's SSE3 kernels (OPENBLAS_CORETYPE=Prescott), what a CPU the library does
# not recognise gets unless moe picks its kernels.
BENCH_OUT := plots/bench
bench-handbook: need-openblas $(BUILD)/moe
	@mkdir -p $(BENCH_OUT)
	$(BUILD)/moe bench --rounds 3 --config tiny --config tiny-dense --config small --config small-dense \
	  --config tiny-e64 --profile --profile-out $(BENCH_OUT)/profile.csv | tee $(BENCH_OUT)/bench.txt
	$(BUILD)/moe bench --config tiny --profile --profile-out $(BENCH_OUT)/profile_reference_attention.csv \
	  --reference-attention | tee $(BENCH_OUT)/bench_reference_attention.txt
	$(BUILD)/moe bench --config tiny --device cpu-ref --steps 2 --warmup 1 --profile \
	  --profile-out $(BENCH_OUT)/profile_cpu_ref.csv | tee $(BENCH_OUT)/bench_cpu_ref.txt
	OPENBLAS_CORETYPE=Prescott $(BUILD)/moe bench --config tiny | tee $(BENCH_OUT)/bench_prescott.txt
	gnuplot -e "data='$(BENCH_OUT)/profile.csv'; out='$(BENCH_OUT)/profile.png'" plots/bench_profile.gp
	@echo "wrote $(BENCH_OUT)/: bench.txt profile.csv profile.png bench_reference_attention.txt bench_cpu_ref.txt bench_prescott.txt"

# moe.c beside a PyTorch 2.x eager MoE of the same shapes, interleaved in one run
# (plots/bench/peer.sh; plots/bench/peer.{csv,md}). PyTorch is a developer tool: it goes into
# build/venv-torch (its CPU wheels where download.pytorch.org is reachable, else PyPI's), never
# into the build or the tests.
PEER_VENV := $(BUILD)/venv-torch
.PHONY: bench-peer
bench-peer: need-openblas $(BUILD)/moe
	@if ! $(PEER_VENV)/bin/python -c 'import torch' 2>/dev/null; then \
	  echo "bench-peer: installing PyTorch into $(PEER_VENV) (a developer tool, a few GB)"; \
	  python3 -m venv $(PEER_VENV) && \
	  { $(PEER_VENV)/bin/pip install --timeout 20 torch --index-url https://download.pytorch.org/whl/cpu || \
	    $(PEER_VENV)/bin/pip install torch; } || { echo "bench-peer: pip could not install torch"; exit 2; }; \
	fi
	MOE_BIN=$(BUILD)/moe PYTHON=$(PEER_VENV)/bin/python bash plots/bench/peer.sh

# moe export --format hf and moe import --format hf against transformers itself, on the same
# weights and tokens (plots/hf/compare.sh; plots/hf/compare.{csv,md}): torch and transformers go
# into the same developer environment, never into the build or the tests.
.PHONY: hf-compare
hf-compare: need-openblas $(BUILD)/moe
	@if ! $(PEER_VENV)/bin/python -c 'import torch, transformers' 2>/dev/null; then \
	  echo "hf-compare: installing PyTorch and transformers into $(PEER_VENV) (a developer tool)"; \
	  python3 -m venv $(PEER_VENV) && \
	  { $(PEER_VENV)/bin/python -c 'import torch' 2>/dev/null || \
	    $(PEER_VENV)/bin/pip install --timeout 20 torch --index-url https://download.pytorch.org/whl/cpu || \
	    $(PEER_VENV)/bin/pip install torch; } && $(PEER_VENV)/bin/pip install transformers safetensors || \
	  { echo "hf-compare: pip could not install torch and transformers"; exit 2; }; \
	fi
	PYTHON=$(PEER_VENV)/bin/python bash plots/hf/compare.sh

# moe tokenizer against Hugging Face's tokenizers library on every document of the corpus
# (plots/tok/compare.sh; plots/tok/compare.{csv,md}, and the fixtures of tests/test_tok.c):
# tokenizers (and unicodedata2, for src/tok/unicode_gen.py) go into a developer environment of
# their own, never into the build or the tests.
TOK_VENV := $(BUILD)/venv-tok
.PHONY: tok-compare
tok-compare: $(BUILD)/moe
	@if ! $(TOK_VENV)/bin/python -c 'import tokenizers, unicodedata2' 2>/dev/null; then \
	  echo "tok-compare: installing tokenizers into $(TOK_VENV) (a developer tool)"; \
	  python3 -m venv $(TOK_VENV) && $(TOK_VENV)/bin/pip install tokenizers 'unicodedata2==16.0.0' || \
	  { echo "tok-compare: pip could not install tokenizers"; exit 2; }; \
	fi
	PYTHON=$(TOK_VENV)/bin/python bash plots/tok/compare.sh

# The numbers the handbook quotes, against the files under plots/ (chapters/README.md, "Numbers
# in the handbook"): book-check checks (make test runs it, tests/test_book.sh); book rewrites
# each marked number that moved at its quoted precision and refreshes the copied tables and
# transcripts, printing every change, so the prose around each can be reread.
.PHONY: book book-check
book:
	@bash tests/book/book.sh --fix
book-check:
	@bash tests/book/book.sh

# The engine's results as of the committed book, at a size make test can afford: each
# ablation's --smoke summary, one thread, OpenBLAS's Haswell kernels (any x86 with AVX2 and FMA
# has them, so every such machine trains these runs bit for bit alike), kept as
# plots/NN-name/smoke.csv. tests/test_ablations.sh
# trains the same smoke runs and fails when a loss moved (an engine change that moves results),
# until the ablations are rerun, `make book` has regenerated the numbers and this is run again.
SMOKE_REF := 00-intro:chapters/00-intro/compare.sh 01-routing:chapters/01-routing/ablate.sh \
             02-capacity:chapters/02-capacity/ablate.sh 04-upcycling:chapters/04-upcycling/ablate.sh \
             05-stability:chapters/05-stability/ablate.sh
.PHONY: smoke-reference
smoke-reference: $(BUILD)/moe
	@for pair in $(SMOKE_REF); do d=$${pair%%:*}; s=$${pair#*:}; \
	  OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell MOE_BIN=$(BUILD)/moe bash $$s --smoke > /dev/null || exit 1; \
	  cp plots/$$d-smoke/summary.csv plots/$$d/smoke.csv && echo "wrote plots/$$d/smoke.csv"; done

# ---- fuzzing: the file readers under libFuzzer (tests/fuzz/) ---------------------------------
# One harness per reader: the config parser, safetensors (with its JSON header parser), the
# checkpoint reader, the shard reader, the CSV reader of moe doctor and the JSON tree of a
# Hugging Face config.json, the tokenizer (a tokenizer.json read, any text encoded and decoded
# back), each linked with the reader's sources built by clang
# under -fsanitize=fuzzer,address,undefined (no OpenMP, no OpenBLAS: the readers need neither).
# `make fuzz` runs each for FUZZ_SECONDS from its committed seeds (tests/fuzz/seeds/NAME/);
# any crash, leak, sanitizer report or slow input fails it. New inputs go to
# build/fuzz/corpus/NAME/, a failing input to build/fuzz/fuzz_NAME-crash-* (replay it with
# build/fuzz/fuzz_NAME FILE). `make fuzz-seeds` rewrites the seeds with the current writers.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 15
FUZZ_BUILD := build/fuzz
FUZZ_NAMES := config safetensors checkpoint shard csv json tok
FUZZ_LIB_SRC := src/base/util.c src/config/config.c src/config/config_check.c src/config/keys.c src/io/files.c src/io/json.c \
                src/io/safetensors.c src/io/tensorfile.c src/io/shard.c src/io/loader.c src/io/csv_table.c \
                src/io/json_value.c src/io/mix.c $(wildcard src/tok/*.c)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Wall -Wextra \
               -Wno-unused-parameter -Isrc -Itests/fuzz -DMOE_HAVE_OPENMP=0 -DMOE_HAVE_MPI=0 \
               -fno-sanitize-recover=undefined
.PHONY: fuzz fuzz-build fuzz-run fuzz-seeds deps-fuzz

fuzz: deps-fuzz
	@$(MAKE) --no-print-directory fuzz-run

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined $(DEPFLAGS) -c $< -o $@
-include $(FUZZ_LIB_OBJ:.o=.d)
$(call without_deps,$(FUZZ_LIB_OBJ)): FORCE

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined $< $(FUZZ_LIB_OBJ) -lm -o $@

fuzz-build: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)

fuzz-run: fuzz-build
	@passed=0; failed=0; failed_names=""; \
	for h in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$h; log=$(FUZZ_BUILD)/fuzz_$$h.log; \
	  echo "== fuzz_$$h: $(FUZZ_SECONDS) s from tests/fuzz/seeds/$$h"; \
	  if $(FUZZ_BUILD)/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	       -artifact_prefix=$(FUZZ_BUILD)/fuzz_$$h- $(FUZZ_BUILD)/corpus/$$h tests/fuzz/seeds/$$h \
	       > $$log 2>&1; then \
	    passed=$$((passed+1)); echo "  ok   $$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' $$log)"; \
	  else failed=$$((failed+1)); failed_names="$$failed_names fuzz_$$h"; tail -n 40 $$log; fi; \
	done; \
	[ -z "$$failed_names" ] || echo "failed fuzzers:$$failed_names (inputs: $(FUZZ_BUILD)/fuzz_*-crash-*)"; \
	echo "fuzz: $$passed passed, $$failed failed"; \
	[ $$failed = 0 ]

fuzz-seeds: $(BUILD)/libmoe.a $(BUILD)/version.c
	@mkdir -p $(BUILD)/fuzz
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) tests/fuzz/make_seeds.c $(BUILD)/version.c \
	  $(BUILD)/libmoe.a -o $(BUILD)/fuzz/make_seeds $(LDLIBS)
	$(BUILD)/fuzz/make_seeds tests/fuzz/seeds

clean:
	rm -rf build

# ---- CUDA: the GPU backend -------------------------------------------------------------------
# make cuda builds build/cuda/moe (and its chapter programs); make test-cuda runs the unit
# suites on that build's binaries, where the cuda backend is in the table but no GPU need be
# there (tests/test_cuda_build.sh checks what a machine without one can).
.PHONY: cuda test-cuda test-units
cuda: need-openblas
	@[ -x "$(NVCC)" ] || { echo "error: no nvcc (looked for $(NVCC)): install the CUDA toolkit, or set CUDA_HOME=/path/to/cuda"; exit 2; }
	@$(MAKE) --no-print-directory CUDA=1 all

# the unit suites (Check) linked against the CUDA build's library: every CPU test passes with
# the cuda backend in the binary, and tests/test_backend_ops.c adds the GPU to the backends
# under test when one is there
test-cuda: cuda
	@$(MAKE) --no-print-directory CUDA=1 test-units

test-units: need-openblas $(TEST_BIN)
	@bash tests/lib/make_test.sh test-units $(BUILD)

# The commit a build records (GIT_COMMIT; tests/test_build.sh checks when it says -dirty).
.PHONY: commit
commit:
	@echo $(GIT_COMMIT)

# The probe results, one per line (tests/test_build.sh checks them against the machine).
features:
	@echo HAVE_OPENBLAS=$(HAVE_OPENBLAS); echo HAVE_OPENMP=$(HAVE_OPENMP); \
	 echo HAVE_CHECK=$(HAVE_CHECK); echo HAVE_GNUPLOT=$(HAVE_GNUPLOT); \
	 echo HAVE_CUDA=$(HAVE_CUDA); echo HAVE_MPI=$(HAVE_MPI); echo OPENBLAS_LIBS=$(OPENBLAS_LIBS); \
	 echo UNAME_S=$(UNAME_S); echo BUILD=$(BUILD); echo BLAS=$(BLAS_NAME); echo BLAS_CPPFLAGS=$(BLAS_CPPFLAGS); \
	 echo BLAS_LIBS=$(BLAS_LIBS); echo OMP_CFLAGS=$(OMP_CFLAGS); echo OMP_LDFLAGS=$(OMP_LDFLAGS); \
	 echo CHECK_LIBS=$(CHECK_LIBS)

help:
	@sed -n '1,/^$$/p' Makefile
