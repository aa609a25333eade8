#!/usr/bin/env bash
# test_cross.sh: the C builds clean for 64-bit Arm (tests/lib/cross_aarch64.sh: every file of the
# engine, the chapters and the labs, without and with MPI, every warning an error), when
# Debian's aarch64 cross compiler is here (`make deps-cross`; CI installs it). And the
# compiler really targets Arm: x86-only code fails there and its objects are aarch64 ELF.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_cross: the C for aarch64"
cc=${CROSS_CC:-aarch64-linux-gnu-gcc}
if ! command -v "$cc" > /dev/null 2>&1; then
    skip "no aarch64 cross compiler ($cc)" "make deps-cross"
fi
printf '#include <stdio.h>\nint main(void) { return puts("arm") < 0; }\n' > "$tmp/hello.c"
if ! "$cc" -c "$tmp/hello.c" -o "$tmp/hello.o" > /dev/null 2>&1; then
    skip "$cc is here but not the C library's headers for aarch64 (libc6-dev-arm64-cross)" "make deps-cross"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
bash tests/lib/cross_aarch64.sh "$tmp/out" > "$tmp/log" 2>&1
check "every file compiles for aarch64 with -Werror, without and with MPI" $? \
    "$(grep -E 'error|cross_aarch64' "$tmp/log" | head -n 8)"
file "$tmp/out/mpi1/src_parallel_dist_mpi.c.o" 2> /dev/null | grep -q "ARM aarch64"
check "the objects are 64-bit Arm (dist_mpi.c's)" $? "$(file "$tmp/out/mpi1/src_parallel_dist_mpi.c.o" 2>&1)"
printf '#include <immintrin.h>\nint f(void) { return _mm_popcnt_u32(3); }\n' > "$tmp/x86.c"
! "$cc" -c "$tmp/x86.c" -o "$tmp/x86.o" > /dev/null 2>&1
check "x86-only code does not compile there (the compiler targets Arm)" $? "it compiled"
finish
