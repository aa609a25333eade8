#!/usr/bin/env bash
# Chapter 11: every layout moe plan ranks for a model that does not fit one process's memory
# budget, run over 8 processes and set beside what the planner predicted; and a pipeline's
# bubble and timeline, measured.
#
#   bash chapters/11-parallelism/ablate.sh           # the handbook's numbers (about 10 minutes)
#   bash chapters/11-parallelism/ablate.sh --quick   # fewer steps
#   bash chapters/11-parallelism/ablate.sh --smoke   # a tiny model over 4 processes (the test)
#   ... --summarize                                  # the tables and figures from the runs there
#
# The model: an MoE of 8 experts with a shared expert, a dense first block, grouped-query heads,
# 4 blocks and a 4096-token vocabulary, on synthetic data; 8 sequences of 64 tokens a
# micro-batch, 4 micro-batches a step (train.accum). The budget: train.memory_gib, a process's
# memory as moe train checks it against the engine's table before anything is allocated, and
# the same bytes as moe plan's cluster.memory_gb. One process trains without a budget (the
# reference curve; its table exceeds the budget). Then, for each dist.zero from 0 to 3,
# `moe plan --config --search` ranks every layout of 8 processes (tensor, pipeline, expert and
# data parallel), and every ranked layout trains under the budget with mpirun -np 8: those the
# planner says fit must train, the others must be refused by moe train's own check.
# Then the pipeline alone, over 2 processes (a core each): dist.pp=2 under GPipe and 1F1B with
# 1, 2, 4 and 8 micro-batches, the bubble each stage measured (pipe.csv) against (P - 1) /
# (M + P - 1), and the timeline of 4 micro-batches under each schedule.
# Writes, in plots/11-parallelism[-quick|-smoke]/:
#   ranked.csv   layout,zero,rank,tp,pp,ep,dp,planned_fits,planned_mib,table_mib,peak_mib,status,
#                max_loss_rel_5,max_loss_rel,grad_sent,weight_sent,tp_sent,pp_sent,planned_grad_sent,
#                planned_weight_sent,planned_tp_sent,planned_pp_sent,bubble_planned,
#                bubble_measured,step_s,planned_step_s: the planner's verdict and memory a
#                process, the engine's table of its largest process and the largest peak
#                resident memory over the processes (MiB), trained or refused, the largest
#                relative difference of a step's loss from the reference's over the first 5
#                steps and over all, the bytes process 0
#                sent a step (dist.csv) beside the planner's count of each, the bubble ((P - 1) /
#                (M + P - 1) and measured), the median step and the planner's step on its laptop
#                cluster
#   ranked.md    the same as a table, and a summary line: how many layouts were ranked, fit,
#                trained and refused, on how many the planner and the engine agree, the
#                largest loss difference, how many trained with the planner's bytes and memory
#   bubble.csv   run,schedule,micro_batches,planned,measured,predicted (the schedule simulated
#                with the stages' own measured forward and backward times: pipeline --run),held (the micro-batches stage 0 holds at
#                once),table_mib (the engine's allocation of the largest process) and bubble.png
#   timeline.csv schedule,stage,op,micro,start_s,end_s (a step of 4 micro-batches) and
#                timeline.png
#   pipeline.txt the chapter's program (pipeline.c): 4 stages' schedules simulated on equal
#                stages and with a slow last one, and the 4-micro-batch runs' stages against
#                their schedule simulated with their own measured times
#   provenance.txt the runs' commits, machine and threads (chapters/lib.sh), and MPI
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=chapters/lib.sh
. chapters/lib.sh
mode=full suffix="" summarize=0
for arg in "$@"; do
    case $arg in
        --quick) mode=quick suffix=-quick ;;
        --smoke) mode=smoke suffix=-smoke ;;
        --summarize) summarize=1 ;;
        *) echo "usage: $0 [--quick | --smoke] [--summarize]" >&2; exit 2 ;;
    esac
done
out=plots/11-parallelism$suffix
runs=runs/ch11$suffix
model=(--set model.d_model=128 --set model.n_layer=4 --set model.n_head=8 --set model.kv_heads=4
       --set model.d_ff=512 --set model.seq_len=64 --set model.vocab=4096
       --set moe.num_experts=8 --set moe.top_k=2 --set moe.d_expert=256 --set moe.num_shared=1
       --set moe.first_dense=1 --set moe.balance=aux_free --set train.batch=8 --set train.accum=4)
np=8 steps=20 budget_mib=40 zeros="0 1 2 3" micro="1 2 4 8" bubble_steps=12
if [ "$mode" = quick ]; then steps=8 bubble_steps=6; fi
if [ "$mode" = smoke ]; then
    model=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=4 --set model.kv_heads=2
           --set model.d_ff=64 --set model.seq_len=16 --set model.vocab=512
           --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32 --set moe.num_shared=1
           --set moe.first_dense=1 --set moe.balance=aux_free --set train.batch=4 --set train.accum=2)
    np=4 steps=3 budget_mib=0.75 zeros="1" micro="1 4" bubble_steps=3
fi
build=${MOE_BUILD:-build/mpi}
moe=${MOE_BIN:-$build/moe}
if [ -z "${MOE_BIN:-}" ]; then make --no-print-directory MPI=1 "$moe" > /dev/null; fi
[ -x "$moe" ] || { echo "$0: no $moe: make mpi first" >&2; exit 2; }
prog=$build/chapters/11-parallelism/pipeline # the chapter's program (pipeline.c)
if [ -z "${MOE_BUILD:-}" ]; then make --no-print-directory MPI=1 "$prog" > /dev/null; fi
[ -x "$prog" ] || { echo "$0: no $prog: make mpi first" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "$0: no mpirun: make deps" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cores=$(getconf _NPROCESSORS_ONLN)
budget_gib=$(awk -v m="$budget_mib" 'BEGIN { printf "%.10g", m / 1024 }')
budget_gb=$(awk -v m="$budget_mib" 'BEGIN { printf "%.10g", m * 1048576 / 1e9 }')
if [ "$summarize" = 0 ]; then
    rm -rf "$runs"
    mkdir -p "$runs" "$out"
    "$moe" synth --out "$runs/data" --tokens 200000 --seed 5 \
        --vocab "$(sed -n 's/.*model.vocab=\([0-9]*\).*/\1/p' <<< "${model[*]}")" > /dev/null
fi
sets=("${model[@]}" --set "data.train=$runs/data/train.bin" --set "data.val=$runs/data/val.bin"
      --set train.warmup=2 --set train.eval_every=0 --set train.threads=1 --set train.lr=3e-3)
printf '%s\n' "${model[@]}" | grep -v '^--set$' > "$runs/model.cfg"
accum=$(sed -n 's/.*train.accum=\([0-9]*\).*/\1/p' <<< "${model[*]}") # the micro-batches a step

# measured NAME: the trained run's table_mib (the banner's bytes of the largest process, the
# engine's allocation), peak_mib from its log
measured() {
    echo "$(sed -n "s/.* holds \([0-9]*\) bytes, memory.h's formula .*/\1/p" "$runs/$1.log" |
            awk '{ printf "%.3f", $1 / 1048576 }'),$(
          sed -n 's/^memory: .*the largest over [0-9]* process[es]* \([0-9.]*\) MiB).*/\1/p' "$runs/$1.log")"
}
# sent DIR: what process 0 sent a step (dist.csv's grad_sent,weight_sent,tp_sent,pp_sent)
sent() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             $2 == -1 && $3 == 0 { v = $c["grad_sent"] "," $c["weight_sent"] "," $c["tp_sent"] "," $c["pp_sent"] }
             END { print v }' "$1/dist.csv"
}
# bubble DIR: the idle share of a step, each stage's span less its actions over the span, the
# mean over the stages and the steps after the second (pipe.csv); 0 without a pipeline
bubble() {
    [ -s "$1/pipe.csv" ] || { echo 0; return; }
    awk -F, 'NR > 1 && $1 > 2 { k = $1 "," $2; busy[k] += $7 - $6; span[k] = $8 }
             END { for (k in span) { s += 1 - busy[k] / span[k]; n++ } printf "%.3f", n ? s / n : 0 }' \
        "$1/pipe.csv"
}

# ---- the reference, and every ranked layout --------------------------------------------------
csv=$out/ranked.csv
# the microbatches of the timeline: 4 (or the most there are)
tm=$(tr ' ' '\n' <<< "$micro" | awk '$1 <= 4' | tail -n 1)
train_all() {
"$moe" train --out "$runs/reference" "${sets[@]}" --set train.steps="$steps" --quiet > "$runs/reference.log"
echo "layout,zero,rank,tp,pp,ep,dp,planned_fits,planned_mib,table_mib,peak_mib,status,max_loss_rel_5,max_loss_rel,grad_sent,weight_sent,tp_sent,pp_sent,planned_grad_sent,planned_weight_sent,planned_tp_sent,planned_pp_sent,bubble_planned,bubble_measured,step_s,planned_step_s" > "$csv"
for zero in $zeros; do
    "$moe" plan --config "$runs/model.cfg" --cluster laptop --gpus "$np" --set train.zero="$zero" \
        --set cluster.memory_gb="$budget_gb" --search --top 100 --csv > "$runs/search-zero$zero.csv"
    while IFS=, read -r rank tp pp ep dp fits mem step; do
        name=zero$zero-tp$tp-pp$pp-ep$ep
        grid=(--set dist.tp="$tp" --set dist.pp="$pp" --set dist.ep="$ep" --set dist.zero="$zero")
        echo "== $name (rank $rank at dist.zero=$zero; the planner: fits $fits)" >&2
        json=$("$moe" plan --config "$runs/model.cfg" --cluster laptop --gpus "$np" \
               --set train.zero="$zero" --set layout.tp="$tp" --set layout.pp="$pp" \
               --set layout.ep="$ep" --json)
        planned_sent="$(field grad_sent <<< "$json"),$(field weight_sent <<< "$json"),$(field tp_sent <<< "$json"),$(field pp_sent <<< "$json")"
        plan_bubble=$(awk -v p="$pp" -v m="$accum" 'BEGIN { printf "%.3f", (p - 1) / (m + p - 1) }')
        mib=$(field mem_total <<< "$json" | awk '{ printf "%.3f", $1 / 1048576 }')
        if mpirun --bind-to none -np "$np" "$moe" train --out "$runs/$name" "${sets[@]}" "${grid[@]}" \
                --set train.steps="$steps" --set train.memory_gib="$budget_gib" < /dev/null \
                > "$runs/$name.log" 2>&1; then
            row="$(measured "$name"),trained,$(loss_rel "$runs/$name" 5),$(loss_rel "$runs/$name"),$(sent "$runs/$name"),$planned_sent,$plan_bubble,$(bubble "$runs/$name"),$(step_s "$runs/$name")"
        else
            grep -q "more than train.memory_gib=" "$runs/$name.log" ||
                { echo "$0: $name failed other than by the budget:" >&2; tail -n 5 "$runs/$name.log" >&2; exit 1; }
            need=$(sed -n 's/.*the model needs \([0-9.]*\) MiB a process.*/\1/p' "$runs/$name.log" | head -n 1)
            row="$need,,refused,,,,,,,$planned_sent,$plan_bubble,,"
        fi
        echo "$name,$zero,$rank,$tp,$pp,$ep,$dp,$fits,$mib,$row,$step" >> "$csv"
    done < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                      { print NR - 1 "," $c["tp"] "," $c["pp"] "," $c["ep"] "," $c["dp"] "," $c["fits"] "," $c["mem_total_gb"] "," $c["step_s"] }' \
                 "$runs/search-zero$zero.csv")
done

# predicted DIR: the bubble the run's schedule leaves on its stages' own mean forward and
# backward (pipe.csv, the steps after the second), simulated by the chapter's program
predicted() { "$prog" --run "$1" | sed -n 's/.*mean idle share \([0-9.]*\);.*/\1/p'; }

# ---- the bubble of a pipeline of 2 stages -------------------------------------------------------
echo "run,schedule,micro_batches,planned,measured,predicted,held,table_mib" > "$out/bubble.csv"
for sched in gpipe 1f1b; do
    for m in $micro; do
        name=bubble-$sched-m$m
        mpirun --bind-to none -np 2 "$moe" train --out "$runs/$name" "${sets[@]}" \
            --set train.accum="$m" --set train.batch=4 --set dist.pp=2 --set dist.pp_schedule="$sched" \
            --set train.steps="$bubble_steps" > "$runs/$name.log" 2>&1
        held=$("$moe" train "${sets[@]}" --set train.accum="$m" --set dist.pp=2 \
               --set dist.pp_schedule="$sched" --print-schedule | sed -n 's/^  stage 0 .*holds \([0-9]*\) micro.*/\1/p')
        echo "$sched-m$m,$sched,$m,$(awk -v m="$m" 'BEGIN { printf "%.3f", 1 / (m + 1) }'),$(bubble "$runs/$name"),$(predicted "$runs/$name"),$held,$(measured "$name" | cut -d, -f1)" >> "$out/bubble.csv"
    done
done
# the timeline of the last step of $tm micro-batches under each schedule
echo "schedule,stage,op,micro,start_s,end_s" > "$out/timeline.csv"
for sched in gpipe 1f1b; do
    awk -F, -v s="$sched" -v last="$bubble_steps" 'NR > 1 && $1 == last { print s "," $2 "," $4 "," $5 "," $6 "," $7 }' \
        "$runs/bubble-$sched-m$tm/pipe.csv" >> "$out/timeline.csv"
done
}
[ "$summarize" = 1 ] || train_all
[ -s "$csv" ] && [ -s "$out/bubble.csv" ] || { echo "$0: no runs in $runs: run it without --summarize" >&2; exit 2; }
ref_mib=$("$moe" plan --config "$runs/reference/config.txt" --cluster laptop --gpus 1 --json |
          field mem_total | awk '{ printf "%.2f", $1 / 1048576 }')
trained=()
for dir in "$runs"/*/; do [ -s "$dir/train.csv" ] && trained+=("$(basename "$dir")=${dir%/}"); done

# ---- tables and figures ------------------------------------------------------------------------
{
    echo "| layout | dist.zero | rank | tp x pp x ep x dp | the planner: fits, MiB | engine's table (MiB) | peak resident (MiB) | under the budget | loss vs one process: 5 steps, all | bytes a step: gradients, weights, tp, pp | moe plan's count | bubble: planned, measured | step (s) |"
    echo "| --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: | --- | --- | --- | ---: |"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { grid = $c["tp"] " x " $c["pp"] " x " $c["ep"] " x " $c["dp"]
               bytes = ""; same = ""; bub = $c["bubble_planned"]
               if ($c["status"] == "trained") {
                   bytes = $c["grad_sent"] ", " $c["weight_sent"] ", " $c["tp_sent"] ", " $c["pp_sent"]
                   same = ($c["grad_sent"] == $c["planned_grad_sent"] && $c["weight_sent"] == $c["planned_weight_sent"] &&
                           $c["tp_sent"] == $c["planned_tp_sent"] && $c["pp_sent"] == $c["planned_pp_sent"]) ? "the same" : "DIFFERS"
                   bub = bub ", " $c["bubble_measured"]
               }
               printf "| %s | %s | %s | %s | %s, %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $c["zero"], $c["rank"], grid,
                      $c["planned_fits"] ? "yes" : "no", $c["planned_mib"], $c["table_mib"], $c["peak_mib"],
                      $c["status"], $c["max_loss_rel_5"] ($c["status"] == "trained" ? ", " : "") $c["max_loss_rel"], bytes, same, bub, $c["step_s"] }' "$csv"
    echo
    echo "train.memory_gib=$budget_gib ($budget_mib MiB) a process, moe plan's cluster.memory_gb the same bytes; the reference (one process, no budget) needs $ref_mib MiB. $np processes on $cores cores, $steps steps; a layout's rank is moe plan --search's at its dist.zero (fitting layouts first, then by step time on the planner's laptop cluster). Loss: the largest relative difference of a step's loss from one process's, over the first 5 steps and over all (the last digits of other summation orders, and a near-tie's routing flipping, grow over the steps). Bytes: what process 0 sent a step (dist.csv), and whether moe plan --config counts the same. Bubble: (P - 1) / (M + P - 1) for P stages and M = train.accum micro-batches, and the idle share of each stage's step in pipe.csv ($np processes share $cores cores here, so a stage waiting is another stage running: bubble.csv measures it on a core a stage). ranked.csv has every column."
    echo
    echo "| run | schedule | micro-batches | bubble (P - 1) / (M + P - 1) | measured | from the stages' own times | stage 0 holds | largest process (MiB) |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$out/bubble.csv"
    echo
    echo "dist.pp=2 over 2 processes (a core each), $bubble_steps steps; measured: the mean over the stages and the steps after the second of the span less the stage's actions, over the span (pipe.csv); from the stages' own times: the run's schedule simulated with each stage's mean forward and backward (the chapter's program, pipeline --run)."
    echo
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { n++; fit += $c["planned_fits"]; tr = $c["status"] == "trained"; t += tr
               agree += (tr == ($c["planned_fits"] == 1))
               if (tr) { if ($c["max_loss_rel"] > worst) worst = $c["max_loss_rel"]
                         if ($c["max_loss_rel_5"] > worst5) worst5 = $c["max_loss_rel_5"]
                         same += ($c["grad_sent"] == $c["planned_grad_sent"] && $c["weight_sent"] == $c["planned_weight_sent"] &&
                                  $c["tp_sent"] == $c["planned_tp_sent"] && $c["pp_sent"] == $c["planned_pp_sent"])
                         mem += ($c["planned_mib"] == $c["table_mib"])
                         if ($c["pp"] > 1) pipes++ } }
             END { printf "Summary: layouts ranked %d, the planner says fit %d, trained %d, refused %d; ", n, fit, t, n - t
                   printf "the planner and the engine agree on fitting in %d of %d; ", agree, n
                   printf "the largest loss difference from one process %.2g over the first 5 steps, %.2g over all; ", worst5, worst
                   printf "bytes the planner counted in %d of %d; memory the planner gave in %d of %d; pipelines trained %d.\n", same, t, mem, t, pipes }' "$csv"
} > "$out/ranked.md"
if command -v gnuplot > /dev/null; then
    gnuplot -e "csv='$out/bubble.csv'; out='$out/bubble.png'" chapters/11-parallelism/bubble.gp
    gnuplot -e "csv='$out/timeline.csv'; out='$out/timeline.png'; micro='$tm'" chapters/11-parallelism/timeline.gp
fi
# the chapter's program: the schedules simulated, and the 2-stage runs' stages against them
{
    echo "\$ pipeline"
    "$prog"
    for sched in gpipe 1f1b; do
        echo "\$ pipeline --run $runs/bubble-$sched-m$tm"
        "$prog" --run "$runs/bubble-$sched-m$tm"
    done
} > "$out/pipeline.txt"
write_provenance "$out" "${trained[@]}"
echo "mpi = $(mpirun --version 2> /dev/null | head -n 1)" >> "$out/provenance.txt"
cat "$out/ranked.md"
echo "wrote $out/: ranked.csv ranked.md bubble.csv timeline.csv pipeline.txt provenance.txt and the figures"
