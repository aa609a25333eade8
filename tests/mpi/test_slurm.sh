#!/usr/bin/env bash
# test_slurm.sh: chapter 3's batch jobs (slurm.sbatch on CPUs, slurm-gpu.sbatch on GPUs) and
# the hostfile recipe, on this machine, with Slurm's two commands stood in for (run by
# `make test` with MOE_BIN=build/mpi/moe; needs mpirun).
#
# A stand-in srun starts the job's tasks with mpirun (-np SLURM_NTASKS, Slurm's options
# dropped) and a stand-in sbatch records the next job instead of queueing it; the job runs with
# the SLURM_* variables an allocation of 1 node x 2 tasks would set. The GPU job runs
# train.device=cpu-fenced (the host-unreadable stand-in for a GPU, through the same host
# staging) with the CPU build.
#
#   1. each job trains its slice (--until), checkpoints, and submits the next piece with its
#      geometry; the next job resumes to the end and submits nothing; the chained run equals
#      an unbroken one bit for bit (dist.collectives=teach)
#   2. a lost node: a job whose task is killed fails and submits nothing; the job submitted
#      again on what is left (1 task, dist.ep=1) resumes from the last checkpoint to the end
#   3. the hostfile recipe of the handbook: mpirun --hostfile with 2 slots on this host
#   4. a geometry that does not fit (EP=3 over 2 tasks) exits 2 with what to change
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
moe=$(cd "$(dirname "$moe")" && pwd)/$(basename "$moe")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OMP_NUM_THREADS=1

# the stand-ins
mkdir -p "$tmp/bin"
cat > "$tmp/bin/srun" << 'EOF'
#!/usr/bin/env bash
# srun OPTIONS... PROGRAM ARGS...: the job's tasks through mpirun; Slurm's options dropped,
# recorded in SRUN_LOG with the NCCL settings the tasks inherit
opts=
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do opts="$opts $1"; shift; done
echo "$opts | $(env | grep '^NCCL_' | sort | tr '\n' ' ')" >> "${SRUN_LOG:-/dev/null}"
exec mpirun -np "${SLURM_NTASKS:-1}" "$@"
EOF
cat > "$tmp/bin/sbatch" << 'EOF'
#!/usr/bin/env bash
# sbatch ARGS...: recorded, not queued; what the next job would inherit is recorded too
echo "$* | SLURM_JOB_ID=${SLURM_JOB_ID:-unset}" >> "$SBATCH_LOG"
EOF
chmod +x "$tmp/bin/srun" "$tmp/bin/sbatch"
export PATH=$tmp/bin:$PATH SBATCH_LOG=$tmp/sbatch.log

"$moe" synth --out "$tmp/data" --tokens 60000 --seed 3 > /dev/null
tiny="--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set train.warmup=2 --set train.eval_every=0
      --set dist.collectives=teach --set data.train=$tmp/data/train.bin
      --set data.val=$tmp/data/val.bin"
tiny=$(echo $tiny) # one line: the jobs split EXTRA on blanks

# job SCRIPT RUN_DIR [VAR=VALUE...]: the batch script in an allocation of 1 node x 2 tasks
job() {
    local script=$1 run=$2
    shift 2
    env SLURM_JOB_ID=$((RANDOM + 1)) SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NUM_NODES=1 \
        SLURM_CPUS_PER_TASK=1 SLURM_SUBMIT_DIR="$root" MOE="$moe" RUN_DIR="$run" EP=2 \
        STEPS=6 STEPS_PER_JOB=3 CKPT_EVERY=1 EXTRA="$tiny" DEVICE=cpu-fenced PRECISION=fp32 \
        COLLECTIVES=mpi SRUN_LOG="$tmp/srun-$script.log" \
        "$@" timeout -k 10 120 bash "$root/chapters/03-expert-parallel/$script"
}
no_speed() { cut -d, -f1-6,8 "$1"; }

# the unbroken run both jobs must give
# shellcheck disable=SC2086 # tiny is a list of options
timeout -k 10 120 mpirun -np 2 "$moe" train --out "$tmp/ref" $tiny --set train.steps=6 \
    --set train.ckpt_every=1 --set dist.ep=2 --quiet > "$tmp/ref.log" 2>&1
check "the unbroken run: 6 steps over 2 processes" $? "$(tail -n 3 "$tmp/ref.log")"

# ---- 1. a chain of two jobs ----------------------------------------------------------------
for script in slurm.sbatch slurm-gpu.sbatch; do
    echo "test_slurm: $script"
    run="$tmp/run-$script"
    : > "$SBATCH_LOG"
    job "$script" "$run" > "$tmp/job1.log" 2>&1
    rc=$?
    last=$(awk -F, 'END { print $1 }' "$run/train.csv" 2> /dev/null)
    [ $rc -eq 0 ] && [ "$last" = 3 ] && grep -q -- "--nodes=1 --ntasks-per-node=2 .*chapters/03-expert-parallel/$script | SLURM_JOB_ID=unset" "$SBATCH_LOG"
    check "$script: the first job trains to step 3 and submits the next piece (1 node x 2 tasks, no SLURM_* inherited)" \
        $? "exit $rc, last step ${last:-none}: $(tail -n 3 "$tmp/job1.log"); sbatch: $(cat "$SBATCH_LOG")"
    : > "$SBATCH_LOG"
    job "$script" "$run" > "$tmp/job2.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ ! -s "$SBATCH_LOG" ] && grep -q "resumed" "$tmp/job2.log" &&
        cmp -s <(no_speed "$tmp/ref/train.csv") <(no_speed "$run/train.csv")
    check "$script: the second job resumes to step 6, submits nothing, and the run is the unbroken one bit for bit" \
        $? "exit $rc: $(tail -n 3 "$tmp/job2.log"); $(diff <(no_speed "$tmp/ref/train.csv") <(no_speed "$run/train.csv") | head -n 4)"
    job "$script" "$run" > "$tmp/job3.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q "nothing to do" "$tmp/job3.log"
    check "$script: a job on a finished run does nothing" $? "exit $rc: $(tail -n 2 "$tmp/job3.log")"
done
grep -q '^train.device = cpu-fenced$' "$tmp/run-slurm-gpu.sbatch/config.txt"
check "slurm-gpu.sbatch: the run's device is the one it was given (cpu-fenced standing in for cuda)" \
    $? "$(grep device "$tmp/run-slurm-gpu.sbatch/config.txt")"
# one task per GPU, each seeing all of its node's GPUs (NCCL reaches its peers through NVLink
# only where it sees them) and taking the one of its local rank; NCCL told its network
srun_line=$(head -n 1 "$tmp/srun-slurm-gpu.sbatch.log" 2> /dev/null)
[[ $srun_line == *" --ntasks-per-node=2 "* ]] && [[ $srun_line == *" --gpus-per-node=2 "* ]] &&
    [[ $srun_line == *" --gpu-bind=none "* ]] && [[ $srun_line != *--gpus-per-task* ]] &&
    [[ $srun_line == *"NCCL_DEBUG=WARN "* ]] && [[ $srun_line == *"NCCL_SOCKET_IFNAME="* ]]
check "slurm-gpu.sbatch: srun starts a task per GPU and shows each all of its node's GPUs, with NCCL's network settings" \
    $? "srun${srun_line:-: not run}"

# ---- 2. a lost node ------------------------------------------------------------------------
echo "test_slurm: a lost node"
run="$tmp/lost"
: > "$SBATCH_LOG"
job slurm-gpu.sbatch "$run" STEPS=100000 STEPS_PER_JOB=100000 > "$tmp/lost1.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$run/ckpt.bin" ] && break; sleep 0.2; done
sleep 0.5
victim=$(pgrep -f "^$moe train --out $run" | tail -n 1)
[ -n "$victim" ] && kill -9 "$victim"
wait "$pid"
rc=$?
at=$("$moe" info --ckpt "$run/ckpt.bin" 2> /dev/null | awk '$1 == "step" { print $2 }')
[ -n "$victim" ] && [ $rc -ne 0 ] && [ ! -s "$SBATCH_LOG" ] && [ -n "$at" ]
check "a task killed mid-run: the job fails (exit $rc) at a checkpoint of step ${at:-?} and submits nothing" $? \
    "$(tail -n 3 "$tmp/lost1.log")"
# submitted again on what is left: one task, one process's grid
env SLURM_NTASKS=1 SLURM_NTASKS_PER_NODE=1 EP=1 SLURM_SUBMIT_DIR="$root" MOE="$moe" RUN_DIR="$run" \
    STEPS=$((at + 3)) STEPS_PER_JOB=100 CKPT_EVERY=1 timeout -k 10 120 \
    bash "$root/chapters/03-expert-parallel/slurm-gpu.sbatch" > "$tmp/lost2.log" 2>&1
rc=$?
last=$(awk -F, 'END { print $1 }' "$run/train.csv")
[ $rc -eq 0 ] && [ "$last" = $((at + 3)) ] && grep -q "1 processes, dist.ep=1" "$tmp/lost2.log"
check "submitted again on 1 task (dist.ep=1), it resumes from step $at to $((at + 3))" $? \
    "exit $rc, last step $last: $(tail -n 3 "$tmp/lost2.log")"

# ---- 3. the hostfile recipe --------------------------------------------------------------------
echo "test_slurm: mpirun with a hostfile"
echo "localhost slots=2" > "$tmp/hosts"
# shellcheck disable=SC2086
timeout -k 10 120 mpirun -np 2 --hostfile "$tmp/hosts" --map-by ppr:2:node --bind-to none \
    -x OMP_NUM_THREADS=1 "$moe" train --out "$tmp/hostfile" $tiny --set train.steps=6 \
    --set train.ckpt_every=1 --set dist.ep=2 --quiet > "$tmp/hostfile.log" 2>&1
rc=$?
[ $rc -eq 0 ] && cmp -s <(no_speed "$tmp/ref/train.csv") <(no_speed "$tmp/hostfile/train.csv")
check "mpirun --hostfile (2 slots, ppr:2:node): the unbroken run bit for bit" $? \
    "exit $rc: $(tail -n 3 "$tmp/hostfile.log")"

# ---- 4. a geometry that does not fit -----------------------------------------------------------
job slurm-gpu.sbatch "$tmp/bad" EP=3 > "$tmp/bad.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "EP=3 does not divide the 2 tasks" "$tmp/bad.log" && [ ! -e "$tmp/bad" ]
check "EP=3 over 2 tasks: exit 2, saying what to change, nothing written" $? "exit $rc: $(cat "$tmp/bad.log")"

finish
