#!/usr/bin/env bash
# pack_deps.sh [DIR]: the Debian packages that building and testing moe.c needs beyond a
# compiler (OpenBLAS for OpenMP with its Fortran runtime, Check, pkg-config, Open MPI),
# downloaded here into DIR (default .gpu-deps, which git ignores), for a GPU machine that has
# no network or no package manager: copy DIR there with the working tree (a copy of the tracked
# files alone leaves it out: name it), and run_device.sh unpacks the packages under
# /tmp/moe-deps (nothing under /) when the machine lacks OpenBLAS, Check or MPI. About 20 MiB
# (Debian 12's packages); the packages of a newer system may not load on an older one.
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-.gpu-deps}
pkgs=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 check libsubunit0
      libsubunit-dev pkgconf pkgconf-bin libpkgconf3
      # Open MPI and what its libraries load (relocated with OPAL_PREFIX by run_device.sh)
      openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15
      libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libfabric1 libucx0 libibverbs1
      librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libmunge2
      libxnvctrl0 libpciaccess0 libltdl7)
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
if ! apt-get download "${pkgs[@]}" > /dev/null 2>&1; then
    apt-get update > /dev/null
    apt-get download "${pkgs[@]}" > /dev/null
fi
echo "pack_deps: $(ls ./*.deb | wc -l) packages, $(($(cat ./*.deb | wc -c) / 1048576)) MiB, in $dir"
