#!/usr/bin/env bash
# ep_checks.sh: training spread over processes with MPI gives the one-process result. Sourced
# by tests/mpi/test_ep.sh (engines=mpi: MPI's own collectives) and tests/mpi/test_ep_teach.sh
# (engines=teach: the hand-built ones of chapter 3), two suites so that `make test` runs them
# side by side; each has sourced tests/lib/common.sh and set $engines. They run with
# MOE_BIN=build/mpi/moe (`make test-mpi`, `make test`) and need mpirun.
#
#   1. the same tiny MoE trained 6 steps in one process and with dist.ep = 2 (2 processes),
#      dist.ep = 4 (4), dist.ep = 2 x data-parallel 2 (4) and data-parallel 2 (2, dist.ep = 1)
#      (the variants after the first on the 4-process grids alone, unless MOE_TEST_FULL=1):
#      every step's loss, aux loss, gradient norm and validation loss agree to 1e-5 relative,
#      and after the 6 steps every weight agrees to 1e-5 (dist.ep = 2 x 2, exported in one process);
#      also with aux-loss-free balancing (its biases, from the loads of every process, agree)
#      and with a per-sequence capacity (moe.capacity_scope=sequence, padded), and with the aux
#      loss over the step's two micro-batches and over two groups of experts (chapter 5); a
#      tied head (model.tied=1) at dist.ep = 2 x 2 too, and with MPI's collectives grouped-query
#      heads with qk-norm and latent attention, and a multi-token prediction module with an MoE
#      block at dist.ep = 2 (its loss too, its experts' weights in the checkpoint, and its block's
#      rows in dist.csv, none of its exchanges in layer -1's)
#   2. dist.csv: one row per step, process and MoE block (plus layer -1), and the bytes every
#      process sent and received are the cost model's, row by row (and process 0's gradient
#      sums, grad_sent, are the count of `moe plan --config`, byte for byte):
#        2 C 4 (rows_out_remote + rows_in_remote) + 2 El 4 (P - 1)
#      (rows out and back, forward and backward, 4-byte floats; El counts of 2 ints per peer)
#      with group-limited routing (moe.n_group=2, moe.topk_group=1, dist.ep=2: a group is one
#      process's experts) the one-process curve again, every token's two experts in one group
#      (the one-process run's recorded routing), each process's remote rows in dist.csv 2 x
#      its tokens routed to the other's group, and the same bytes formula; with
#      dist.dispatch=tokens (a token once per process; teach) the same curve, remote rows 1 x
#      those tokens, the bytes of ep.h's formula and under 0.6 x the rows' bytes
#   3. a checkpoint written at dist.ep = 4 resumes in one process and at dist.ep = 2 and the
#      continued steps equal the one-process run's; the checkpoint evaluates in one process
#   4. bad input: dist.ep not dividing the processes, or a batch that does not split, exits 2
#      with a message; a killed process ends the job non-zero within 30 s and the run resumes
#      from its last checkpoint; SIGINT to one process stops every one after the same step,
#      with a checkpoint of it; a process that stops answering (one of 4) is named by every
#      message of the others (with MPI's collectives, which cannot tell, the collective and
#      its group are), which end the job within 30 s (dist.timeout=3)
# 1-4 and 7 run with the suite's engine of collectives; 5 and 8 with teach, 6 and 9 with mpi:
#   5. teach repeats a run bit for bit (checkpoint, train.csv, router.csv)
#   6. with MPI's collectives, a batch of 8 over 1, 2, 4 and 8 processes (8: more than the
#      cores) for 30 steps: losses and every weight within 1e-5 of the one-process run
#   7. the gradients' sums in buckets and overlapped with the backward (dist.bucket_mb,
#      dist.overlap), over two micro-batches: teach gives the same bits as every tensor summed
#      alone after the backward, mpi the same losses and weights to 1e-5; dist.csv has the
#      wait after the backward (sync_wait_s)
#   8. host staging: train.device=cpu-fenced (cpu's ops on memory the host cannot read, as a
#      GPU's) across 4 processes gives cpu's run bit for bit in four modes (aux, aux-free with
#      dist.dispatch=tokens, capacity, dense), and resumes
#   9. processes started with different settings (mpirun's `-np 1 moe ... : -np 1 moe ...`):
#      train.lr, or model.d_model and dist.ep, that differ are refused at the start with exit 2
#      and one message naming each key, its values and ranks; train.threads may differ
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

if [ "${BASH_SOURCE[0]}" = "$0" ] || [ -z "${engines:-}" ]; then
    echo "ep_checks.sh is sourced by tests/mpi/test_ep.sh and test_ep_teach.sh, not run alone" >&2
    exit 2
fi
# uses ENGINE: this suite runs the checks of ENGINE's collectives
uses() { [[ " $engines " == *" $1 "* ]]; }
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

top=$tmp # one folder per engine below; all of it removed at exit
trap 'rm -rf "$top"' EXIT
"$moe" synth --out "$top/data" --tokens 60000 --seed 3 > /dev/null
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set train.steps=6 --set train.warmup=2 --set train.lr=1e-2
      --set train.eval_every=3 --set "data.train=$top/data/train.bin"
      --set "data.val=$top/data/val.bin" --quiet)

# same_curves A B: train.csv columns loss, aux_loss, z_loss, grad_norm, val_loss and the
# multi-token prediction modules' mtpK_loss (11 on) agree to 1e-5 (relative, or 1e-7 absolute)
# at every step, the two files having the same columns
same_curves() {
    awk -F, 'NR == FNR { if (FNR > 1) for (i = 2; i <= NF; i++) a[FNR, i] = $i; n = FNR; nf = NF; next }
             FNR > 1 { rows++; if (NF != nf) bad++
                       for (i = 2; i <= NF; i++) { if (i == 5 || i == 7 || i == 9 || i == 10) continue
                         if (($i == "") != (a[FNR, i] == "")) bad++
                         else if ($i != "") { d = $i - a[FNR, i]; d = d < 0 ? -d : d
                           m = $i < 0 ? -$i : $i; if (d > 1e-5 * m + 1e-7) bad++ } } }
             END { exit !(rows == n - 1 && rows > 0 && bad == 0) }' "$1/train.csv" "$2/train.csv"
}
# floats FILE: the tensor data of a safetensors file, one float per line
floats() { safetensors_data "$1" | od -An -v -f | tr -s ' ' '\n' | sed '/^$/d'; }
# same_weights A B: the floats of two exported checkpoints (over 40000 of them) agree to 1e-5;
# prints their count, how many differ and the largest difference
same_weights() {
    paste <(floats "$1") <(floats "$2") |
        awk '{ n++; d = $1 - $2; d = d < 0 ? -d : d; if (d > 1e-5) bad++; if (d > mx) mx = d }
             END { print n, bad + 0, mx; exit !(n > 40000 && bad == 0) }'
}
# run NAME NP [--set ...]: train with NP processes into $tmp/NAME (NP 1: no mpirun)
run() {
    local name=$1 np=$2
    shift 2
    if [ "$np" = 1 ]; then
        "$moe" train --out "$tmp/$name" "${tiny[@]}" --set dist.collectives="$coll" "$@" \
            > "$tmp/$name.log" 2>&1
    else
        timeout -k 10 120 mpirun -np "$np" "$moe" train --out "$tmp/$name" "${tiny[@]}" \
            --set dist.collectives="$coll" "$@" > "$tmp/$name.log" 2>&1
    fi
}

for coll in $engines; do
    tmp=$top/$coll
    mkdir -p "$tmp"
    echo "$test_name: dist.collectives=$coll"
    # ---- 1. the one-process result --------------------------------------------------------
    echo "$test_name: the same run over 1, 2 and 4 processes"
    for variant in "aux|" "aux_free|--set moe.balance=aux_free --set moe.bias_rate=0.05" \
                   "capacity|--set moe.capacity_factor=1 --set moe.capacity_scope=sequence --set moe.padded=1" \
                   "global|--set moe.balance_scope=global --set moe.balance_groups=2 --set train.accum=2"; do
        IFS='|' read -r vname vsets <<< "$variant"
        # shellcheck disable=SC2086 # vsets is a list of options
        run "one-$vname" 1 $vsets
        check "[$coll] $vname: one process trains" $? "$(tail -n 3 "$tmp/one-$vname.log")"
        for grid in "2 2" "4 4" "4 2" "2 1"; do
            read -r np ep <<< "$grid"
            # make test: aux on every grid, the other variants on 4 processes (dist.ep = 4, and
            # 2 x 2); MOE_TEST_FULL=1 (make test-slow): every variant on every grid
            [ "$vname" != aux ] && [ "$np" != 4 ] && [ "${MOE_TEST_FULL:-0}" != 1 ] && continue
            name=$vname-np$np-ep$ep
            # shellcheck disable=SC2086
            run "$name" "$np" --set dist.ep="$ep" $vsets
            rc=$?
            same_curves "$tmp/one-$vname" "$tmp/$name"
            check "[$coll] $vname: $np processes, dist.ep=$ep: every step's loss, aux, z, grad norm, val loss = one process's" \
                $? "exit $rc: $(tail -n 3 "$tmp/$name.log"); $(paste -d' ' "$tmp/one-$vname/train.csv" "$tmp/$name/train.csv" | head -n 4)"
        done
    done
    # a tied head: the embedding's gradient (the head's part and its own) is summed once over the
    # world, as any replicated tensor; twice or not at all, the gradient norm would say so
    run one-tied 1 --set model.tied=1
    run tied-np4-ep2 4 --set dist.ep=2 --set model.tied=1
    rc=$?
    same_curves "$tmp/one-tied" "$tmp/tied-np4-ep2"
    check "[$coll] tied head: 4 processes, dist.ep=2: every step's loss, aux, z, grad norm, val loss = one process's" \
        $? "exit $rc: $(tail -n 3 "$tmp/tied-np4-ep2.log"); $(paste -d' ' "$tmp/one-tied/train.csv" "$tmp/tied-np4-ep2/train.csv" | head -n 4)"
    # the attention's variants: their weights are replicated tensors, summed once over the world
    # as every other (the collective engine changes nothing of that: MPI's alone)
    [ "$coll" = mpi ] && for variant in "gqa|--set model.n_head=4 --set model.kv_heads=2 --set model.head_dim=6 --set model.qk_norm=head" \
                   "mla|--set model.attention=mla --set mla.q_rank=8 --set mla.kv_rank=6 --set mla.rope_dim=4 --set mla.nope_dim=4 --set mla.v_dim=6"; do
        IFS='|' read -r vname vsets <<< "$variant"
        # shellcheck disable=SC2086 # vsets is a list of options
        run "one-$vname" 1 $vsets
        # shellcheck disable=SC2086
        run "$vname-np4-ep2" 4 --set dist.ep=2 $vsets
        rc=$?
        same_curves "$tmp/one-$vname" "$tmp/$vname-np4-ep2"
        check "[$coll] $vname: 4 processes, dist.ep=2: every step's loss, aux, z, grad norm, val loss = one process's" \
            $? "exit $rc: $(tail -n 3 "$tmp/$vname-np4-ep2.log"); $(paste -d' ' "$tmp/one-$vname/train.csv" "$tmp/$vname-np4-ep2/train.csv" | head -n 4)"
    done
    # the weights after 6 steps, every tensor (exported in one process): the gradients of every
    # step were the one-process gradients, or Adam would have moved the weights elsewhere. The
    # steps move weights by up to about 0.06 (lr 1e-2); where a gradient is near 0, Adam's m / sqrt(v)
    # turns summation-order differences into a few 1e-6, hence 1e-5 absolute
    "$moe" export --ckpt "$tmp/one-aux/ckpt.bin" --out "$tmp/one.st" > /dev/null &&
        "$moe" export --ckpt "$tmp/aux-np4-ep2/ckpt.bin" --out "$tmp/ep2dp2.st" \
            > /dev/null 2>&1
    same_weights "$tmp/one.st" "$tmp/ep2dp2.st" > "$tmp/wcmp.txt"
    ok=$?
    check "[$coll] aux: every weight after 6 steps at dist.ep=2 x 2 = one process's (to 1e-5: $(cat "$tmp/wcmp.txt"))" $ok \
        "floats, differing, max difference: $(cat "$tmp/wcmp.txt")"

    # a multi-token prediction module whose block is an MoE block (the last layer's kind): its
    # experts spread over the processes as the trunk's are, its loss and every step's numbers the
    # one-process run's, and its checkpoint the whole model (every weight, exported in one
    # process, the one-process run's); dist.csv has the module block's rows (layer 2, after the
    # trunk's 0 and 1, bytes by the cost model: C = 32, El = 2, P = 2), and layer -1's bytes
    # (the gradients' sums and statistics, of fixed sizes) are the same every step: none of the
    # module's exchanges among them (MPI's collectives alone: the engine changes nothing here)
    if [ "$coll" = mpi ]; then
        run one-mtp 1 --set model.mtp_depth=1
        run mtp-np2-ep2 2 --set dist.ep=2 --set model.mtp_depth=1
        rc=$?
        same_curves "$tmp/one-mtp" "$tmp/mtp-np2-ep2" &&
            head -n 1 "$tmp/mtp-np2-ep2/train.csv" | grep -q ',mtp1_loss$'
        check "[$coll] mtp: 2 processes, dist.ep=2, an MoE module: every step's loss, aux, z, grad norm, val loss, mtp1_loss = one process's" \
            $? "exit $rc: $(tail -n 3 "$tmp/mtp-np2-ep2.log"); $(paste -d' ' "$tmp/one-mtp/train.csv" "$tmp/mtp-np2-ep2/train.csv" | head -n 4)"
        "$moe" export --ckpt "$tmp/one-mtp/ckpt.bin" --out "$tmp/one-mtp.st" > /dev/null &&
            "$moe" export --ckpt "$tmp/mtp-np2-ep2/ckpt.bin" --out "$tmp/mtp-ep2.st" > /dev/null 2>&1
        same_weights "$tmp/one-mtp.st" "$tmp/mtp-ep2.st" > "$tmp/wcmp-mtp.txt"
        ok=$?
        check "[$coll] mtp: the checkpoint at dist.ep=2 holds every weight of the module's experts too = one process's (to 1e-5: $(cat "$tmp/wcmp-mtp.txt"))" \
            $ok "floats, differing, max difference: $(cat "$tmp/wcmp-mtp.txt")"
        awk -F, -v C=32 -v El=2 -v P=2 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $2 == 2 { mtp++; want = 2 * C * 4 * ($c["rows_out_remote"] + $c["rows_in_remote"]) + 2 * El * 4 * (P - 1)
                      if ($c["bytes_sent"] != want || $c["bytes_recv"] != want) bad++ }
            $2 == -1 { if (!($3 in sent)) sent[$3] = $c["bytes_sent"]; else if ($c["bytes_sent"] != sent[$3]) bad++ }
            END { exit !(mtp == 6 * 2 && bad == 0) }' "$tmp/mtp-np2-ep2/dist.csv"
        check "[$coll] mtp: dist.csv has the module block's rows (layer 2) by the cost model, and layer -1's bytes the same every step" \
            $? "$(grep -E '^[0-9]+,(-1|2),' "$tmp/mtp-np2-ep2/dist.csv" | head -n 8)"
    fi

    # tok_per_s counts the whole batch (every process's tokens): the steps' times, B T / tok_per_s,
    # fit inside the run's wall time (counting one process's share would make them 4 x too long)
    wall=$(sed -n 's/^done: .*, \([0-9.]*\) s; run directory.*/\1/p' "$tmp/aux-np4-ep4.log")
    awk -F, -v wall="$wall" 'NR > 1 { t += 4 * 32 / $7 } END { exit !(wall > 0 && t <= wall * 1.05 + 0.05) }' \
        "$tmp/aux-np4-ep4/train.csv"
    check "[$coll] tok_per_s counts the whole batch: the steps' times fit in the run's ${wall:-?} s" $? \
        "$(cut -d, -f7 "$tmp/aux-np4-ep4/train.csv" | tr '\n' ' ')"

    # aux-free: the biases after each step come from every process's loads: the same as one's
    awk -F, 'NR == FNR { a[FNR] = $0; next } { split(a[FNR], x, ","); for (i = 11; i <= 14; i++) {
               d = $i - x[i]; if (d * d > 1e-12) bad++ } } END { exit bad > 0 }' \
        "$tmp/one-aux_free/router.csv" "$tmp/aux_free-np4-ep4/router.csv"
    check "[$coll] aux_free: router.csv biases at dist.ep=4 = one process's" $? \
        "$(paste -d' ' "$tmp/one-aux_free/router.csv" "$tmp/aux_free-np4-ep4/router.csv" | sed -n 2,3p)"

    # ---- 2. dist.csv and the cost model ----------------------------------------------------
    echo "$test_name: traffic"
    d="$tmp/aux-np4-ep2/dist.csv"
    # 6 steps x 4 processes x (2 MoE blocks + layer -1) rows; the bytes of each MoE row are the
    # cost model's: C = 32, El = 2 experts per member of P = 2
    awk -F, -v C=32 -v El=2 -v P=2 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        { rows++ } $2 >= 0 { want = 2 * C * 4 * ($c["rows_out_remote"] + $c["rows_in_remote"]) + 2 * El * 4 * (P - 1)
          if ($c["bytes_sent"] != want || $c["bytes_recv"] != want) bad++
          out += $c["rows_out_remote"]; inn += $c["rows_in_remote"]; if ($c["rows_out_remote"] > 0) moved++ }
        END { exit !(rows == 6 * 4 * 3 && bad == 0 && out == inn && moved > 0) }' "$d"
    check "[$coll] dist.csv: 72 rows; bytes sent and received = 2 C 4 (rows out + rows in) + 2 El 4 (P - 1), rows out = rows in over the group" \
        $? "$(head -n 5 "$d")"

    # the gradients' sums: what process 0 sent a step (dist.csv's grad_sent, every step the
    # same) is what the planner counts for this config over 4 processes, byte for byte
    planned=$("$moe" plan --config "$tmp/aux-np4-ep2/config.txt" --cluster laptop --gpus 4 --json 2>&1 |
              sed -n 's/.*"grad_sent": *\([0-9]*\).*/\1/p' | head -n 1)
    awk -F, -v want="$planned" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $2 == -1 && $3 == 0 { n++; if ($c["grad_sent"] != want) bad++ }
        END { exit !(want > 0 && n == 6 && bad == 0) }' "$d"
    check "[$coll] dist.csv: process 0's gradient sums, ${planned:-?} bytes a step = moe plan --config's count" \
        $? "$(grep -E '^[0-9]+,-1,0,' "$d" | head -n 3)"

    # group-limited routing (moe.n_group=2, moe.topk_group=1: a token's two experts from one
    # group of two, and at dist.ep=2 a group is one process's experts): one process's curve;
    # its recorded routing keeps every token in one group; and each process's rows_out_remote
    # in dist.csv is, step by step and block by block, 2 x its tokens whose group the other
    # process holds, counted from that recording (rank r trains tokens [64 r, 64 r + 64) of
    # the 128): so in the run over two processes too, each token's rows went to one process.
    # The exchange sends a row per (token, expert), so the bytes stay 2 C 4 a row
    gsets=(--set moe.score=sigmoid --set moe.balance=aux_free --set moe.bias_rate=0.05
           --set moe.n_group=2 --set moe.topk_group=1)
    rm -f "$tmp/groups.route"
    run one-groups 1 "${gsets[@]}" --record-routing "$tmp/groups.route"
    check "[$coll] groups: one process trains and records its routing" $? \
        "$(tail -n 3 "$tmp/one-groups.log")"
    run groups-np2-ep2 2 --set dist.ep=2 "${gsets[@]}"
    rc=$?
    same_curves "$tmp/one-groups" "$tmp/groups-np2-ep2"
    check "[$coll] groups: 2 processes, dist.ep=2: every step's loss, aux, z, grad norm, val loss = one process's" \
        $? "exit $rc: $(tail -n 3 "$tmp/groups-np2-ep2.log")"
    od -An -v -t d4 -j 32 "$tmp/groups.route" | tr -s ' ' '\n' | sed '/^$/d' |
        awk -v N=128 -v K=2 '{ i = NR - 1; call = int(i / (N * K)); n = int((i % (N * K)) / K)
                                r = int(n / 64); key = (int(call / 2) + 1) "," (call % 2) "," r
                                if (int($1 / 2) != r) remote[key]++
                                if (i % K == 0) first = $1; else if (int(first / 2) != int($1 / 2)) split_ = 1 }
                              END { if (split_ || NR != 6 * 2 * N * K) exit 1
                                    for (k in remote) print k "," remote[k] }' > "$tmp/groups.want"
    recorded=$?
    awk -F, 'NR == FNR { want[$1 "," $2 "," $3] = $4; next }
             FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             $2 >= 0 { rows++; k = $1 "," $2 "," $3; if ($c["rows_out_remote"] != want[k] + 0) bad++
                       if ($c["rows_out_remote"] > 0) moved++ }
             END { exit !(rows == 6 * 2 * 2 && bad == 0 && moved > 0) }' \
        "$tmp/groups.want" "$tmp/groups-np2-ep2/dist.csv"
    [ $? -eq 0 ] && [ $recorded -eq 0 ]
    check "[$coll] groups: every token's experts in one group, and each process's remote rows (dist.csv) = 2 x its tokens routed to the other's group" \
        $? "$(head -n 4 "$tmp/groups.want") / $(sed -n 2,4p "$tmp/groups-np2-ep2/dist.csv")"
    awk -F, -v C=32 -v El=2 -v P=2 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $2 >= 0 { want = 2 * C * 4 * ($c["rows_out_remote"] + $c["rows_in_remote"]) + 2 * El * 4 * (P - 1)
                  if ($c["bytes_sent"] != want || $c["bytes_recv"] != want) bad++ }
        END { exit bad > 0 }' "$tmp/groups-np2-ep2/dist.csv"
    check "[$coll] groups: dist.csv bytes = 2 C 4 (rows out + rows in) + 2 El 4 (P - 1), a row per (token, expert)" \
        $? "$(head -n 5 "$tmp/groups-np2-ep2/dist.csv")"
    # dist.dispatch=tokens, checked with teach alone (its plans and pairs travel through the same
    # dist_alltoallv_f under either engine): a token goes once to the process holding its group
    # and comes back as its experts' weighted sum: the one-process curve again, each process's remote rows
    # half the rows arm's (one per token), and the bytes of ep.h's formula: rows out and back,
    # forward and backward, plus 2 Km floats a row out (each assignment's expert and weight) and
    # Km back (the weights' gradients), Km = 2, plus one count per peer
    if uses teach; then
        run groups-tokens 2 --set dist.ep=2 --set dist.dispatch=tokens "${gsets[@]}"
        rc=$?
        same_curves "$tmp/one-groups" "$tmp/groups-tokens"
        check "[$coll] groups, dist.dispatch=tokens: every step's loss, aux, z, grad norm, val loss = one process's" \
            $? "exit $rc: $(tail -n 3 "$tmp/groups-tokens.log")"
        awk -F, -v C=32 -v Km=2 -v P=2 'NR == FNR { want[$1 "," $2 "," $3] = $4 / 2; next }
                 FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                 $2 >= 0 { rows++; k = $1 "," $2 "," $3; o = $c["rows_out_remote"]; n = $c["rows_in_remote"]
                           if (o != want[k] + 0) bad++
                           if ($c["bytes_sent"] != 2 * C * 4 * (o + n) + 4 * (2 * Km * o + Km * n) + 4 * (P - 1)) bad++
                           if ($c["bytes_recv"] != 2 * C * 4 * (o + n) + 4 * (2 * Km * n + Km * o) + 4 * (P - 1)) bad++
                           sent += $c["bytes_sent"] }
                 END { exit !(rows == 6 * 2 * 2 && bad == 0 && sent > 0) }' \
            "$tmp/groups.want" "$tmp/groups-tokens/dist.csv"
        check "[$coll] groups, dist.dispatch=tokens: remote rows (dist.csv) = 1 x each token routed to the other's group, bytes = 2 C 4 (out + in) + 4 (2 Km out + Km in) + 4 (P - 1)" \
            $? "$(sed -n 2,4p "$tmp/groups-tokens/dist.csv")"
        awk -F, 'FNR == 1 { f++; next } $2 >= 0 { b[f] += $4 } END { exit !(b[2] > 0 && b[2] < 0.6 * b[1]) }' \
            "$tmp/groups-np2-ep2/dist.csv" "$tmp/groups-tokens/dist.csv"
        check "[$coll] groups: dist.dispatch=tokens sends under 0.6 x the bytes of a row per (token, expert)" \
            $? "$(awk -F, 'FNR == 1 { f++; next } $2 >= 0 { b[f] += $4 } END { print b[1], b[2] }' "$tmp/groups-np2-ep2/dist.csv" "$tmp/groups-tokens/dist.csv")"
    fi

    # ---- 3. checkpoints independent of the process count ----------------------------------
    echo "$test_name: checkpoints"
    run ck4 4 --set dist.ep=4 --until 3
    "$moe" train --resume "$tmp/ck4" --set dist.ep=1 --quiet > "$tmp/ck4-resume.log" 2>&1
    rc=$?
    same_curves "$tmp/one-aux" "$tmp/ck4"
    check "[$coll] saved at dist.ep=4 (step 3), resumed in one process to step 6: the one-process curve" \
        $? "exit $rc: $(tail -n 2 "$tmp/ck4-resume.log")"
    run ck1 1 --until 3
    timeout -k 10 120 mpirun -np 2 "$moe" train --resume "$tmp/ck1" --set dist.ep=2 --quiet \
        > "$tmp/ck1-resume.log" 2>&1
    rc=$?
    same_curves "$tmp/one-aux" "$tmp/ck1"
    check "[$coll] saved in one process (step 3), resumed at dist.ep=2: the one-process curve" \
        $? "exit $rc: $(tail -n 2 "$tmp/ck1-resume.log")"
    one=$("$moe" eval --ckpt "$tmp/one-aux/ckpt.bin" | awk '{ print $2 }')
    four=$("$moe" eval --ckpt "$tmp/aux-np4-ep4/ckpt.bin" --set dist.ep=1 | awk '{ print $2 }')
    awk -v a="$one" -v b="$four" 'BEGIN { d = a - b; exit !(a > 0 && d * d < 1e-10) }'
    check "[$coll] the dist.ep=4 checkpoint evaluates in one process to the one-process loss ($four, $one)" \
        $? "different"

    # ---- 4. bad input and failures ----------------------------------------------------------
    echo "$test_name: bad input and failures"
    err=$(timeout -k 10 60 mpirun -np 4 "$moe" train --out "$tmp/bad1" "${tiny[@]}" --set dist.ep=3 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "dist.ep=3" <<< "$err" && [ ! -e "$tmp/bad1" ]
    check "[$coll] dist.ep=3 over 4 processes: non-zero exit, a message naming dist.ep, nothing written" \
        $? "exit $rc: $(head -n 3 <<< "$err")"
    err=$(timeout -k 10 60 mpirun -np 3 "$moe" train --out "$tmp/bad2" "${tiny[@]}" 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "train.batch=4" <<< "$err" && [ ! -e "$tmp/bad2" ]
    check "[$coll] train.batch=4 over 3 processes: non-zero exit, a message naming train.batch" \
        $? "exit $rc: $(head -n 3 <<< "$err")"

    long=(--set train.steps=100000 --set train.warmup=2 --set train.eval_every=0
          --set dist.collectives="$coll")
    # a process killed mid-run: mpirun ends the job
    start=$(date +%s)
    timeout -k 10 90 mpirun -np 2 "$moe" train --out "$tmp/kill" "${tiny[@]}" "${long[@]}" --set dist.ep=2 \
        --set train.ckpt_every=2 > "$tmp/kill.log" 2>&1 &
    job=$!
    for _ in $(seq 100); do [ -s "$tmp/kill/ckpt.bin" ] && break; sleep 0.2; done
    victim=$(pgrep -f "^$moe train --out $tmp/kill" | tail -n 1)
    [ -n "$victim" ] && kill -9 "$victim"
    wait "$job"
    rc=$?
    took=$(($(date +%s) - start))
    [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 30 ]
    check "[$coll] a killed process ends the job: exit $rc after ${took} s" $? "$(tail -n 5 "$tmp/kill.log")"
    # and the run resumes from its last checkpoint
    at=$("$moe" info --ckpt "$tmp/kill/ckpt.bin" 2>/dev/null | awk '/^step / { print $2 }')
    timeout -k 10 90 mpirun -np 2 "$moe" train --resume "$tmp/kill" --until $((at + 2)) --quiet \
        > "$tmp/kill-resume.log" 2>&1
    rc=$?
    last=$(awk -F, 'END { print $1 }' "$tmp/kill/train.csv")
    [ -n "$at" ] && [ $rc -eq 0 ] && [ "$last" = $((at + 2)) ]
    check "[$coll] the killed run resumes from its checkpoint (step ${at:-?}) to step $((${at:-0} + 2))" $? \
        "exit $rc, last row $last: $(tail -n 3 "$tmp/kill-resume.log")"
    # SIGINT to one process: every process stops after the same step, which the checkpoint
    # (the only one, at train.ckpt_every=0) and train.csv's last row both hold
    timeout -k 10 90 mpirun -np 2 "$moe" train --resume "$tmp/kill" --set train.ckpt_every=0 \
        > "$tmp/int.log" 2>&1 &
    job=$!
    for _ in $(seq 100); do
        [ "$(awk -F, 'END { print $1 + 0 }' "$tmp/kill/train.csv")" -ge $((${at:-0} + 6)) ] && break
        sleep 0.1
    done
    victim=$(pgrep -f "^$moe train --resume $tmp/kill" | tail -n 1)
    [ -n "$victim" ] && kill -INT "$victim"
    wait "$job"
    rc=$?
    stopped=$("$moe" info --ckpt "$tmp/kill/ckpt.bin" 2>/dev/null | awk '/^step / { print $2 }')
    last=$(awk -F, 'END { print $1 }' "$tmp/kill/train.csv")
    [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$stopped" = "$last" ] &&
        [ "$stopped" -gt $((${at:-0} + 2)) ] &&
        grep -q "stopped by SIGINT after step $stopped .*mpirun -np 2 moe train --resume $tmp/kill" "$tmp/int.log"
    check "[$coll] SIGINT to one process stops all after step ${stopped:-?}, with a checkpoint of it" $? \
        "exit $rc, checkpoint ${stopped:-?}, last row $last: $(tail -n 5 "$tmp/int.log")"
    # a process that stops answering: the others name it after dist.timeout. Over 4 processes
    # the ranks that wait for rank 0 (which waits for the stopped one) must not blame rank 0:
    # every message names the stopped rank (read from its environment, as mpirun numbered it),
    # one names it alone (the first to give up waits on it directly; a later one may also name a
    # peer that was itself waiting for it), and the stopped rank, continued by mpirun as it ends
    # the job, blames nobody for its own silence
    start=$(date +%s)
    timeout -k 10 90 mpirun -np 4 "$moe" train --out "$tmp/hang" "${tiny[@]}" "${long[@]}" --set dist.ep=4 \
        --set dist.timeout=3 > "$tmp/hang.log" 2>&1 &
    job=$!
    for _ in $(seq 50); do [ -s "$tmp/hang/train.csv" ] && break; sleep 0.2; done
    victim=$(pgrep -f "^$moe train --out $tmp/hang" | tail -n 1)
    vrank=$(tr '\0' '\n' < "/proc/$victim/environ" 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$victim" ] && kill -STOP "$victim"
    wait "$job"
    rc=$?
    took=$(($(date +%s) - start))
    [ -n "$victim" ] && kill -9 "$victim" 2> /dev/null
    if [ "$coll" = teach ]; then
        named=$(grep "no answer from rank" "$tmp/hang.log")
        [ -n "$vrank" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 30 ] && [ -n "$named" ] &&
            awk -v v="$vrank" '{ if ($2 == "rank" && $3 == v ":") bad++
                                 s = $0; sub(/.*no answer from rank\(s\) /, "", s); sub(/ \(world.*/, "", s)
                                 n = split(s, r, ", "); hit = 0
                                 for (i = 1; i <= n; i++) if (r[i] == v) hit = 1
                                 if (!hit) bad++; if (n == 1 && hit) alone++ }
                               END { exit !(bad == 0 && alone > 0) }' <<< "$named"
        check "[$coll] 4 processes, rank ${vrank:-?} stopped: every message names it, one alone ('no answer from rank(s) ${vrank:-?}'), not itself; the job ends: exit $rc after ${took} s" \
            $? "$(tail -n 5 "$tmp/hang.log")"
    else # MPI's collectives cannot say which rank is silent: they name the collective and its group
        [ -n "$vrank" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 30 ] &&
            grep -qE "moe: rank [0-9]: the [a-z_]+ over the (world|expert-parallel group) \(world ranks 0, 1, 2, 3\) did not complete" "$tmp/hang.log"
        check "[$coll] 4 processes, rank ${vrank:-?} stopped: the others name the collective and its group; the job ends: exit $rc after ${took} s" \
            $? "$(tail -n 5 "$tmp/hang.log")"
    fi

done

if uses teach; then
    # ---- 5. teach repeats bit for bit ------------------------------------------------------------
    echo "$test_name: repeats"
    tmp=$top/teach
    coll=teach
    run again 4 --set dist.ep=2
    cmp -s "$tmp/aux-np4-ep2/ckpt.bin" "$tmp/again/ckpt.bin" &&
        cmp -s <(cut -d, -f1-6,8 "$tmp/aux-np4-ep2/train.csv") <(cut -d, -f1-6,8 "$tmp/again/train.csv") &&
        cmp -s "$tmp/aux-np4-ep2/router.csv" "$tmp/again/router.csv"
    check "[teach] the same run twice at dist.ep=2 x 2: the same checkpoint, train.csv and router.csv, bit for bit" \
        $? "$(cmp "$tmp/aux-np4-ep2/ckpt.bin" "$tmp/again/ckpt.bin" 2>&1)"
fi

if uses mpi; then
    # ---- 6. MPI's collectives over 1 to 8 processes, 30 steps ------------------------------------
    # The whole batch of 8 sequences over 1, 2 (dist.ep=2), 4 (2 x 2) and 8 processes (4 x 2, more
    # processes than cores): every step's losses and every weight after 30 steps within 1e-5 of
    # the one-process run
    echo "$test_name: 30 steps over 1, 2, 4 and 8 processes"
    tmp=$top/mpi
    coll=mpi
    # (at the default learning rate: at the 1e-2 of the 6-step runs, Adam turns summation-order
    # differences in a gradient near 0 into 1.1e-5 on one weight by step 30, with either engine)
    thirty=(--set train.batch=8 --set train.steps=30 --set train.eval_every=10 --set train.lr=3e-3)
    run t-one 1 "${thirty[@]}"
    "$moe" export --ckpt "$tmp/t-one/ckpt.bin" --out "$tmp/t-one.st" > /dev/null 2>&1
    for grid in "2 2" "4 2" "8 4"; do
        read -r np ep <<< "$grid"
        name=t-np$np-ep$ep
        run "$name" "$np" "${thirty[@]}" --set dist.ep="$ep"
        rc=$?
        "$moe" export --ckpt "$tmp/$name/ckpt.bin" --out "$tmp/$name.st" > /dev/null 2>&1
        paste <(floats "$tmp/t-one.st") <(floats "$tmp/$name.st") |
            awk '{ n++; d = $1 - $2; d = d < 0 ? -d : d; if (d > 1e-5) bad++; if (d > mx) mx = d }
                 END { print n, bad + 0, mx; exit !(n > 40000 && bad == 0) }' > "$tmp/w.txt" &&
            same_curves "$tmp/t-one" "$tmp/$name"
        ok=$?
        check "[mpi] $np processes, dist.ep=$ep x $((np / ep)), 30 steps: every step's losses and every weight = one process's (to 1e-5: $(cat "$tmp/w.txt"))" \
            $ok "exit $rc: $(tail -n 3 "$tmp/$name.log"); floats, differing, max: $(cat "$tmp/w.txt")"
    done
fi

# ---- 7. the gradients' sums in buckets, overlapped with the backward -------------------------
# Two micro-batches a step (only the last one's backward may start the sums): overlap and
# buckets on (the defaults) against every tensor summed alone after the backward, and a small
# bucket in between. teach: the same bits; mpi: the same losses and weights within 1e-5.
echo "$test_name: buckets and overlap"
data_of() { safetensors_data "$1" | od -An -v -tx1; }
for coll in $engines; do
    tmp=$top/$coll
    for form in "on|--set dist.overlap=1 --set dist.bucket_mb=25" \
                "off|--set dist.overlap=0 --set dist.bucket_mb=0" \
                "small|--set dist.overlap=1 --set dist.bucket_mb=0.002"; do
        IFS='|' read -r fname fsets <<< "$form"
        # shellcheck disable=SC2086 # fsets is a list of options
        run "ov-$fname" 4 --set dist.ep=2 --set train.accum=2 $fsets
        "$moe" export --ckpt "$tmp/ov-$fname/ckpt.bin" --out "$tmp/ov-$fname.st" > /dev/null 2>&1
    done
    for fname in off small; do
        if [ "$coll" = teach ]; then
            cmp -s <(data_of "$tmp/ov-on.st") <(data_of "$tmp/ov-$fname.st") &&
                cmp -s <(cut -d, -f1-6,8 "$tmp/ov-on/train.csv") <(cut -d, -f1-6,8 "$tmp/ov-$fname/train.csv")
            ok=$?
        else
            paste <(floats "$tmp/ov-on.st") <(floats "$tmp/ov-$fname.st") |
                awk '{ n++; d = $1 - $2; d = d < 0 ? -d : d; if (d > 1e-5) bad++ }
                     END { exit !(n > 40000 && bad == 0) }' &&
                same_curves "$tmp/ov-on" "$tmp/ov-$fname"
            ok=$?
        fi
        check "[$coll] overlapped buckets of 25 MiB against $fname: the same $([ "$coll" = teach ] && echo "bits" || echo "losses and weights to 1e-5")" \
            $ok "$(tail -n 2 "$tmp/ov-$fname.log")"
    done
    # dist.csv: sync_wait_s, the wait after the backward, in the layer -1 rows only
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { w = $c["sync_wait_s"]; if (w == "" || w < 0 || ($2 >= 0 && w != 0)) bad++
               if ($2 == -1) minus++ }
             END { exit !("sync_wait_s" in c && bad == 0 && minus == 6 * 4) }' "$tmp/ov-on/dist.csv"
    check "[$coll] dist.csv: sync_wait_s in every step's layer -1 row, 0 in the MoE rows" $? \
        "$(head -n 3 "$tmp/ov-on/dist.csv")"
done

if uses teach; then
    # ---- 8. host staging: a backend whose memory the host cannot read -----------------------------
    # train.device=cpu-fenced runs cpu's ops on memory the host may touch only through
    # to_host / to_device, as a GPU's: across processes the expert exchange, the gradients' sums,
    # the aux loss's counts and the checkpoint's gather go through host copies. The same runs as
    # on cpu, bit for bit (teach), in four routing modes (aux-free with dist.dispatch=tokens,
    # whose plans are built on the host), and a resume.
    echo "$test_name: host staging (cpu-fenced across processes)"
    tmp=$top/teach
    coll=teach
    for variant in "aux|" "aux_free-tokens|--set moe.balance=aux_free --set moe.bias_rate=0.05 --set dist.dispatch=tokens" \
                   "capacity|--set moe.capacity_factor=1 --set moe.capacity_scope=sequence --set moe.padded=1" \
                   "dense|--set moe.num_experts=0"; do
        IFS='|' read -r vname vsets <<< "$variant"
        ep=2
        [ "$vname" = dense ] && ep=1
        # shellcheck disable=SC2086 # vsets is a list of options
        run "st-cpu-$vname" 4 --set dist.ep=$ep $vsets &&
            run "st-fenced-$vname" 4 --set dist.ep=$ep --set train.device=cpu-fenced $vsets
        rc=$?
        "$moe" export --ckpt "$tmp/st-cpu-$vname/ckpt.bin" --out "$tmp/st-cpu-$vname.st" > /dev/null 2>&1
        "$moe" export --ckpt "$tmp/st-fenced-$vname/ckpt.bin" --out "$tmp/st-fenced-$vname.st" > /dev/null 2>&1
        [ $rc -eq 0 ] && cmp -s <(data_of "$tmp/st-cpu-$vname.st") <(data_of "$tmp/st-fenced-$vname.st") &&
            cmp -s <(cut -d, -f1-6,8 "$tmp/st-cpu-$vname/train.csv") <(cut -d, -f1-6,8 "$tmp/st-fenced-$vname/train.csv") &&
            cmp -s "$tmp/st-cpu-$vname/router.csv" "$tmp/st-fenced-$vname/router.csv"
        check "[teach] $vname: 4 processes (dist.ep=$ep) on cpu-fenced = on cpu, bit for bit (weights, train.csv, router.csv)" \
            $? "exit $rc: $(tail -n 2 "$tmp/st-fenced-$vname.log")"
    done
    run st-fenced-half 4 --set dist.ep=2 --set train.device=cpu-fenced --until 3 &&
        timeout -k 10 120 mpirun -np 4 "$moe" train --resume "$tmp/st-fenced-half" --quiet \
            > "$tmp/st-fenced-half.log" 2>&1
    rc=$?
    cmp -s <(cut -d, -f1-6,8 "$tmp/st-cpu-aux/train.csv") <(cut -d, -f1-6,8 "$tmp/st-fenced-half/train.csv")
    check "[teach] cpu-fenced across 4 processes, saved at step 3 and resumed: the unbroken cpu run" $? \
        "exit $rc: $(tail -n 2 "$tmp/st-fenced-half.log")"
fi

if uses mpi; then
    # ---- 9. processes started with different settings ---------------------------------------------
    # mpirun's multiple-program form starts processes with their own command lines: settings that
    # differ are refused at the start on every rank (exit 2), rank 0 alone naming each key, its
    # values and ranks; train.threads alone may differ
    echo "$test_name: processes started with different settings"
    tmp=$top/mpi
    # mpmd NAME NP_A "SETS_A" NP_B "SETS_B": NP_A processes with SETS_A and NP_B with SETS_B
    mpmd() {
        local name=$1
        # shellcheck disable=SC2086 # SETS_A and SETS_B are lists of options
        timeout -k 10 60 mpirun -np "$2" "$moe" train --out "$tmp/$name" "${tiny[@]}" $3 \
            : -np "$4" "$moe" train --out "$tmp/$name" "${tiny[@]}" $5 > "$tmp/$name.log" 2>&1
    }
    start=$(date +%s)
    mpmd mix-lr 1 "--set train.lr=0.003" 1 "--set train.lr=0.01"
    rc=$?
    took=$(($(date +%s) - start))
    [ $rc -eq 2 ] && [ "$took" -lt 20 ] && [ ! -e "$tmp/mix-lr" ] &&
        [ "$(grep -c "^error: " "$tmp/mix-lr.log")" = 1 ] &&
        grep -q "train.lr is 0.003 on rank 0 and 0.01 on rank 1" "$tmp/mix-lr.log"
    check "train.lr=0.003 on rank 0, 0.01 on rank 1: exit 2 after ${took} s, one message naming both, nothing written" \
        $? "exit $rc: $(grep -v '^-' "$tmp/mix-lr.log" | head -n 3)"
    mpmd mix-shape 3 "--set dist.ep=2" 1 "--set dist.ep=1 --set model.d_model=64"
    rc=$?
    [ $rc -eq 2 ] && [ ! -e "$tmp/mix-shape" ] && [ "$(grep -c "^error: " "$tmp/mix-shape.log")" = 1 ] &&
        grep -q "model.d_model is 32 on ranks 0, 1, 2 and 64 on rank 3; dist.ep is 2 on ranks 0, 1, 2 and 1 on rank 3" \
            "$tmp/mix-shape.log"
    check "model.d_model and dist.ep differing on rank 3 of 4: exit 2, both keys named with their ranks" \
        $? "exit $rc: $(grep -v '^-' "$tmp/mix-shape.log" | head -n 3)"
    mpmd mix-threads 1 "--set train.threads=1 --set train.steps=2" 1 "--set train.threads=2 --set train.steps=2"
    check "train.threads=1 on rank 0, 2 on rank 1: trains" $? "$(tail -n 3 "$tmp/mix-threads.log")"
fi

finish
