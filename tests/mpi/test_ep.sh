#!/usr/bin/env bash
# test_ep.sh: training spread over processes gives the one-process result, with MPI's own
# collectives (dist.collectives=mpi); the checks are tests/lib/ep_checks.sh's, whose header
# lists them. tests/mpi/test_ep_teach.sh runs them with the hand-built collectives.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
engines=mpi
# shellcheck source=tests/lib/ep_checks.sh
. "$root/tests/lib/ep_checks.sh"
