#!/usr/bin/env bash
# The Makefile's dependency probes against the machine: a probe that silently never fires (or
# fires for something absent) is a bug. Each probe is compared with an independent check.
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
features=$(make -s --no-print-directory features)
has() { grep -qx "$1=1" <<<"$features"; }
expect() { # feature name, independent check command
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then has "$name"; check "$name=1 (present on this machine)" $?
  else ! has "$name"; check "$name=0 (absent on this machine)" $?; fi
}
expect HAVE_OPENBLAS pkg-config --exists openblas
expect HAVE_CHECK pkg-config --exists check
expect HAVE_GNUPLOT command -v gnuplot
expect HAVE_CUDA command -v nvcc
expect HAVE_MPI command -v mpicc
printf '#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n' > "$tmp/omp.c"
expect HAVE_OPENMP gcc -fopenmp "$tmp/omp.c" -o "$tmp/omp"

# The OpenMP build of OpenBLAS is preferred when installed, and the binary really loads it.
bin=${MOE_BIN:-build/moe}
if ls /usr/lib/*/openblas-openmp/libopenblas.so >/dev/null 2>&1; then
  ldd "$bin" | grep -q 'openblas-openmp/libopenblas'
  check "$bin loads the OpenMP build of OpenBLAS" $?
fi
# OpenMP really is compiled in: the binary links libgomp when the probe said OpenMP works.
if has HAVE_OPENMP; then ldd "$bin" | grep -q libgomp; check "$bin links libgomp" $?; fi

# The commit a build records is -dirty for a change to what the binary is built from, and not for
# the files the ablation scripts and `make book` rewrite (plots/, the Markdown files).
if git rev-parse --git-dir > /dev/null 2>&1; then
  git clone -q --local . "$tmp/clone" 2> /dev/null
  cp Makefile "$tmp/clone/Makefile" # this tree's Makefile, committed in the clone
  git -C "$tmp/clone" -c user.name=test -c user.email=test@localhost commit -qam 'this Makefile' > /dev/null
  commit() { make -s --no-print-directory -C "$tmp/clone" commit 2> /dev/null; }
  clean=$(commit)
  echo x >> "$tmp/clone/plots/bench/bench.txt"; echo x >> "$tmp/clone/handbook.md"
  after_plots=$(commit)
  echo '/* x */' >> "$tmp/clone/src/base/util.h"
  after_src=$(commit)
  [[ $clean =~ ^[0-9a-f]{12}$ ]] && [ "$after_plots" = "$clean" ] && [ "$after_src" = "$clean-dirty" ]
  check "GIT_COMMIT: clean $clean, unchanged by plots/ and handbook.md, -dirty for src/" $? \
    "clean '$clean', after plots '$after_plots', after src '$after_src'"
fi

# make deps as a user who cannot install: a missing optional package (here a made-up one in
# APT_OPTIONAL) is reported with its install command and make goes on (exit 0, so make demo
# and make test go on too); a missing required one stops it with exit 2 and the command.
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null 2>&1; then
  as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
  out=$(as_user make -s --no-print-directory deps APT_OPTIONAL=moe-no-such-package 2>&1)
  rc=$?
  [ $rc = 0 ] && grep -q "optional packages missing: moe-no-such-package" <<< "$out" &&
    grep -q "apt-get install .*moe-no-such-package" <<< "$out" && grep -q "going on" <<< "$out"
  check "make deps without root: a missing optional package is named, with its command, and make goes on" \
    $? "exit $rc: $out"
  out=$(as_user make -s --no-print-directory deps APT_REQUIRED=moe-no-such-package 2>&1)
  rc=$?
  [ $rc = 2 ] && grep -q "required packages missing: moe-no-such-package" <<< "$out" &&
    grep -q "apt-get install .*moe-no-such-package" <<< "$out"
  check "make deps without root: a missing required package stops it with exit 2 and the command" \
    $? "exit $rc: $out"
else
  echo "  skip make deps as a user without root: needs root and setpriv to become one"
fi

# A laptop's builds. clang without OpenMP (make CC=clang HAVE_OPENMP=0, in build/noomp/) links
# the pthreads OpenBLAS: the OpenMP build needs libgomp, which that link does not name.
noomp=$(make -n --no-print-directory CC=clang HAVE_OPENMP=0 BUILD="$tmp/noomp" "$tmp/noomp/moe" 2>&1 |
  grep -E -- "-o $tmp/noomp/moe( |$)")
[ -n "$noomp" ] && ! grep -Eq -- '-fopenmp|gomp|openblas-openmp' <<< "$noomp"
check "make CC=clang HAVE_OPENMP=0: the link names no OpenMP runtime" $? "link: ${noomp:-none}"
MAKEFLAGS= make -s --no-print-directory CC=clang HAVE_OPENMP=0 SANITIZE=0 features | grep -qx BUILD=build/noomp
check "make CC=clang HAVE_OPENMP=0 builds in build/noomp/, apart from build/" $?

# macOS, as this machine can show it: a uname that answers Darwin, a brew whose prefix is a
# scratch folder holding libomp (keg-only, found under opt/), and a compiler that refuses a bare
# -fopenmp as Apple's clang does but takes -Xpreprocessor -fopenmp.
mac=$tmp/mac
mkdir -p "$mac/bin" "$mac/brew/opt/libomp/include" "$mac/brew/opt/libomp/lib"
touch "$mac/brew/opt/libomp/include/omp.h"
printf '#!/bin/sh\necho Darwin\n' > "$mac/bin/uname"
printf '#!/bin/sh\ncase "$1" in --prefix) echo "%s/brew" ;; *) exit 1 ;; esac\n' "$mac" > "$mac/bin/brew"
printf '#!/bin/sh\nprev=\nfor a in "$@"; do\n  [ "$a" = -fopenmp ] && [ "$prev" != -Xpreprocessor ] && exit 1\n  prev=$a\ndone\nexit 0\n' > "$mac/bin/cc"
chmod +x "$mac/bin/"*
# (one job at a time whatever make runs the suite: the corpus check relies on the order of its
# prerequisites)
on_mac() { PATH="$mac/bin:$PATH" MAKEFLAGS= make -j1 --no-print-directory CC="$mac/bin/cc" "$@" 2>&1; }
mac_features=$(on_mac -s features)
grep -qx "UNAME_S=Darwin" <<< "$mac_features" && grep -qx "BLAS=Accelerate" <<< "$mac_features" &&
  grep -qx "BLAS_LIBS=-framework Accelerate" <<< "$mac_features" &&
  grep -q -- "-DMOE_BLAS_OPENBLAS=0" <<< "$mac_features" && grep -qx "HAVE_OPENMP=1" <<< "$mac_features" &&
  grep -qx "OMP_CFLAGS=-Xpreprocessor -fopenmp -I$mac/brew/opt/libomp/include" <<< "$mac_features" &&
  grep -qx "OMP_LDFLAGS=-L$mac/brew/opt/libomp/lib -lomp" <<< "$mac_features"
check "macOS without OpenBLAS: Accelerate, and OpenMP through Homebrew's libomp" $? "$mac_features"
mac_link=$(on_mac -n BUILD="$tmp/mac-build" "$tmp/mac-build/moe" | grep -E -- "-o $tmp/mac-build/moe( |$)")
grep -q -- "-framework Accelerate" <<< "$mac_link" && grep -q -- "-lomp" <<< "$mac_link" &&
  ! grep -q -- "-lopenblas" <<< "$mac_link"
check "macOS: build/moe links Accelerate and libomp" $? "link: ${mac_link:-none}"
# labs/Makefile has the same probes: its grader is built for Accelerate and libomp as well
lab_cc=$(on_mac -n -C labs grade-solution LAB=01-router | grep -E -- '-o [^ ]*/grader( |$)')
grep -q -- "-Xpreprocessor -fopenmp" <<< "$lab_cc" && grep -q -- "-lomp" <<< "$lab_cc" &&
  grep -q -- "-framework Accelerate" <<< "$lab_cc" &&
  ! sed 's/-Xpreprocessor -fopenmp//g' <<< "$lab_cc" | grep -q -- -fopenmp
check "macOS: labs/Makefile's grader too (no -fopenmp that Apple's clang refuses)" $? "grader: ${lab_cc:-none}"
mkdir -p "$mac/brew/opt/openblas/lib" "$mac/brew/opt/openblas/include"
touch "$mac/brew/opt/openblas/lib/libopenblas.dylib"
mac_features=$(on_mac -s features)
grep -qx "BLAS=OpenBLAS" <<< "$mac_features" &&
  grep -qx "BLAS_LIBS=-L$mac/brew/opt/openblas/lib -Wl,-rpath,$mac/brew/opt/openblas/lib -lopenblas" <<< "$mac_features" &&
  grep -q -- "-I$mac/brew/opt/openblas/include -DMOE_BLAS_OPENBLAS=1" <<< "$mac_features"
check "macOS with Homebrew's openblas (keg-only): its prefix, found through brew" $? "$mac_features"
out=$(on_mac -s deps); rc=$?
[ $rc = 2 ] && grep -q "brew install check pkg-config gnuplot openblas libomp open-mpi" <<< "$out" &&
  ! grep -q "apt-get" <<< "$out"
check "macOS: make deps names the one brew command, no apt-get (exit 2 while Check is missing)" $? "exit $rc: $out"
# no fortunes there (FORTUNES_DIR as on a Mac): the fallback corpus, through moe corpus --from
out=$(on_mac -n CORPUS="$tmp/corpus" BUILD="$tmp/mac-build" FORTUNES_DIR="$tmp/no-fortunes" \
        "$tmp/corpus/train.bin"); rc=$?
[ $rc = 0 ] && grep -q "moe corpus --from data/fallback/en.txt" <<< "$out" && ! grep -q "apt-get" <<< "$out"
check "macOS: the corpus (make demo, make data) is the fallback one, no apt-get" $? "exit $rc: $out"

# The Accelerate build calls nothing of OpenBLAS's own: every file that includes the BLAS or
# calls OpenBLAS, compiled against a stand-in for <Accelerate/Accelerate.h>
# (tests/macos/Accelerate/) without OpenMP, an undeclared function an error; the objects then
# need cblas_sgemm and nothing named openblas_ or omp_, and no cblas.h was read.
acc=$tmp/accelerate
mkdir -p "$acc"
acc_fail=""
for f in src/backend/cpu/*.c $(grep -l 'openblas_[a-z_]*(' src/*/*.c src/*/*/*.c); do
  o=$acc/$(basename "$f" .c).o
  gcc -std=c11 -D_GNU_SOURCE -O0 -Wall -Werror=implicit-function-declaration -Wno-unused-parameter \
    -Wno-unknown-pragmas -Isrc -Itests/macos -DMOE_BLAS_OPENBLAS=0 -DACCELERATE_NEW_LAPACK \
    -DMOE_HAVE_OPENMP=0 -DMOE_HAVE_MPI=0 -DMOE_HAVE_CUDA=0 -DMOE_HAVE_NCCL=0 -MD -MF "$o.d" \
    -c "$f" -o "$o" > "$acc/log" 2>&1 || acc_fail="$acc_fail $f: $(head -c 600 "$acc/log")"
done
undefined=$(nm -u "$acc"/*.o 2> /dev/null | awk '{ print $NF }' | sort -u)
read_headers=$(cat "$acc"/*.d 2> /dev/null | tr ' ' '\n' | grep cblas | sort -u | tr '\n' ' ')
[ -z "$acc_fail" ] && grep -qx cblas_sgemm <<< "$undefined" &&
  ! grep -Eq '^(openblas_|omp_)' <<< "$undefined" && [ -z "$read_headers" ]
check "the Accelerate build (MOE_BLAS_OPENBLAS=0) calls no OpenBLAS-only function" $? \
  "${acc_fail:-needs $(grep -E '^(openblas_|omp_)' <<< "$undefined" | tr '\n' ' ')read $read_headers}"

# An object's prerequisites are the headers its compiler read (-MMD -MP, the .d beside it), not
# every header: two objects in a scratch build, then make as if a header had changed (-W, which
# touches nothing on disk, so the suites beside this one see no change). src/io/json.h rebuilds
# the object of src/io/json.c and not that of src/base/util.c, which never includes it;
# src/base/util.h, which both reach, rebuilds both; a new compiler flag (cc.flags) rebuilds both
# too. (The objects are named as under obj/src/: io/json.o, base/util.o.)
deps=$tmp/deps
objs="$deps/obj/src/io/json.o $deps/obj/src/base/util.o"
dmake() { MAKEFLAGS= make --no-print-directory BUILD="$deps" OPT=-O0 "$@" $objs 2>&1; }
rebuilt() { grep -Eo -- "-o $deps/obj/[^ ]*\.o" <<< "$1" | sed "s|-o $deps/obj/src/||" | sort | tr '\n' ' '; }
dmake > "$tmp/deps.log"
check "a scratch build of two objects" $? "$(tail -n 5 "$tmp/deps.log")"
after_json=$(rebuilt "$(dmake -W src/io/json.h)")
after_util=$(rebuilt "$(dmake -W src/base/util.h)")
after_flag=$(rebuilt "$(dmake EXTRA_CFLAGS=-DMOE_TEST_FLAG)")
after_none=$(rebuilt "$(dmake EXTRA_CFLAGS=-DMOE_TEST_FLAG)")
[ "$after_json" = "io/json.o " ]
check "a header's change rebuilds the objects that include it, and no other (-MMD)" $? \
  "src/io/json.h rebuilt: '$after_json' (expected io/json.o alone)"
[ "$after_util" = "base/util.o io/json.o " ] && [ "$after_flag" = "$after_util" ] && [ -z "$after_none" ]
check "a header both include rebuilds both, and so does a new flag, once" $? \
  "util.h: '$after_util'; a new flag: '$after_flag', then '$after_none'"
# An object without its .d (built before the Makefile wrote them) is rebuilt once, not trusted.
rm "$deps/obj/src/io/json.d"
after_lost=$(rebuilt "$(dmake EXTRA_CFLAGS=-DMOE_TEST_FLAG)")
after_back=$(rebuilt "$(dmake EXTRA_CFLAGS=-DMOE_TEST_FLAG -W src/io/json.h)")
[ "$after_lost" = "io/json.o " ] && [ "$after_back" = "io/json.o " ] && [ -f "$deps/obj/src/io/json.d" ]
check "an object whose .d is missing is rebuilt, and then follows its headers again" $? \
  "no .d: '$after_lost' (expected io/json.o); then json.h: '$after_back'"

finish
