#!/usr/bin/env bash
# cross_aarch64.sh [OUT]: the C of moe.c for 64-bit Arm (Grace-Hopper nodes such as GH200),
# built by Debian's aarch64 cross compiler (aarch64-linux-gnu-gcc, `make deps-cross`) with the
# project's flags and every warning an error: the engine, the command line, the chapters'
# programs and the labs' graders, once without MPI and once with it. Compiling only: a link
# needs OpenBLAS and MPI built for aarch64, which such a node has; their headers here are this
# machine's (the interfaces are the same on both). Objects go to OUT (default build/aarch64).
# Exits 0 when every file compiles clean, 1 with the compiler's words otherwise, 2 when there
# is no cross compiler.
set -u
cd "$(dirname "$0")/../.."
out=${1:-build/aarch64}
cc=${CROSS_CC:-aarch64-linux-gnu-gcc}
command -v "$cc" > /dev/null 2>&1 ||
    { echo "cross_aarch64: no $cc: install it with make deps-cross" >&2; exit 2; }
blas=$(pkg-config --cflags openblas 2> /dev/null)
for pc in /usr/lib/*/openblas-openmp/pkgconfig; do
    [ -d "$pc" ] && blas=$(PKG_CONFIG_PATH=$pc pkg-config --cflags openblas)
done
mpi=$(mpicc --showme:compile 2> /dev/null) ||
    { echo "cross_aarch64: no mpicc for MPI's headers: make deps" >&2; exit 2; }
status=0
for with_mpi in 0 1; do
    files=(src/*/*.c src/*/*/*.c chapters/*/*.c labs/*/*.c)
    # the MPI labs' graders are MPI programs only (a lab folder with an MPI note)
    mpi_labs=$(for m in labs/*/MPI; do [ -e "$m" ] && printf '%s|' "${m%/MPI}/"; done)
    [ $with_mpi = 0 ] && [ -n "$mpi_labs" ] &&
        mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -Ev "^(${mpi_labs%|})")
    dir=$out/mpi$with_mpi
    mkdir -p "$dir"
    flags=(-std=c11 -D_GNU_SOURCE -O2 -fno-math-errno -fno-trapping-math -Wall -Wextra -Wshadow
           -Wno-unused-parameter -Werror -fopenmp -Isrc -Ilabs/common -Itests $blas
           -idirafter /usr/include
           -DMOE_HAVE_OPENMP=1 -DMOE_HAVE_MPI=$with_mpi -DMOE_HAVE_CUDA=0 -DMOE_HAVE_NCCL=0)
    [ $with_mpi = 1 ] && read -r -a extra <<< "$mpi" && flags+=("${extra[@]}")
    # two compilers at a time; each object named after its path
    if ! printf '%s\n' "${files[@]}" |
        xargs -P "$(nproc)" -I{} sh -c '"$0" "$@" -c "{}" -o "'"$dir"'/$(echo "{}" | tr / _).o"' \
            "$cc" "${flags[@]}"; then
        status=1
    fi
    n=$(find "$dir" -name '*.o' | wc -l)
    echo "cross_aarch64: MPI=$with_mpi: $n of ${#files[@]} files compiled for aarch64"
    [ "$n" = "${#files[@]}" ] || status=1
done
exit $status
