#!/usr/bin/env bash
# test_a2a.sh: the chapter 3 program (chapters/03-expert-parallel/a2a.c) under mpirun, run by
# `make test-mpi` with MOE_BUILD set; the binary is $MOE_BUILD/chapters/03-expert-parallel/a2a
# (this script builds nothing: make MPI=1 chapters).
#
# With 1, 2 and 4 processes (E = 8 experts, C = 16, N = 12 tokens per process, top-2):
#   1. it exits 0 and prints its six numbered sections
#   2. the count exchange adds up: the rows rank r says it receives from rank q equal the rows
#      q says it sends to r, each source's rows land right after the previous source's, and
#      each rank's load is the sum of what it received; the loads sum to P x N x K
#   3. the bytes every rank sent and received (EpStats, and DistStats alike) equal the cost
#      model C x 4 (rows out + rows in) + 2 El x 4 (P - 1), recomputed here, where rows out are
#      the rows the rank sends to the other ranks and the rows in sum over ranks to the same
#   4. each rank's combined output is within 1e-5 of its own one-process reference
# And with 3 processes (not a divisor of 8) it exits non-zero with a message.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
bin=$(executable "${MOE_BUILD:-build/mpi}/chapters/03-expert-parallel/a2a" \
      "make MPI=1 chapters (or set MOE_BUILD)") || exit 1
export OMP_NUM_THREADS=1

for np in 1 2 4; do
    echo "test_a2a: mpirun -np $np"
    out="$tmp/out$np.txt"
    timeout -k 10 60 mpirun -np "$np" "$bin" > "$out" 2> "$tmp/err$np.txt"
    check "exits 0" $? "$(tail -n 5 "$tmp/err$np.txt")"
    for section in "1. the grid" "2. routing" "3. the count exchange" "4. the rows exchanged" \
                   "5. the combine" "6. the load"; do
        grep -q "^$section" "$out"
        check "prints \"$section\"" $? "$(head -n 3 "$out")"
    done

    # section 2: "rank q sends n_0 .. n_{P-1} total |"; section 3: "rank r <- rank q: e.. n
    # e.. n = total rows at row d"; section 6: "rank r  load rows"
    awk -v P="$np" '
        /^2\./ { s = 2 } /^3\./ { s = 3 } /^4\./ { s = 4 } /^6\./ { s = 6 }
        s == 2 && $1 == "rank" && $3 == "sends" {
            for (p = 0; p < P; p++) send[$2, p] = $(4 + p); nsend++ }
        s == 3 && $1 == "rank" && $3 == "<-" {
            r = $2; q = $5; sub(":", "", q); got = 0
            for (i = 6; $i != "="; i += 2) got += $(i + 1)
            if (got != $(i + 1)) bad++
            recv[r, q] = got; disp[r, q] = $NF; nrecv++ }
        s == 6 && $1 == "rank" && $4 == "rows" { load[$2] = $3; total += $3; nload++ }
        END {
            if (nsend != P || nrecv != P * P || nload != P) bad++
            for (r = 0; r < P; r++) {
                at = 0; sum = 0
                for (q = 0; q < P; q++) {
                    if (recv[r, q] != send[q, r]) bad++
                    if (disp[r, q] != at) bad++
                    at += recv[r, q]; sum += recv[r, q]
                }
                if (load[r] != sum) bad++
            }
            exit !(bad == 0 && total == P * 12 * 2)
        }' "$out"
    check "counts received = counts sent, placed in source order, loads add up" $? \
        "$(sed -n '/^2\./,/^4\./p' "$out")"

    # section 4: "rank r  rows out O in I  sent S B  received R B  model M B  DistStats S R"
    awk -v P="$np" '
        /^2\./ { s = 2 } /^3\./ { s = 3 } /^4\./ { s = 4 } /^5\./ { s = 5 }
        s == 2 && $1 == "rank" && $3 == "sends" {
            for (p = 0; p < P; p++) if (p != $2) out_want[$2] += $(4 + p) }
        s == 4 && $1 == "rank" && $3 == "rows" && $4 == "out" {
            r = $2; o = $5; i = $7; n++
            model = 4 * 16 * (o + i) + 4 * 2 * (8 / P) * (P - 1)
            if ($9 != model || $12 != model || $15 != model) bad++
            if ($18 != $9 || $19 != $12) bad++
            if (o != out_want[r]) bad++
            if (P > 1 && model == 0) bad++
            outs += o; ins += i }
        END { exit !(n == P && bad == 0 && outs == ins) }' "$out"
    check "bytes sent and received = C x 4 (rows out + rows in) + 2 El x 4 (P - 1) on every rank" \
        $? "$(sed -n '/^4\./,/^5\./p' "$out")"

    awk -v P="$np" '/max \|y - y_ref\| =/ { n++; if (!($NF + 0 < 1e-5)) bad++ }
                    END { exit !(n == P && bad == 0) }' "$out"
    check "combined output within 1e-5 of the one-process reference on every rank" $? \
        "$(grep -A "$np" '^5\.' "$out")"
done

echo "test_a2a: mpirun -np 3 (does not divide E = 8)"
timeout -k 10 60 mpirun -np 3 "$bin" > "$tmp/out3.txt" 2> "$tmp/err3.txt"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "3 processes do not divide the E = 8 experts" "$tmp/err3.txt"
check "exits non-zero with a message" $? "exit $rc; $(head -n 3 "$tmp/err3.txt")"

finish
