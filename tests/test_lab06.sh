#!/usr/bin/env bash
# test_lab06.sh: the grader of labs/06-latent-attention (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 4 of 4")
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task3_absorbed_scores grades that task alone, TASK=task4_cache_size on the starter
#      fails that task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task alone: the latent's norm without its
#      gain (task1_latent_kv), head h's key rows of Wkv_b taken at h * nope_dim
#      (task2_absorb_query), the scores scaled by 1 / sqrt(kv_rank + rope_dim), the cached
#      row's width, instead of the full key's (task3_absorbed_scores), GQA's cache counted with
#      every query head, and the bytes multiplied in 32 bits (task4_cache_size)
#   5. a student file that calls the engine's matmul_forward is refused, naming the function
#   6. make -C labs list names the lab and its four tasks
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against. The submissions that try to pass
# without the work (lab_cheat_checks) attack the graders' common code, which lab 01's suite
# (and lab 02's in make test-slow) runs them against for every lab that forks its tasks, as this
# one does.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
lab=06-latent-attention
solution=labs/$lab/solution/latent_lab.c
tasks="task1_latent_kv task2_absorb_query task3_absorbed_scores task4_cache_size"
functions="lab_latent_kv_forward lab_absorb_query lab_absorbed_scores lab_cache_floats"
single_task=task3_absorbed_scores
starter_task=task4_cache_size
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

# the latent's norm without its gain: latn = rmsnorm(lat), not rmsnorm(lat) * g
if mutant no_gain 's/latn\[(size_t)n \* KR + r\] = ln\[r\] \* rstd \* g\[r\];/latn[(size_t)n * KR + r] = ln[r] * rstd;/'; then
    grade grade SOLUTION="$tmp/no_gain.c"
    only_fails task1_latent_kv && grep -q "did you leave out the gain g?" <<< "$out"
    check "a latent norm without its gain fails task1_latent_kv alone, naming the gain" $? \
        "exit $rc: $out"
fi

# head h's key rows taken at row h * nope_dim, as if Wkv_b held the heads' keys alone
if mutant head_rows 's/Wkv_b + (size_t)h \* KVB \* KR;/Wkv_b + (size_t)h * NOPE * KR;/'; then
    grade grade SOLUTION="$tmp/head_rows.c"
    only_fails task2_absorb_query &&
        grep -q "head 1's key rows of Wkv_b are rows 3 and 4" <<< "$out"
    check "a head's key rows taken at h * nope_dim fail task2_absorb_query alone" $? \
        "exit $rc: $out"
fi

# the scores scaled by the cached row's width, 1 / sqrt(kv_rank + rope_dim)
if mutant row_scale 's|1.0 / sqrt((double)(d->nope_dim + R))|1.0 / sqrt((double)W)|'; then
    grade grade SOLUTION="$tmp/row_scale.c"
    only_fails task3_absorbed_scores && grep -Eq '^  FAIL  task3_absorbed_scores .*0/3 checks pass$' <<< "$out" &&
        grep -q "the scale is the full key's, D = nope_dim + rope_dim" <<< "$out"
    check "scores scaled by 1 / sqrt(kv_rank + rope_dim) fail task3_absorbed_scores alone" $? \
        "exit $rc: $out"
fi

# GQA's cache counted with every query head
if mutant gqa_heads 's/2LL \* s->kv_heads \* s->head_dim/2LL * s->n_head * s->head_dim/'; then
    grade grade SOLUTION="$tmp/gqa_heads.c"
    only_fails task4_cache_size && grep -q "only the key-value heads are cached" <<< "$out"
    check "GQA counted with n_head fails task4_cache_size alone" $? "exit $rc: $out"
fi

# the bytes multiplied in 32 bits (unsigned, so that the sanitizers see no overflow): 2^31
# fits, DeepSeek-V2's 9e9 bytes wrap
if mutant bytes_32 's/return lab_cache_floats(s) \* (long long)n_layer \* tokens \* (long long)elem_bytes;/return (unsigned)lab_cache_floats(s) * (unsigned)n_layer * (unsigned)tokens * (unsigned)elem_bytes;/'; then
    grade grade SOLUTION="$tmp/bytes_32.c"
    only_fails task4_cache_size && grep -q "576 \* 60 \* 131072 \* 2 (multiply in 64 bits)" <<< "$out"
    check "cache bytes multiplied in 32 bits fail task4_cache_size alone, on DeepSeek-V2's" $? \
        "exit $rc: $out"
fi

# a file that projects with the engine's matmul
cp "$solution" "$tmp/engine.c"
cat >> "$tmp/engine.c" << 'C'
void matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT);
void lab_engine_linear(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    matmul_forward(y, x, W, N, IN, OUT);
}
C
refused matmul_forward

lab_list_check
lab_finish
