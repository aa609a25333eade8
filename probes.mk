# probes.mk: which OpenMP and which BLAS a build uses, shared by Makefile and labs/Makefile (so
# that a lab's grader links what the engine's library was built against). It reads CC and
# DEPS_ROOT and sets:
#   UNAME_S                      the system (uname -s): Linux, or Darwin (macOS)
#   HAVE_OPENMP                  1 when $(CC) builds OpenMP code; HAVE_OPENMP=0 on the command
#                                line (or in the environment) builds without it
#   OMP_CFLAGS, OMP_LDFLAGS      the compiler's and the linker's OpenMP flags (without OpenMP: no
#                                link flag, and -Wno-unknown-pragmas for the #pragma omp lines)
#   BLAS_NAME                    OpenBLAS or Accelerate (macOS without OpenBLAS); none when absent
#   BLAS_CPPFLAGS, BLAS_LIBS     its header path and MOE_BLAS_OPENBLAS=1|0, and its libraries
#   HAVE_BLAS, HAVE_OPENBLAS     1 when there is a BLAS at all, and when it is OpenBLAS
#   OPENBLAS_KIND                which OpenBLAS build, for the feature list
#   CHECK_CFLAGS, CHECK_LIBS     Check (the unit tests), through pkg-config
#   BREW_PREFIX                  Homebrew's prefix (macOS only)
UNAME_S := $(shell uname -s 2>/dev/null)

# ---- macOS: Homebrew's keg-only formulas (openblas, libomp) are not on the compiler's paths,
# nor on pkg-config's: each is found under $(BREW_PREFIX)/opt/NAME. Homebrew's own answer first,
# then its two usual prefixes (Apple silicon, Intel).
ifeq ($(UNAME_S),Darwin)
BREW_PREFIX := $(firstword $(shell brew --prefix 2>/dev/null) $(wildcard /opt/homebrew /usr/local))
BREW_OPENBLAS := $(patsubst %/lib/libopenblas.dylib,%,$(wildcard $(BREW_PREFIX)/opt/openblas/lib/libopenblas.dylib))
BREW_LIBOMP := $(patsubst %/include/omp.h,%,$(wildcard $(BREW_PREFIX)/opt/libomp/include/omp.h))
PKG_CONFIG_ENV := PKG_CONFIG_PATH=$(BREW_PREFIX)/opt/check/lib/pkgconfig:$(BREW_PREFIX)/lib/pkgconfig:$$PKG_CONFIG_PATH
endif

# ---- OpenMP: the compiler's own -fopenmp (GCC; Homebrew's GCC or LLVM on macOS), else on macOS
# Apple's clang through Homebrew's libomp: Apple's driver does not take -fopenmp, but its
# preprocessor does, and the runtime is linked by name.
omp_probe = $(shell echo 'int omp_get_max_threads(void); int main(void){return omp_get_max_threads() > 0 ? 0 : 1;}' | \
  $(CC) $(1) -x c - -o /dev/null $(2) 2>/dev/null && echo 1 || echo 0)
ifeq ($(origin HAVE_OPENMP),undefined)
HAVE_OPENMP := $(call omp_probe,-fopenmp,-fopenmp)
ifeq ($(HAVE_OPENMP)$(UNAME_S),0Darwin)
ifneq ($(BREW_LIBOMP),)
OMP_CFLAGS := -Xpreprocessor -fopenmp -I$(BREW_LIBOMP)/include
OMP_LDFLAGS := -L$(BREW_LIBOMP)/lib -lomp
HAVE_OPENMP := $(call omp_probe,$(OMP_CFLAGS),$(OMP_LDFLAGS))
endif
endif
endif
ifeq ($(HAVE_OPENMP),1)
OMP_CFLAGS ?= -fopenmp
OMP_LDFLAGS ?= -fopenmp
else
# the #pragma omp lines are the serial code as written: GCC need not name each one
override OMP_CFLAGS := -Wno-unknown-pragmas
override OMP_LDFLAGS :=
endif

# ---- BLAS ---------------------------------------------------------------------------------
# Linux, with OpenMP: OpenBLAS built for OpenMP (Debian: libopenblas-openmp-dev) shares one
# thread pool with our own OpenMP loops; the pthreads build spins its own threads against ours
# and runs about half as fast on 2 cores. Prefer the OpenMP build and pin it with an rpath,
# since the system-wide libopenblas.so.0 may point at the pthreads build.
# Linux, without OpenMP: the pthreads build (Debian's libopenblas0-pthread, which
# libopenblas-dev installs), pinned the same way: the OpenMP build needs libgomp, which such a
# link does not name ("libgomp.so.1: DSO missing from command line"). Its headers are any
# build's (the API is one); Debian ships its libopenblas.so.0 without the .so link, so it is
# named in full.
# DEPS_ROOT: a folder the packages were unpacked into instead of / (tests/gpu/run_device.sh on a
# machine without them, with PKG_CONFIG_SYSROOT_DIR and PKG_CONFIG_LIBDIR pointing there).
# macOS: Homebrew's openblas where installed, else Apple's Accelerate (always there), whose
# CBLAS has every product the engine calls but none of OpenBLAS's own functions
# (src/backend/blas.h).
ifeq ($(UNAME_S),Darwin)
ifneq ($(BREW_OPENBLAS),)
OPENBLAS_CFLAGS := -I$(BREW_OPENBLAS)/include
OPENBLAS_LIBS := -L$(BREW_OPENBLAS)/lib -Wl,-rpath,$(BREW_OPENBLAS)/lib -lopenblas
OPENBLAS_KIND := Homebrew's, $(BREW_OPENBLAS)
endif
else
OPENBLAS_OMP_PC := $(firstword $(wildcard $(DEPS_ROOT)/usr/lib/*/openblas-openmp/pkgconfig/openblas.pc))
OPENBLAS_PTHREAD_LIB := $(firstword $(wildcard $(DEPS_ROOT)/usr/lib/*/openblas-pthread/libopenblas.so.0))
ifeq ($(HAVE_OPENMP)$(if $(OPENBLAS_OMP_PC),1,0),11)
OPENBLAS_CFLAGS := $(shell PKG_CONFIG_PATH=$(dir $(OPENBLAS_OMP_PC)) pkg-config --cflags openblas)
OPENBLAS_LIBDIR := $(shell PKG_CONFIG_PATH=$(dir $(OPENBLAS_OMP_PC)) pkg-config --variable=libdir openblas)
OPENBLAS_LIBS := -L$(OPENBLAS_LIBDIR) -Wl,-rpath,$(OPENBLAS_LIBDIR) -lopenblas
OPENBLAS_KIND := OpenMP build
else ifeq ($(HAVE_OPENMP)$(if $(OPENBLAS_PTHREAD_LIB),1,0),01)
OPENBLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBDIR := $(dir $(OPENBLAS_PTHREAD_LIB))
ifneq ($(shell pkg-config --exists openblas 2>/dev/null && echo 1),)
OPENBLAS_LIBS := -L$(OPENBLAS_LIBDIR) -Wl,-rpath,$(OPENBLAS_LIBDIR) -l:libopenblas.so.0
endif
OPENBLAS_KIND := pthreads build: no OpenMP here, so BLAS keeps its own threads
else
OPENBLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
OPENBLAS_KIND := pthreads build: slower, run make deps for the OpenMP build
endif
endif
HAVE_OPENBLAS := $(if $(OPENBLAS_LIBS),1,0)
ifeq ($(HAVE_OPENBLAS),1)
BLAS_NAME := OpenBLAS
BLAS_CPPFLAGS := $(OPENBLAS_CFLAGS) -DMOE_BLAS_OPENBLAS=1
BLAS_LIBS := $(OPENBLAS_LIBS)
else ifeq ($(UNAME_S),Darwin)
# ACCELERATE_NEW_LAPACK: the CBLAS declarations of macOS 13.3 on (the older ones are deprecated
# there, with a warning at every call); older SDKs ignore it
BLAS_NAME := Accelerate
BLAS_CPPFLAGS := -DMOE_BLAS_OPENBLAS=0 -DACCELERATE_NEW_LAPACK
BLAS_LIBS := -framework Accelerate
else
BLAS_NAME := none
endif
HAVE_BLAS := $(if $(BLAS_LIBS),1,0)

CHECK_CFLAGS := $(shell $(PKG_CONFIG_ENV) pkg-config --cflags check 2>/dev/null)
CHECK_LIBS := $(shell $(PKG_CONFIG_ENV) pkg-config --libs check 2>/dev/null)
HAVE_CHECK := $(if $(CHECK_LIBS),1,0)
