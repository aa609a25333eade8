#!/usr/bin/env bash
# test_gpu_scripts.sh: the GPU's device script (tests/gpu/run_device.sh) on a machine without a
# GPU, so that a GPU's short time is not spent finding its mistakes (run by `make test`).
#
#   1. --smoke --list: the smoke's steps, whose time limits sum to at most 480 s (8 minutes,
#      the build included; the sum printed is the sum of the steps listed), and at most 8 files
#      written to OUT; --list: each part of the full check within 480 s too, and every step of
#      the full check in a part
#   2. --smoke where nvidia-smi finds no GPU (a stand-in that fails): exit 2 with a message
#      that says so and what to do, and OUT as it was (an earlier summary untouched)
#   3. a usage mistake (a part that does not exist): exit 2, naming the parts
#   4. the smoke rehearsed (REHEARSE=1, cpu-ref standing in for cuda, on this build's binaries,
#      RD_BUILD): every step of its list reported, passed or skipped; OUT holds summary.txt and
#      logs.tar.gz, at most 8 files; the tarball holds every step's log; the grouped-query and
#      the latent attention runs each report their decoding from the cache equal to the full
#      forward's
#   5. a step that fails (RD_FAIL) runs again once with CUDA_LAUNCH_BLOCKING=1, and the summary
#      and the tarball say so; the status is 1
# Needs bash and awk; 4 and 5 need build/moe and the two op suites (make test builds them).

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
script=tests/gpu/run_device.sh
budget=480

# ---- 1. the plan -------------------------------------------------------------------------------
echo "test_gpu_scripts: the plan (--list)"
# sums FILE: one line per profile of a --list: NAME SUM_OF_STEP_LIMITS PRINTED_TOTAL FILES STEPS...
sums() {
    awk '/^[a-z]+: / { if (p != "") print p, s, t, f, steps; p = $1; sub(/:$/, "", p); s = 0; t = ""; f = ""; steps = "" }
         /^  [a-z0-9-]+ +[0-9]+ s  / { s += $2; steps = steps " " $1 }
         /^  total: / { t = $2 }
         /^  output: / { f = $2 }
         END { if (p != "") print p, s, t, f, steps }' "$1"
}
bash "$script" --smoke --list > "$tmp/smoke.list" 2>&1
rc=$?
read -r name sum total files steps <<< "$(sums "$tmp/smoke.list")"
[ $rc -eq 0 ] && [ "${name:-}" = smoke ] && [ "${sum:-0}" -gt 0 ] && [ "$sum" -le $budget ] &&
    [ "$total" = "$sum" ] && [ "${files:-99}" -le 8 ] && [ "$(sums "$tmp/smoke.list" | wc -l)" = 1 ]
check "--smoke --list: ${sum:-?} s of step limits in all (at most $budget), ${files:-?} files in OUT (at most 8)" $? \
    "exit $rc: $(cat "$tmp/smoke.list")"
for want in build ops grad train-moe train-dense train-gqa train-mla nccl-1proc bench; do
    [[ " $steps " == *" $want "* ]] || bad "--smoke --list: no step $want in: $steps"
done
bash "$script" --list > "$tmp/all.list" 2>&1
sums "$tmp/all.list" > "$tmp/sums"
parts=$(grep -vc -E '^(smoke|all) ' "$tmp/sums")
over=$(awk -v b=$budget '$1 != "all" && ($2 > b || $2 != $3 || $4 > 8)' "$tmp/sums")
[ "$parts" -ge 2 ] && [ -z "$over" ]
check "--list: each of the $parts parts of the full check within $budget s of step limits, at most 8 files" $? \
    "${over:-$(cat "$tmp/all.list")}"
missing=
for s in $(awk '$1 == "all" { for (i = 5; i <= NF; i++) print $i }' "$tmp/sums"); do
    awk -v s="$s" '$1 != "all" && $1 != "smoke" { for (i = 5; i <= NF; i++) if ($i == s) f = 1 } END { exit !f }' \
        "$tmp/sums" || missing="$missing $s"
done
[ -z "$missing" ] && grep -q '^all ' "$tmp/sums"
check "--list: every step of the full check is in one of its parts" $? "not in a part:$missing"

# ---- 2. no GPU -------------------------------------------------------------------------------
echo "test_gpu_scripts: without a GPU"
mkdir -p "$tmp/bin" "$tmp/out"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the driver" >&2\nexit 9\n' \
    > "$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
echo "an earlier summary" > "$tmp/out/summary.txt"
PATH="$tmp/bin:$PATH" bash "$script" --smoke "$tmp/out" > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
[ $rc -eq 2 ] && grep -q "no GPU" "$tmp/stderr" && grep -q "REHEARSE=1" "$tmp/stderr" &&
    [ "$(cat "$tmp/out/summary.txt")" = "an earlier summary" ] && [ "$(ls "$tmp/out")" = summary.txt ]
check "--smoke without a GPU: exit 2, saying so, OUT untouched" $? "exit $rc: $(cat "$tmp/stderr")"

# ---- 3. a usage mistake ------------------------------------------------------------------------
bash "$script" --part nosuch "$tmp/out" > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
[ $rc -eq 2 ] && grep -q "no part nosuch" "$tmp/stderr" && grep -q "smoke\|ops" "$tmp/stderr" &&
    [ "$(ls "$tmp/out")" = summary.txt ]
check "--part nosuch: exit 2, naming the parts" $? "exit $rc: $(cat "$tmp/stderr")"

# ---- 4, 5. the smoke rehearsed ---------------------------------------------------------------
build=${MOE_BUILD:-build}
if [ ! -x "$build/moe" ] || [ ! -x "$build/tests/test_backend_ops" ] || [ ! -x "$build/tests/test_backend_grad" ]; then
    echo "  skip the rehearsal: no $build/moe or $build/tests/test_backend_{ops,grad} (make test builds them)"
    finish
    exit
fi
echo "test_gpu_scripts: the smoke rehearsed (REHEARSE=1, cpu-ref for cuda)"
# rehearse OUT [VAR=VALUE...]: the smoke profile on this build's binaries, each step with ten
# times its limit (cpu-ref stands in for a GPU, under the sanitizers with make test SANITIZE=1,
# on a machine running other suites: the script is under test here, not the speed)
rehearse() {
    local o=$1
    shift
    env REHEARSE=1 RD_BUILD="$build" RD_WORK="$tmp/work" OMP_NUM_THREADS=2 RD_TIME_SCALE=10 "$@" \
        bash "$script" --smoke "$o" > "$tmp/rehearse.out" 2>&1
}
rehearse "$tmp/r"
rc=$?
tar -tzf "$tmp/r/logs.tar.gz" > "$tmp/tarlist" 2> /dev/null
unreported='' nolog=''
for s in $steps; do
    grep -q "^$s: \(pass\|skipped\)" "$tmp/r/summary.txt" 2> /dev/null || unreported="$unreported $s"
    grep -q "^$s: pass" "$tmp/r/summary.txt" 2> /dev/null && ! grep -qx "logs/$s.log" "$tmp/tarlist" &&
        nolog="$nolog $s"
done
n=$(find "$tmp/r" -type f | wc -l)
[ $rc -eq 0 ] && [ "$(ls "$tmp/r" | tr '\n' ' ')" = "logs.tar.gz summary.txt " ] && [ "$n" -le 8 ] &&
    [ -z "$unreported" ] && [ -z "$nolog" ] && grep -q "^train-moe: pass" "$tmp/r/summary.txt"
check "REHEARSE=1 --smoke: every listed step reported, OUT holds summary.txt and logs.tar.gz ($n files), every step's log in it" \
    $? "exit $rc; not reported:${unreported:-} no log:${nolog:-}; $(ls "$tmp/r" | tr '\n' ' '); $(tail -n 12 "$tmp/rehearse.out")"
grep -A1 "^train-gqa: pass" "$tmp/r/summary.txt" | grep -qx "    gqa: decoding on cpu-ref, 100 bytes from the cache equal the full forward's" &&
    grep -A1 "^train-mla: pass" "$tmp/r/summary.txt" | grep -qx "    mla: decoding on cpu-ref, 100 bytes from the cache equal the full forward's" &&
    tar -tzf "$tmp/r/logs.tar.gz" | grep -qx "runs/mla-sample-full.txt"
check "REHEARSE=1 --smoke: grouped-query and latent attention trained against cpu, and decoded from the cache as the full forward does" \
    $? "$(grep -A2 '^train-\(gqa\|mla\)' "$tmp/r/summary.txt" 2> /dev/null)"

rehearse "$tmp/f" ONLY='build|train-moe' RD_FAIL=train-moe
rc=$?
[ $rc -eq 1 ] && grep -q "^train-moe: FAIL" "$tmp/f/summary.txt" &&
    grep -q "rerun with CUDA_LAUNCH_BLOCKING=1.*: pass" "$tmp/f/summary.txt" &&
    tar -tzf "$tmp/f/logs.tar.gz" | grep -qx "logs/train-moe.rerun.log" &&
    grep -q "done: 1 passed, 1 failed" "$tmp/f/summary.txt"
check "a failed step runs again once with CUDA_LAUNCH_BLOCKING=1, its log in the tarball; exit 1" $? \
    "exit $rc: $(tail -n 12 "$tmp/rehearse.out")"

finish
