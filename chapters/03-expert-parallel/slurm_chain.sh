# slurm_chain.sh: what the two batch jobs of chapter 3 share (slurm.sbatch on CPUs,
# slurm-gpu.sbatch on GPUs), sourced by them from the repository: a long run as a chain of
# jobs, each inside its time limit.
#
#   chain_plan   where the run in RUN_DIR stands (the step of its checkpoint), and this job's
#                moe train arguments in ARGS: a new run to UNTIL, or --resume to UNTIL with
#                dist.ep=EP (the checkpoint does not depend on the process count, so a job
#                on fewer nodes, after one was lost, continues it as well). Exits 0 when the
#                run is done, 2 when the checkpoint cannot be read.
#   chain_next   after a clean exit, submits SCRIPT again for the next piece (RESUBMIT=1), on
#                the same geometry; a failed job stops the chain, to be looked at and submitted
#                again.
# Reads MOE, RUN_DIR, EP, STEPS, STEPS_PER_JOB, CKPT_EVERY, EXTRA (a list of --set options
# for a new run), NTASKS, and CHAIN_NAME (the job's name in its messages).

chain_plan() {
    step=0
    if [ -f "$RUN_DIR/ckpt.bin" ]; then
        step=$("$MOE" info --ckpt "$RUN_DIR/ckpt.bin" | awk '$1 == "step" { print $2; exit }')
        if [ -z "$step" ]; then
            echo "$CHAIN_NAME: $MOE info cannot read $RUN_DIR/ckpt.bin; see its message above" >&2
            exit 2
        fi
    fi
    if [ "$step" -ge "$STEPS" ]; then
        echo "$CHAIN_NAME: $RUN_DIR is at step $step of $STEPS: nothing to do"
        exit 0
    fi
    UNTIL=$((step + STEPS_PER_JOB))
    [ "$UNTIL" -le "$STEPS" ] || UNTIL=$STEPS
    if [ "$step" -gt 0 ]; then
        # The checkpoint holds every setting; dist.ep may differ from the job that wrote it.
        ARGS=(train --resume "$RUN_DIR" --until "$UNTIL" --set "dist.ep=$EP")
    else
        # shellcheck disable=SC2206 # EXTRA is a list of options
        ARGS=(train --out "$RUN_DIR" --until "$UNTIL" --set "train.steps=$STEPS"
              --set "train.ckpt_every=$CKPT_EVERY" --set "dist.ep=$EP" $EXTRA)
    fi
    echo "$CHAIN_NAME: job ${SLURM_JOB_ID:-?}: $NTASKS processes, dist.ep=$EP x $((NTASKS / EP))" \
         "data-parallel, steps $step -> $UNTIL of $STEPS in $RUN_DIR"
}

# chain_next SCRIPT [SBATCH OPTIONS]: the next job, with this one's nodes and tasks per node
# (and the given options); its sbatch runs without this job's SLURM_* variables, which would
# otherwise leak into the next job's srun.
chain_next() {
    local script=$1
    shift
    [ "$UNTIL" -lt "$STEPS" ] && [ "${RESUBMIT:-1}" = 1 ] || return 0
    local nodes=${SLURM_JOB_NUM_NODES:-1}
    local geometry=(--nodes="$nodes"
                    --ntasks-per-node="${SLURM_NTASKS_PER_NODE:-$((NTASKS / nodes))}" "$@")
    # SITE: some clusters forbid sbatch inside a job; then set RESUBMIT=0 and chain the jobs
    # up front: sbatch --dependency=afterok:JOBID SCRIPT
    (
        for v in $(compgen -v SLURM_); do unset "$v"; done
        sbatch "${geometry[@]}" "$script"
    )
}
