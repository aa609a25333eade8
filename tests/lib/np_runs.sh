#!/usr/bin/env bash
# np_runs.sh: the training runs of the multi-process suites that compare a layout with one
# process (tests/mpi/test_tp.sh, test_zero.sh, test_layouts.sh, test_pp.sh), sourced after
# tests/lib/common.sh. They use the suite's $moe, its settings ${tiny[@]} and its $tmp.
#
#   run NAME NP [--set ...]      train with NP processes into $tmp/NAME (NP 1: no mpirun);
#                                its output in $tmp/NAME.log
#   resume NAME NP [--set ...]   continue $tmp/NAME's run with NP processes; its output in
#                                $tmp/NAME.resume.log
#   same_curves A B              train.csv's loss, aux, z, grad_norm and val_loss of runs A and
#                                B agree to 1e-5 (relative, or 1e-7 absolute) at every step
#   bytes_agree DIR NP           process 0's grad_sent, weight_sent, tp_sent and pp_sent of the
#                                last step of DIR's dist.csv are moe plan --config's count for
#                                its config.txt over NP processes
# Each mpirun is bounded (a KILL 10 s after the TERM of timeout, as an mpirun stuck ending a
# job ignores the TERM); the status is the command's.
# shellcheck disable=SC2154 # moe, tiny, tmp: set by the sourcing suite

# np_train NP ARGS...: moe train ARGS with NP processes (NP 1: no mpirun)
np_train() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then
        "$moe" train "$@"
    else
        timeout -k 10 120 mpirun -np "$np" "$moe" train "$@"
    fi
}

run() {
    local name=$1 np=$2
    shift 2
    np_train "$np" --out "$tmp/$name" "${tiny[@]}" "$@" > "$tmp/$name.log" 2>&1
}

resume() {
    local name=$1 np=$2
    shift 2
    np_train "$np" --resume "$tmp/$name" --quiet "$@" > "$tmp/$name.resume.log" 2>&1
}

same_curves() {
    awk -F, 'NR == FNR { if (FNR == 1) for (i = 1; i <= NF; i++) c[$i] = i
                         else for (k in c) a[FNR, k] = $c[k]; n = FNR; next }
             FNR > 1 { rows++
                       split("loss aux_loss z_loss grad_norm val_loss", keys, " ")
                       for (j in keys) { k = keys[j]; x = $c[k]; y = a[FNR, k]
                         if ((x == "") != (y == "")) bad++
                         else if (x != "") { d = x - y; d = d < 0 ? -d : d; m = x < 0 ? -x : x
                                             if (d > 1e-5 * m + 1e-7) bad++ } } }
             END { exit !(rows == n - 1 && rows > 0 && bad == 0) }' "$1/train.csv" "$2/train.csv"
}

bytes_agree() {
    local json key args=()
    json=$("$moe" plan --config "$1/config.txt" --cluster laptop --gpus "$2" --json 2>&1)
    for key in grad_sent weight_sent tp_sent pp_sent; do
        args+=(-v "$key=$(sed -n "s/.*\"$key\": *\([0-9]*\).*/\1/p" <<< "$json" | head -n 1)")
    done
    awk -F, "${args[@]}" \
        'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         $2 == -1 && $3 == 0 { G = $c["grad_sent"]; W = $c["weight_sent"]; T = $c["tp_sent"]
                               P = $c["pp_sent"] }
         END { exit !(grad_sent != "" && G == grad_sent && W == weight_sent && T == tp_sent &&
                      P == pp_sent) }' "$1/dist.csv"
}
