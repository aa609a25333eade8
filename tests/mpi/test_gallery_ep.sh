#!/usr/bin/env bash
# test_gallery_ep.sh (MPI): chapter 6's ep-imbalance arm in its smoke form, run by
# `make test-mpi` / `make test` with MOE_BIN=build/mpi/moe (the other arms: tests/test_gallery.sh).
#
#   chapters/06-troubleshooting/gallery.sh --smoke --only ep-imbalance trains two processes of
#   4 experts each with a collapsed router; its dist.csv has both processes' rows, and
#   moe doctor names ep_imbalance (exit 1 or 3: the collapse itself is a failure)
# Writes runs/ch06-gallery-ep-imbalance-smoke-ep-suite and plots/06-troubleshooting-smoke-ep-suite
# (ignored by git).

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1

echo "test_gallery_ep: gallery.sh --smoke --only ep-imbalance"
# folders of its own (EXTRA_TAG, with a setting that changes nothing: the default log_every):
# tests/test_gallery.sh runs the other arms beside it and, without MPI, removes this arm's
# smoke folder
dir=runs/ch06-gallery-ep-imbalance-smoke-ep-suite
EXTRA_SET="train.log_every=10" EXTRA_TAG=ep-suite MOE_BIN=$moe MOE_MPI_BIN=$moe timeout 300 \
  bash chapters/06-troubleshooting/gallery.sh --smoke --only ep-imbalance > "$tmp/g.log" 2>&1
check "the ep-imbalance arm trains (exit 0)" $? "$(tail -n 30 "$tmp/g.log")"
ranks=$(awk -F, 'NR > 1 { print $3 }' "$dir/dist.csv" 2> /dev/null | sort -u | tr '\n' ' ')
[ "$ranks" = "0 1 " ]
check "dist.csv has the rows of processes 0 and 1" $? "ranks: '$ranks'"
"$moe" doctor "$dir" > "$tmp/report.txt"
rc=$?
{ [ $rc = 1 ] || [ $rc = 3 ]; } && grep -q "^WARNING ep_imbalance: " "$tmp/report.txt" &&
  grep -q "^  seen:     layer [0-9]*: process [01]'s experts computed" "$tmp/report.txt"
check "moe doctor names ep_imbalance with the layer and the busiest process (exit $rc)" $? \
  "$(cat "$tmp/report.txt")"
finish
