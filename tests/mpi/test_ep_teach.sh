#!/usr/bin/env bash
# test_ep_teach.sh: training spread over processes gives the one-process result, with the
# hand-built collectives of chapter 3 (dist.collectives=teach); the checks are
# tests/lib/ep_checks.sh's, whose header lists them. tests/mpi/test_ep.sh runs them with MPI's.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
engines=teach
# shellcheck source=tests/lib/ep_checks.sh
. "$root/tests/lib/ep_checks.sh"
