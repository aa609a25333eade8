#!/usr/bin/env bash
# test_ablations.sh (MPI): chapter 3's ablation and the a2a transcript in their smoke modes, run
# by `make test-mpi` / `make test` with MOE_BIN=build/mpi/moe and MOE_BUILD=build/mpi (the other
# chapters: tests/test_ablations.sh).
#
#   1. chapters/03-expert-parallel/ablate.sh --smoke (6 runs of 6 steps of a tiny model over 1, 2
#      and 4 processes) exits 0; summary.csv has one row per run and process (1 + 2 + 4 per
#      balance), the one-process rows an expert time from their profiled rerun (step_profile)
#      and every multi-process run's bytes (mean over its processes) within 10 % of the cost model
#      of its config;
#      provenance.txt names the 6 runs; time.png, bytes.png and load.png are PNGs
#   2. chapters/transcripts.sh --smoke --only a2a: a2a.txt with its mpirun line and 6 sections
#   3. chapters/03-expert-parallel/collectives.sh --smoke: both engines' sums and exchanges at
#      2 processes, checked and counted (collectives.csv), summary.md, overlap.md, the figure
#   4. chapters/03-expert-parallel/layouts.sh --smoke: a memory budget that one process and 4
#      replicas exceed, and every layout of dist.zero and dist.tp fits: trained to the
#      one-process curve, its memory the planner's, its bytes the planner's count
#   5. chapters/11-parallelism/ablate.sh --smoke: every layout moe plan ranks over 4 processes
#      trained (those it says fit the budget, to the one-process curve, with its memory and
#      bytes) or refused by moe train (the others); a pipeline's bubble and timeline files; and
#      the committed plots/11-parallelism/ the handbook quotes: the same of its 72 layouts, the
#      bubble within 0.1 of its simulation, what GPipe and 1F1B hold
# Writes runs/ch03-*-smoke, runs/ch11-smoke, plots/03-expert-parallel-smoke/ and
# plots/11-parallelism-smoke/ (ignored by git).

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build/mpi}
if ! command -v gnuplot > /dev/null 2>&1; then
    skip "gnuplot is not installed" "make deps"
fi
export MOE_BIN=$moe

echo "test_ablations: chapters/03-expert-parallel/ablate.sh --smoke"
out=plots/03-expert-parallel-smoke
timeout 120 bash chapters/03-expert-parallel/ablate.sh --smoke > "$tmp/ch03.log" 2>&1
check "ch03 --smoke exits 0" $? "$(tail -n 5 "$tmp/ch03.log")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { n++; ep = $c["ep"]
      if (ep == 1 && !($c["expert_s"] > 0 && $c["expert_s"] < $c["step_s"])) bad++
      if (ep > 1) { b[$1] += $c["bytes_per_step"]; k[$1]++; m[$1] = $c["model_bytes_per_step"] } }
    END { for (r in b) { runs++; x = b[r] / k[r] / m[r]; if (x < 0.9 || x > 1.1) bad++ }
          exit !(n == 14 && runs == 4 && bad == 0) }' "$out/summary.csv"
check "summary.csv: 14 rows, ep1 expert seconds, mean bytes within 10 % of the cost model" $? "$(cat "$out/summary.csv")"
[ -s runs/ch03-ep1-aux-smoke/step_profile/profile.csv ] && [ ! -e runs/ch03-ep1-aux-smoke/step_profile/ckpt.bin ]
check "the one-process profile, without its checkpoint" $?
grep -q '^runs = 6$' "$out/provenance.txt" && grep -q '^dirty = ' "$out/provenance.txt"
check "provenance.txt of the 6 runs" $? "$(head -n 6 "$out/provenance.txt" 2>&1)"
missing=""
for p in time.png bytes.png load.png; do
    [ "$(head -c 8 "$out/$p" 2> /dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || missing="$missing $p"
done
[ -z "$missing" ]
check "the figures" $? "missing or not PNG:$missing"

echo "test_ablations: chapters/transcripts.sh --smoke --only a2a"
MOE_BUILD=$build MOE_MPI_BUILD=$build timeout 60 bash chapters/transcripts.sh --smoke --only a2a > "$tmp/tr.log" 2>&1
check "transcripts --only a2a exits 0" $? "$(tail -n 5 "$tmp/tr.log")"
f=plots/03-expert-parallel-smoke/a2a.txt
head -n 1 "$f" | grep -q '^\$ mpirun -np 4 .*a2a$' &&
    [ "$(grep -cE '^[1-6]\. ' "$f")" -ge 6 ]
check "a2a.txt: the mpirun line and its 6 sections" $? "$(head -n 3 "$f" 2>&1)"

echo "test_ablations: chapters/03-expert-parallel/collectives.sh --smoke"
out=plots/03-expert-parallel-smoke/collectives
MOE_BUILD=$build timeout 120 bash chapters/03-expert-parallel/collectives.sh --smoke > "$tmp/coll.log" 2>&1
check "collectives.sh --smoke exits 0 (every sum and exchange checked against its exact result)" $? \
    "$(tail -n 5 "$tmp/coll.log")"
# 2 engines x 2 operations x 4 sizes at 2 processes; the bytes of one call as dist.csv counts
# them: a sum of n floats over 2 members, n each way for both engines; an exchange n / 2
awk -F, 'NR > 1 { n++; want = $2 == "sum" ? 4 * $4 : 2 * $4
                  if ($3 != 2 || $6 != want || $7 != want || !($5 > 0)) bad++ }
         END { exit !(n == 16 && bad == 0) }' "$out/collectives.csv"
check "collectives.csv: 16 measurements at 2 processes, each member's bytes as the cost model says" $? \
    "$(head -n 5 "$out/collectives.csv" 2>&1)"
grep -q '^| sum-2 | 2 | sum |' "$out/summary.md" && grep -q '^| exchange-2 | 2 | exchange |' "$out/summary.md" &&
    [ "$(grep -cE '^\| (teach|mpi)-[01] \| (teach|mpi) \| [01] \| [0-9.]+ \| [0-9.]+ \|$' "$out/overlap.md")" = 4 ] &&
    [ "$(head -c 8 "$out/collectives.png" 2> /dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    grep -q '^processes = 2$' "$out/provenance.txt"
check "summary.md, overlap.md (4 runs: each engine with and without overlap), collectives.png, provenance.txt" $? \
    "$(cat "$out/overlap.md" 2>&1 | head -n 8)"

echo "test_ablations: chapters/03-expert-parallel/layouts.sh --smoke"
out=plots/03-expert-parallel-smoke/layouts
MOE_BUILD=$build timeout 180 bash chapters/03-expert-parallel/layouts.sh --smoke > "$tmp/layouts.log" 2>&1
check "layouts.sh --smoke exits 0 (every layout trained or refused by the budget, nothing else)" $? \
    "$(tail -n 5 "$tmp/layouts.log")"
# the reference and 9 layouts; the budget (1.0 MiB) refuses one process and 4 replicas, and
# admits the others; a trained layout's table is within the budget, the planner's memory is
# the table's, its curve one process's, and its bytes the planner's count
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { n++; p = $c["planned_mib"]; t = $c["table_mib"]; d = p - t; d = d < 0 ? -d : d
           if (d > 0.051) bad++
           if ($1 == "one" || $1 == "dp4") { if ($c["status"] != "refused") bad++; next }
           if ($1 == "reference") next
           if ($c["status"] != "trained" || t > 1024 * 0.001 || $c["max_loss_rel"] > 1e-5) bad++
           if ($c["grad_sent"] != $c["planned_grad_sent"] || $c["weight_sent"] != $c["planned_weight_sent"] ||
               $c["tp_sent"] != $c["planned_tp_sent"] || $c["grad_sent"] == 0) bad++
           if ($c["tp"] > 1 && $c["tp_sent"] == 0) bad++; if ($c["zero"] > 0 && $c["weight_sent"] == 0) bad++ }
         END { exit !(n == 10 && bad == 0) }' "$out/layouts.csv"
check "layouts.csv: one process and 4 replicas refused by the budget; dist.zero and dist.tp layouts train within it on the one-process curve, their memory and bytes what moe plan says" \
    $? "$(cat "$out/layouts.csv" 2>&1)"

echo "test_ablations: chapters/11-parallelism/ablate.sh --smoke"
out=plots/11-parallelism-smoke
MOE_BUILD=$build timeout 180 bash chapters/11-parallelism/ablate.sh --smoke > "$tmp/ch11.log" 2>&1
check "ch11 --smoke exits 0 (every ranked layout trained or refused by the budget, nothing else)" $? \
    "$(tail -n 5 "$tmp/ch11.log")"
# every layout moe plan ranks over 4 processes at dist.zero=1: those it says fit train, the
# others are refused by moe train's own check; a trained one's curve is one process's, its
# memory and bytes the planner's; at least one pipeline trains, its bytes between stages > 0
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { n++; tr = $c["status"] == "trained"
           if (tr != ($c["planned_fits"] == 1) || ($c["status"] != "trained" && $c["status"] != "refused")) bad++
           if (!tr) next
           if ($c["max_loss_rel"] > 1e-5 || $c["planned_mib"] != $c["table_mib"]) bad++
           if ($c["grad_sent"] != $c["planned_grad_sent"] || $c["weight_sent"] != $c["planned_weight_sent"] ||
               $c["tp_sent"] != $c["planned_tp_sent"] || $c["pp_sent"] != $c["planned_pp_sent"]) bad++
           if ($c["pp"] > 1) { pipes++; if ($c["pp_sent"] == 0 || !($c["bubble_measured"] > 0)) bad++ } }
         END { exit !(n > 4 && pipes > 0 && bad == 0) }' "$out/ranked.csv"
check "ranked.csv: the planner's verdict is the engine's; trained layouts on the one-process curve, with the planner's memory and bytes; a pipeline among them" \
    $? "$(cut -d, -f1-20 "$out/ranked.csv" 2>&1)"
awk -F, 'NR > 1 { n++; if (!($5 > 0 && $5 < 1) || $4 != sprintf("%.3f", 1 / ($3 + 1))) bad++ }
         END { exit !(n == 4 && bad == 0) }' "$out/bubble.csv" &&
    awk -F, 'NR > 1 { n[$1]++; if ($6 < $5) bad++ } END { exit !(n["gpipe"] == 16 && n["1f1b"] == 16 && bad == 0) }' \
        "$out/timeline.csv" &&
    grep -q '^Summary: layouts ranked [0-9]*, ' "$out/ranked.md" && grep -q '^runs = ' "$out/provenance.txt" &&
    grep -q '^    the step 33.00 units, mean idle share 0.273; (P - 1) / (M + P - 1) = 0.273$' "$out/pipeline.txt" &&
    [ "$(grep -c '^    measured: mean idle share 0\.[0-9]*$' "$out/pipeline.txt")" = 2 ]
check "bubble.csv (each schedule at 1 and 4 micro-batches), timeline.csv (a step's 8 actions of each stage on each schedule), the summary, provenance.txt, the program's simulations and the runs against theirs (pipeline.txt)" \
    $? "$(cat "$out/bubble.csv" "$out/timeline.csv" "$out/pipeline.txt" 2>&1 | head -n 40)"
missing=""
for p in bubble.png timeline.png; do
    [ "$(head -c 8 "$out/$p" 2> /dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || missing="$missing $p"
done
[ -z "$missing" ]
check "chapter 11's figures" $? "missing or not PNG:$missing"

# the handbook's chapter 11 (the committed plots/11-parallelism/): every ranked layout trained
# exactly when the planner said it fits, with the planner's memory and bytes, on one process's
# curve over the first 5 steps to 1e-5; the bubble of each schedule within 0.1 of its
# simulation on the stages' own times; GPipe's first stage holds every micro-batch and its
# largest process grows with them, 1F1B's holds at most 2 (the stages) and stays
out=plots/11-parallelism
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { n++; tr = $c["status"] == "trained"; if (tr != ($c["planned_fits"] == 1)) bad++
           if (tr && ($c["planned_mib"] != $c["table_mib"] || $c["max_loss_rel_5"] > 1e-5 ||
                      $c["grad_sent"] != $c["planned_grad_sent"] || $c["weight_sent"] != $c["planned_weight_sent"] ||
                      $c["tp_sent"] != $c["planned_tp_sent"] || $c["pp_sent"] != $c["planned_pp_sent"])) bad++ }
         END { exit !(n > 0 && bad == 0) }' "$out/ranked.csv" &&
    awk -F, 'NR > 1 { d = $5 - $6; d = d < 0 ? -d : d; if (d > 0.1) bad++
                      if ($2 == "gpipe" && $7 != $3) bad++
                      if ($2 == "1f1b" && $7 != ($3 < 2 ? $3 : 2)) bad++
                      if ($2 == "1f1b") { if (t1 != "" && $8 != t1) bad++; t1 = $8 }
                      if ($2 == "gpipe") { if ($8 <= g && g != "") bad++; g = $8 } ; n++ }
             END { exit !(n == 8 && bad == 0) }' "$out/bubble.csv"
check "chapter 11's committed runs: the planner's verdict, memory and bytes; the bubble within 0.1 of its simulation; what each schedule holds" \
    $? "$(cat "$out/bubble.csv" 2>&1)"

finish
