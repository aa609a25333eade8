#!/usr/bin/env bash
# Chapter 3: a model that does not fit one process's memory budget, trained over four
# processes under tensor parallelism and sharded states, each layout's memory and bytes beside
# what moe plan predicts for it.
#
#   bash chapters/03-expert-parallel/layouts.sh           # the handbook's numbers
#   bash chapters/03-expert-parallel/layouts.sh --smoke   # a tiny model, 4 steps (the test)
#   MOE_BUILD=build/mpi bash chapters/03-expert-parallel/layouts.sh
#
# The model: an MoE of 8 experts with a shared expert, a dense first block, grouped-query heads
# and an 8192-token vocabulary (16.4 million parameters), on synthetic data (moe synth --vocab). The budget: train.memory_gib,
# a process's memory as moe train checks it against the engine's table of one process before
# anything is allocated. One process trains the model without a budget (the reference curve);
# then every layout trains with the budget, over one process or four (mpirun -np 4):
#   one         1 process                       tp4            dist.tp=4
#   dp4         4 replicas (dist.zero=0)        tp2-zero1      dist.tp=2 x 2 replicas, dist.zero=1
#   dp4-zero1   4 replicas, dist.zero=1         tp2-zero3      the same, dist.zero=3
#   dp4-zero3   4 replicas, dist.zero=3         tp2-ep2-zero1  dist.tp=2 x dist.ep=2, dist.zero=1
#   tp2         dist.tp=2, 2 replicas
# Writes, in plots/03-expert-parallel[-smoke]/layouts/:
#   layouts.csv    layout,processes,tp,ep,zero,planned_mib,table_mib,peak_mib,peak_all_mib,status,
#                  max_loss_rel,grad_sent,planned_grad_sent,weight_sent,planned_weight_sent,
#                  tp_sent,planned_tp_sent,step_s: the planner's memory a process (moe plan
#                  --config, the moe.c engine), the engine's table of its largest process and
#                  the largest peak resident memory of its processes (MiB), trained or refused
#                  by the budget, the largest relative difference of a step's loss from the
#                  reference's, the bytes process 0 sent a step in the gradients' sums, the
#                  weights' gathers and the tensor-parallel collectives (dist.csv) beside the
#                  planner's count of each, and the median step
#   layouts.md     the same as a table, with the budget
#   provenance.txt the trained runs' commits, machine and threads (chapters/lib.sh), and MPI
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=chapters/lib.sh
. chapters/lib.sh
out=plots/03-expert-parallel/layouts
runs=runs/ch03-layouts
model=(--set model.d_model=256 --set model.n_layer=4 --set model.n_head=8 --set model.kv_heads=4
       --set model.d_ff=1024 --set model.seq_len=128 --set model.vocab=8192
       --set moe.num_experts=8 --set moe.top_k=2 --set moe.d_expert=512 --set moe.num_shared=1
       --set moe.first_dense=1 --set moe.balance=aux_free --set train.batch=8)
steps=20
budget=0.185
case ${1:-} in
    --smoke)
        out=plots/03-expert-parallel-smoke/layouts
        runs=runs/ch03-layouts-smoke
        model=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=4 --set model.kv_heads=4
               --set model.d_ff=64 --set model.seq_len=16 --set model.vocab=512
               --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32 --set moe.num_shared=1
               --set moe.first_dense=1 --set moe.balance=aux_free --set train.batch=4)
        steps=4
        budget=0.001 ;;
    "") ;;
    *) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac
build=${MOE_BUILD:-build/mpi}
moe=$build/moe
if [ -z "${MOE_BUILD:-}" ]; then make --no-print-directory MPI=1 "$moe" > /dev/null; fi
[ -x "$moe" ] || { echo "$0: no $moe: make mpi first" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "$0: no mpirun: make deps" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cores=$(getconf _NPROCESSORS_ONLN)
rm -rf "$runs"
mkdir -p "$runs" "$out"
"$moe" synth --out "$runs/data" --tokens 200000 --vocab "$(sed -n 's/.*model.vocab=\([0-9]*\).*/\1/p' <<< "${model[*]}")" \
    --seed 5 > /dev/null
sets=("${model[@]}" --set "data.train=$runs/data/train.bin" --set "data.val=$runs/data/val.bin"
      --set train.steps=$steps --set train.warmup=2 --set train.eval_every=0 --set train.threads=1
      --set train.lr=3e-3)

# planned NAME NP: the planner's JSON for the settings in $runs/NAME.cfg over NP processes
planned() { "$moe" plan --config "$runs/$1.cfg" --cluster laptop --gpus "$2" --json; }
# measured NAME: the trained run's table_mib,peak_mib,peak_all_mib from its log
measured() {
    echo "$(sed -n "s/.*the engine's table of a process \([0-9.]*\) MiB.*/\1/p" "$runs/$1.log"),$(
          sed -n 's/^memory: .*the largest over [0-9]* process[es]* \([0-9.]*\) MiB).*/\1/p' "$runs/$1.log"),$(
          sed -n 's/^memory: .*with the start and the checkpoints .*(the largest \([0-9.]*\) MiB).*/\1/p' "$runs/$1.log")"
}
# sent DIR COLUMN: what process 0 sent a step in dist.csv's COLUMN (0 without a dist.csv)
sent() {
    [ -s "$1/dist.csv" ] || { echo 0; return; }
    awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                         $2 == -1 && $3 == 0 { v = $c[col] } END { print v + 0 }' "$1/dist.csv"
}

csv=$out/layouts.csv
echo "layout,processes,tp,ep,zero,planned_mib,table_mib,peak_mib,peak_all_mib,status,max_loss_rel,grad_sent,planned_grad_sent,weight_sent,planned_weight_sent,tp_sent,planned_tp_sent,step_s" > "$csv"

# the reference: one process, no budget
"$moe" train --out "$runs/reference" "${sets[@]}" > "$runs/reference.log"
printf '%s\n' "${sets[@]}" | grep -v '^--set$' > "$runs/reference.cfg"
ref_mib=$(planned reference 1 | field mem_total | awk '{ printf "%.2f", $1 / 1048576 }')
trained=("reference=$runs/reference") # the runs provenance.txt gathers
echo "reference,1,1,1,0,$ref_mib,$(measured reference),trained without a budget,0,0,0,0,0,0,0,$(step_s "$runs/reference")" >> "$csv"

for layout in "one|1|1|1|0" "dp4|4|1|1|0" "dp4-zero1|4|1|1|1" "dp4-zero3|4|1|1|3" \
              "tp2|4|2|1|0" "tp4|4|4|1|0" "tp2-zero1|4|2|1|1" "tp2-zero3|4|2|1|3" \
              "tp2-ep2-zero1|4|2|2|1"; do
    IFS='|' read -r name np tp ep zero <<< "$layout"
    grid=(--set dist.tp=$tp --set dist.ep=$ep --set dist.zero=$zero)
    dir=$runs/$name
    echo "== $name: $np process(es), dist.tp=$tp, dist.ep=$ep, dist.zero=$zero" >&2
    printf '%s\n' "${sets[@]}" "${grid[@]}" | grep -v '^--set$' > "$runs/$name.cfg"
    json=$(planned "$name" "$np")
    plan_mib=$(field mem_total <<< "$json" | awk '{ printf "%.2f", $1 / 1048576 }')
    pg=$(field grad_sent <<< "$json"); pw=$(field weight_sent <<< "$json"); pt=$(field tp_sent <<< "$json")
    launch=()
    [ "$np" -gt 1 ] && launch=(mpirun --bind-to none -np "$np")
    if "${launch[@]}" "$moe" train --out "$dir" "${sets[@]}" "${grid[@]}" \
            --set train.memory_gib=$budget > "$runs/$name.log" 2>&1; then
        trained+=("$name=$dir")
        row="$(measured "$name"),trained,$(loss_rel "$dir"),$(sent "$dir" grad_sent),$pg,$(sent "$dir" weight_sent),$pw,$(sent "$dir" tp_sent),$pt,$(step_s "$dir")"
    else
        grep -q "more than train.memory_gib=$budget " "$runs/$name.log" ||
            { echo "$0: $name failed other than by the budget:" >&2; tail -n 5 "$runs/$name.log" >&2; exit 1; }
        need=$(sed -n 's/.*the model needs \([0-9.]*\) MiB a process.*/\1/p' "$runs/$name.log" | head -n 1)
        row="$need,,,refused,,,$pg,,$pw,,$pt,"
    fi
    echo "$name,$np,$tp,$ep,$zero,$plan_mib,$row" >> "$csv"
done

{
    echo "| layout | processes | tp x ep x replicas | dist.zero | planned (MiB) | engine's table (MiB) | peak resident, steps (MiB) | whole command (MiB) | under the budget | loss vs one process | bytes a step: gradients, weights, tensor parallel | moe plan's count |"
    echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { grid = $c["tp"] " x " $c["ep"] " x " $c["processes"] / ($c["tp"] * $c["ep"])
               bytes = ""; same = ""
               if ($c["status"] == "trained" && $1 != "reference") {
                   bytes = $c["grad_sent"] ", " $c["weight_sent"] ", " $c["tp_sent"]
                   same = "DIFFERS"
                   if ($c["grad_sent"] == $c["planned_grad_sent"] && $c["weight_sent"] == $c["planned_weight_sent"] &&
                       $c["tp_sent"] == $c["planned_tp_sent"]) same = "the same"
               }
               printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $c["processes"],
                      grid, $c["zero"], $c["planned_mib"], $c["table_mib"], $c["peak_mib"],
                      $c["peak_all_mib"], $c["status"], $c["max_loss_rel"], bytes, same }' "$csv"
    echo
    echo "train.memory_gib=$budget ($(awk -v b=$budget 'BEGIN { printf "%.1f", b * 1024 }') MiB) a process; $steps steps; the memory columns are a process's: the planner's (moe plan --config, the moe.c engine), the engine's table of its largest process, and the largest peak resident memory over the processes during the steps (the table plus the program, its libraries, MPI's buffers and the ops' scratch) and over the whole command (the start draws the whole model's weights before each process keeps its share; a checkpoint gathers whole tensors). Loss: the largest relative difference of a step's loss from one process's without a budget. Bytes: what process 0 sent a step (dist.csv's grad_sent, weight_sent, tp_sent), and whether moe plan --config counts the same. $cores cores shared by the processes; layouts.csv has every column."
} > "$out/layouts.md"

write_provenance "$out" "${trained[@]}"
echo "mpi = $(mpirun --version 2> /dev/null | head -n 1)" >> "$out/provenance.txt"
cat "$out/layouts.md"
echo "wrote $out/: layouts.csv layouts.md provenance.txt"
