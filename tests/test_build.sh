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

finish
