#!/usr/bin/env bash
# test_ablations.sh: the chapter scripts run end to end in their --smoke mode (every arm for a
# few steps of a tiny model: training, summary, curves, provenance and every figure), and the
# chapter programs' transcripts in theirs. Chapter 3 needs MPI: tests/mpi/test_ablations.sh.
#
#   1. chapters/lib.sh: warm-up scaling (quick and smoke only, room left in a 33-step arm), the
#      provenance of clean and -dirty runs, the seed spread of a summary (and its absence)
#   2. compare.sh and ablate.sh of chapters 1, 2, 4 --smoke (and chapter 2's speed.sh): exit 0; summary.csv has one row per
#      arm with a finite validation loss; curves.csv every arm's evaluations; provenance.txt the
#      commits, checksums and threads of the runs; summary.md the provenance sentence; every
#      PNG exists and is a PNG; the numbers the handbook quotes have their columns
#   2a. EXTRA_SET="model.d_model=16" compare.sh --smoke: every run has it, in folders of its own,
#      the summary says it; a word that is not key=value exits 2
#   3. --summarize redoes the same summary.csv from the runs; bad options and missing runs exit 2
#   2b. chapter 5's ablate.sh --smoke: nine arms of two seeds, the diverged runs those that
#      exited with status 3, part 2's balance table, the figures, --summarize
#   4. chapters/transcripts.sh --smoke --no-mpi: routing.txt, capacity.txt, upcycle.txt,
#      stability.txt with their command line and every numbered section
#   5. every loss of the smoke summaries equals the committed reference (plots/NN-name/smoke.csv,
#      `make smoke-reference`): an engine change that moves results fails until the ablations
#      are rerun and the book regenerated
# The runs go to runs/chNN-*-smoke and plots/NN-name-smoke/ (both ignored by git), replaced on
# every run; the corpus is built when missing (make data/corpus/train.bin).

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
if ! command -v gnuplot > /dev/null 2>&1; then
    skip "gnuplot is not installed" "make deps"
fi
export OMP_NUM_THREADS=1 MOE_BIN=$moe
# The smoke references (check 5) are written with OpenBLAS's Haswell kernels (make
# smoke-reference): another kernel set adds a product's terms in another order, and chapter 5's
# arms, made to diverge, magnify that far past the tolerance. Every x86 CPU with AVX2 and FMA
# runs those kernels, whatever OpenBLAS would pick for it; elsewhere check 5 is left out.
same_kernels=0
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
    same_kernels=1
fi

# ---- 1. the shared functions ---------------------------------------------------------------
echo "test_ablations: chapters/lib.sh"
(
    . chapters/lib.sh
    mode=full; [ -z "$(warmup_sets 600)" ] || exit 1
    mode=quick; [ "$(warmup_sets 33)" = "--set train.warmup=2" ] || exit 1
    mode=smoke; [ "$(warmup_sets 4)" = "--set train.warmup=0" ]
)
check "warm-up: default in full mode, steps/12 in quick and smoke" $?

mkdir -p "$tmp/a" "$tmp/b" "$tmp/out"
for r in a b; do
    printf 'commit = %s\ndata.train = d/train.bin crc32=0badc0de tokens=10\nthreads = 2\ncpu = TestCPU\n' \
        "$([ $r = b ] && echo 1234abcd-dirty || echo 1234abcd)" > "$tmp/$r/provenance.txt"
done
(
    . chapters/lib.sh
    write_provenance "$tmp/out" "a=$tmp/a" "b=$tmp/b"
    grep -q '^dirty = yes: b ' "$tmp/out/provenance.txt" &&
        grep -q '^commits = 1234abcd (1 run), 1234abcd-dirty (1 run)$' "$tmp/out/provenance.txt" &&
        grep -q '^data.train = d/train.bin crc32=0badc0de tokens=10 (2 runs)$' "$tmp/out/provenance.txt" &&
        provenance_note "a=$tmp/a" "b=$tmp/b" | grep -q 'dirty tree.*: b\.$' &&
        provenance_note "a=$tmp/a" | grep -q 'No run was built from a dirty tree'
)
check "provenance: commits, the -dirty run named, checksums" $? "$(cat "$tmp/out/provenance.txt")"
printf 'arm,val_loss\nref,2.10\nother,2.00\nref-seed2,2.13\nref-seed3,2.08\nref-seedx,1.0\n' > "$tmp/s.csv"
(
    . chapters/lib.sh
    [ "$(seed_spread "$tmp/s.csv" ref)" = "3 2.0800 2.1300" ] &&
        [ "$(seed_spread "$tmp/s.csv" other | cut -d' ' -f1)" = 1 ]
)
check "seed spread: min and max over REF and REF-seedN only" $?
printf 'arm,val_loss\nref,2.10\nother,2.00\n' > "$tmp/s1.csv"
(
    . chapters/lib.sh
    seed_note ref val_loss "$tmp/s1.csv" | grep -q '^Seed spread: not measured' &&
        final_loss_figure "$tmp/f.png" "no seeds" ref val_loss "$tmp/s1.csv" ref other &&
        [ "$(head -c 4 "$tmp/f.png" | od -An -tx1 | tr -d ' \n')" = 89504e47 ]
)
check "without seed arms: the spread is 'not measured', the dot chart still drawn" $?

# ---- 2. every script's smoke mode ----------------------------------------------------------
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
# rows_ok CSV COLUMN N: N data rows, COLUMN finite and in (0, 10) in every one
rows_ok() {
    awk -F, -v col="$2" -v want="$3" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; if (!(col in c)) exit 1; next }
        { n++; v = $c[col]; if (v !~ /^[0-9.]+$/ || v + 0 <= 0 || v + 0 >= 10) bad++ }
        END { exit !(n == want && bad == 0) }' "$1"
}
# smoke_ok NAME SCRIPT PLOTS ARMS "PNG..." VALCOL: the script's --smoke and its outputs
smoke_ok() {
    local name=$1 script=$2 out=$3 arms=$4 pngs=$5 col=$6 p missing=""
    echo "test_ablations: $script --smoke"
    bash "$script" --smoke > "$tmp/$name.log" 2>&1
    check "$name --smoke exits 0" $? "$(tail -n 5 "$tmp/$name.log")"
    rows_ok "$out/summary.csv" "$col" "$arms"
    check "$name: summary.csv has $arms arms with a finite $col" $? "$(cat "$out/summary.csv")"
    awk -F, 'NR > 1 { a[$1]++ } END { for (k in a) n++; exit !(n == want) }' want="$arms" "$out/curves.csv" 2> /dev/null
    check "$name: curves.csv has every arm's evaluations" $? "$(head -n 3 "$out/curves.csv" 2>&1)"
    grep -q "^runs = $arms$" "$out/provenance.txt" && grep -q '^commits = [0-9a-f]' "$out/provenance.txt" &&
        grep -q '^data.train = .*crc32=' "$out/provenance.txt" && grep -q '^threads = 1 ' "$out/provenance.txt" &&
        grep -q '^dirty = ' "$out/provenance.txt"
    check "$name: provenance.txt of the $arms runs" $? "$(head -n 12 "$out/provenance.txt" 2>&1)"
    grep -q 'Built from commit(s) .*dirty tree' "$out/summary.md"
    check "$name: summary.md says where the runs come from" $? "$(tail -n 3 "$out/summary.md")"
    for p in $pngs; do is_png "$out/$p" || missing="$missing $p"; done
    [ -z "$missing" ]
    check "$name: the figures ($pngs)" $? "missing or not PNG:$missing"
}

smoke_ok ch00 chapters/00-intro/compare.sh plots/00-intro-smoke 2 \
    "val_loss.png moe_loss.png moe_balance.png moe_load_heatmap.png moe_domains.png" val_loss
# the dense-vs-MoE table at every evaluation (steps 3, 6, 9, 12 of the smoke runs)
grep -cE '^\| (3|6|9|12) \| [0-9.]+ \| [0-9.]+ \| [-+][0-9.]+ \|$' plots/00-intro-smoke/summary.md | grep -qx 4
check "ch00: val loss of both models and the difference at every evaluation" $? \
    "$(grep -A 6 'every evaluation' plots/00-intro-smoke/summary.md)"

# EXTRA_SET: the user's settings after the script's own, in every run, in folders of their own
# (the stock smoke runs and summary untouched), and the summary says them
echo "test_ablations: EXTRA_SET"
cp plots/00-intro-smoke/summary.csv "$tmp/ch00.csv"
xs=-smoke-with-d_model-16
rm -rf runs/ch00-*"$xs" plots/00-intro"$xs"
EXTRA_SET="model.d_model=16" bash chapters/00-intro/compare.sh --smoke > "$tmp/ch00x.log" 2>&1
rc=$?
n=0 missing=""
for d in runs/ch00-*"$xs"; do
    n=$((n + 1))
    grep -qx 'model.d_model = 16' "$d/config.txt" || missing="$missing $d"
done
[ $rc -eq 0 ] && [ $n -eq 2 ] && [ -z "$missing" ] && rows_ok plots/00-intro"$xs"/summary.csv val_loss 2 &&
    grep -qx 'model.d_model = 32' runs/ch00-moe-smoke/config.txt &&
    cmp -s "$tmp/ch00.csv" plots/00-intro-smoke/summary.csv
check "EXTRA_SET=model.d_model=16: both runs' config.txt have it, in runs/ch00-*$xs (stock untouched)" \
    $? "exit $rc, $n runs, without it:$missing; $(tail -n 3 "$tmp/ch00x.log")"
grep -qx 'Extra settings (EXTRA_SET), applied to every run after its own: model.d_model=16.' \
    plots/00-intro"$xs"/summary.md && grep -qx 'extra_set = model.d_model=16' plots/00-intro"$xs"/provenance.txt
check "EXTRA_SET: summary.md and provenance.txt say the extra settings" $? \
    "$(tail -n 2 plots/00-intro"$xs"/summary.md)"
rm -rf runs/ch00-*"$xs" plots/00-intro"$xs"
EXTRA_SET="model.d_model=16 d_model16" bash chapters/00-intro/compare.sh --smoke > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "EXTRA_SET: 'd_model16' is not a key=value setting" "$tmp/err" &&
    ! ls -d runs/ch00-*-with-* > /dev/null 2>&1
check "EXTRA_SET with a word that is not key=value: exit 2 before any run" $? "$(cat "$tmp/err")"

smoke_ok ch01 chapters/01-routing/ablate.sh plots/01-routing-smoke 13 \
    "val_loss.png balance.png final_loss.png load_aux-1e-2.png domains_aux-1e-2.png" val_loss
grep -q '^Seed spread: aux-1e-2 trained with 3 values of train.seed' plots/01-routing-smoke/summary.md
check "ch01: the seed spread of aux-1e-2 in summary.md" $? "$(grep 'Seed' plots/01-routing-smoke/summary.md)"
cp plots/01-routing-smoke/summary.csv "$tmp/ch01.csv"
bash chapters/01-routing/ablate.sh --smoke --summarize > "$tmp/ch01s.log" 2>&1 &&
    cmp -s "$tmp/ch01.csv" plots/01-routing-smoke/summary.csv
check "ch01 --summarize: the same summary.csv from the runs" $? "$(tail -n 3 "$tmp/ch01s.log")"

# chapters/series.gp: the i-th of many unrelated series (chapter 1's eleven arms) takes line
# type distinct(i); each of the first sixteen has a colour of its own
gnuplot -e "out='/dev/null'; load 'plots/style.gp'; load 'chapters/series.gp'; \
            do for [i = 1:16] { print sprintf('type %d', distinct(i)) }; show linetype" > "$tmp/lt.txt" 2>&1
awk '$1 == "type" { want[++n] = $2 } $1 == "linetype" { sub(",", "", $2); c[$2] = $5 }
     END { for (i = 1; i <= n; i++) { k = c[want[i]]; if (k == "" || k in seen) exit 1; seen[k] = 1 }
           exit n != 16 }' "$tmp/lt.txt"
check "series.gp: distinct(1..16), sixteen line types of sixteen colours" $? "$(cat "$tmp/lt.txt")"

smoke_ok ch02 chapters/02-capacity/ablate.sh plots/02-capacity-smoke 20 \
    "val_loss.png loss_time.png drops.png padding.png final_loss.png" val_loss
# dropped fraction after step steps/6 for every arm, a fraction; dropless arms drop nothing
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { v = $c["drop_frac_after"]; n++
      if (v == "" || v < 0 || v > 1 || $c["drop_after_step"] != 2 || ($2 == 0 && v != 0)) bad++ }
    END { exit !(n == 20 && bad == 0) }' plots/02-capacity-smoke/summary.csv
check "ch02: drop_frac_after (after step 12/6) for every arm, 0 when dropless" $? \
    "$(cut -d, -f1,2,12-14 plots/02-capacity-smoke/summary.csv)"

# the side-by-side speed of chapter 2: five variants over three rounds, the median of the rounds
bash chapters/02-capacity/speed.sh --smoke > "$tmp/speed.log" 2>&1
check "ch02 speed.sh --smoke exits 0" $? "$(tail -n 5 "$tmp/speed.log")"
awk -F, 'NR == 1 { ok = $3 == "round1" && $5 == "round3" && $6 == "tok_per_s"; next }
    { n++; split($3 " " $4 " " $5, r, " "); for (i = 1; i <= 3; i++) if (!(r[i] > 0)) ok = 0
      lo = 0; hi = 0; for (i = 1; i <= 3; i++) { lo += $6 > r[i]; hi += $6 < r[i] }
      if (lo > 1 || hi > 1) ok = 0 }
    END { exit !(ok && n == 5) }' plots/02-capacity-smoke/speed.csv
check "ch02 speed.csv: 5 variants, 3 positive rounds each, tok_per_s their median" $? \
    "$(cat plots/02-capacity-smoke/speed.csv)"
grep -q "^Side by side: the five variants interleaved over 3 rounds" plots/02-capacity-smoke/speed.md &&
    grep -q "built from commit [0-9a-f]" plots/02-capacity-smoke/speed.md
check "ch02 speed.md says how it was measured and from which commit" $? "$(tail -n 1 plots/02-capacity-smoke/speed.md)"

smoke_ok ch04 chapters/04-upcycling/ablate.sh plots/04-upcycling-smoke 17 \
    "val_loss.png experts.png budgets.png final_loss.png" val_loss_end
# the losses at steps 50 and 100, here the nearest evaluations (every 3 steps, runs of 4 to 21)
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { n++; if ($c["val_step50"] !~ /^[0-9]+$/ || $c["val_loss_step100"] !~ /^[0-9.]+$/) bad++ }
    END { exit !(n == 17 && bad == 0) }' plots/04-upcycling-smoke/summary.csv &&
    grep -q 'nearest evaluated step' plots/04-upcycling-smoke/summary.md
check "ch04: every arm's val loss near steps 50 and 100, and that they are the nearest" $? \
    "$(cut -d, -f1,10-13 plots/04-upcycling-smoke/summary.csv)"
grep -qx 'train.warmup = 0' runs/ch04-copy-b1-smoke/config.txt && grep -qx 'train.warmup = 1' runs/ch04-copy-smoke/config.txt &&
    grep -qx 'train.warmup = 0' runs/ch04-copy-lr1e-3-smoke/config.txt
check "ch04: the warm-up scales with each run's length (4 steps: 0, 12: 1; lr1e-3 arms: 0)" $?

# the dense parent alone (what the upcycle transcript needs), and nothing else
rm -rf runs/ch04-dense-smoke runs/ch04-copy-smoke
bash chapters/04-upcycling/ablate.sh --smoke --only dense > "$tmp/dense.log" 2>&1 &&
    [ -f runs/ch04-dense-smoke/ckpt.bin ] && [ ! -e runs/ch04-copy-smoke ]
check "ch04 --only dense: the dense parent alone" $? "$(tail -n 3 "$tmp/dense.log")"

# chapter 5: seeds per arm, diverged runs counted, part 2's balance table
echo "test_ablations: chapters/05-stability/ablate.sh --smoke"
out5=plots/05-stability-smoke
bash chapters/05-stability/ablate.sh --smoke > "$tmp/ch05.log" 2>&1
check "ch05 --smoke exits 0" $? "$(tail -n 5 "$tmp/ch05.log")"
awk -F, 'NR == 1 { ok = $1 == "arm" && $4 == "diverged_frac" && $6 == "p_vs_pre" && $15 == "p_bonferroni"; next }
    { n++; if ($2 != 2 || $3 < 0 || $3 > 2 || $4 != $3 / 2 || $6 < 0 || $6 > 1) ok = 0
      if ($15 < $6 || $15 > 1 || ($6 * 8 > 1.01 && $15 != 1)) ok = 0   # Bonferroni: p times 8 arms, at most 1
      if ($1 == "pre" && $6 != 1) ok = 0   # the baseline against itself
      if ($3 < 2 && ($9 !~ /^[0-9.]+$/ || $12 !~ /^[0-9.]+$/)) ok = 0 }
    END { exit !(ok && n == 9) }' "$out5/summary.csv"
check "ch05: summary.csv has 9 arms of 2 seeds, the diverged share, Fisher's p against pre (1 for pre) and it times 8 (at most 1), a val loss and logits when one survived" $? \
    "$(cat "$out5/summary.csv")"
d_runs=$(awk -F, 'NR > 1 { n++; d += $3 } END { print n + 0, d + 0 }' "$out5/runs.csv")
d_exit=$(grep -lx 3 runs/ch05-*-s[12]-smoke/exit_status 2> /dev/null | wc -l)
[ "${d_runs%% *}" = 18 ] && [ "${d_runs#* }" = "$d_exit" ]
check "ch05: runs.csv has 18 runs, its diverged ones those that exited with status 3 ($d_exit)" $? "$d_runs"
awk -F, 'NR == 1 { ok = $4 == "maxvio_group" && $5 == "domain_mi"; next }
    { n++; if ($3 !~ /^[0-9.]+$/ || $4 !~ /^[0-9.]+$/ || $5 !~ /^[0-9.]+$/ || $5 > 1.7918) bad++ }
    END { exit !(ok && n == 3 && bad == 0) }' "$out5/balance.csv"
check "ch05: balance.csv has micro, global and groups-2 with both MaxVios and a mutual information <= ln 6" $? \
    "$(cat "$out5/balance.csv")"
grep -q "^runs = 21$" "$out5/provenance.txt" && grep -q 'Built from commit(s) .*dirty tree' "$out5/summary.md"
check "ch05: provenance.txt of the 21 runs, and summary.md says where they come from" $? \
    "$(head -n 3 "$out5/provenance.txt")"
missing=""
for p in stability.png logits.png balance.png; do is_png "$out5/$p" || missing="$missing $p"; done
[ -z "$missing" ]
check "ch05: the figures (stability.png logits.png balance.png)" $? "missing or not PNG:$missing"
cp "$out5/summary.csv" "$tmp/ch05.csv"
bash chapters/05-stability/ablate.sh --smoke --summarize > "$tmp/ch05s.log" 2>&1 &&
    cmp -s "$tmp/ch05.csv" "$out5/summary.csv"
check "ch05 --summarize: the same summary.csv from the runs" $? "$(tail -n 3 "$tmp/ch05s.log")"

# ---- 3. bad options and missing runs -------------------------------------------------------
echo "test_ablations: bad input"
bash chapters/01-routing/ablate.sh --smoke --bogus > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "unknown option '--bogus'" "$tmp/err" && grep -q usage "$tmp/err"
check "an unknown option: exit 2 and the usage" $? "$(cat "$tmp/err")"
bash chapters/02-capacity/ablate.sh --smoke --only nope > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "no arm named 'nope'; the names are: .*dropless-aux-seed3" "$tmp/err"
check "--only with an unknown arm: exit 2 and the names" $? "$(cat "$tmp/err")"
bash chapters/00-intro/compare.sh --quick --smoke > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "exclude each other" "$tmp/err"
check "--quick with --smoke: exit 2" $? "$(cat "$tmp/err")"
rm -rf runs/ch00-moe-smoke
bash chapters/00-intro/compare.sh --smoke --summarize > /dev/null 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "no run in runs/ch00-moe-smoke" "$tmp/err"
check "--summarize without a run: exit 2, naming it" $? "$(cat "$tmp/err")"

# ---- 4. the transcripts --------------------------------------------------------------------
echo "test_ablations: chapters/transcripts.sh --smoke --no-mpi"
MOE_BUILD=$build bash chapters/transcripts.sh --smoke --no-mpi > "$tmp/tr.log" 2>&1
check "transcripts --smoke exits 0" $? "$(tail -n 5 "$tmp/tr.log")"
t_ok() { # FILE PROGRAM SECTION...: the command line first, then every section
    local f=$1 prog=$2 s
    shift 2
    head -n 1 "$f" | grep -q "^\\$ .*$prog --ckpt runs/transcripts-smoke/" || return 1
    for s in "$@"; do grep -q "^$s" "$f" || return 1; done
}
t_ok plots/01-routing-smoke/routing.txt routing "1. the batch" "4. Switch aux loss" "7. aux-loss-free balancing"
check "routing.txt: the command and sections 1-7" $? "$(head -n 3 plots/01-routing-smoke/routing.txt 2>&1)"
t_ok plots/02-capacity-smoke/capacity.txt capacity "1. routing" "3. factor 1" "5. padded execution"
check "capacity.txt: the command and sections 1-5" $? "$(head -n 3 plots/02-capacity-smoke/capacity.txt 2>&1)"
t_ok plots/04-upcycling-smoke/upcycle.txt upcycle "1. the dense model" "4. the same function" "5. making the copies differ"
check "upcycle.txt: the command and sections 1-5" $? "$(head -n 3 plots/04-upcycling-smoke/upcycle.txt 2>&1)"
f=plots/05-stability-smoke/stability.txt
head -n 1 "$f" | grep -q '^\$ .*stability --layers 2 --width 32$' && grep -q '^1\. the residual stream' "$f" &&
    grep -q '^2\. what each block adds' "$f" && grep -q '^3\. the router logits' "$f" && grep -q '^4\. the z-loss' "$f"
check "stability.txt: the command and sections 1-4" $? "$(head -n 3 "$f" 2>&1)"
bash chapters/transcripts.sh --only nope > /dev/null 2>&1
check "transcripts: an unknown program is exit 2" $(( $? == 2 ? 0 : 1 ))

# ---- 5. the engine's results against the committed reference --------------------------------
# Every column whose name holds "loss", row by row (the arm in the first column), to 2e-4: the
# summaries print 4 decimals, and the last one may round either way on another machine's
# OpenBLAS kernels. A difference means the engine now trains these models differently.
echo "test_ablations: the smoke results against plots/*/smoke.csv"
same_losses() { # FRESH REFERENCE
    awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, $i] = i; if (NR == FNR) n = split($0, name, ","); next }
        NR == FNR { for (i = 2; i <= n; i++) got[$1, name[i]] = $i; next }
        { for (i = 2; i <= n; i++) {
              if (name[i] !~ /loss/) continue
              c = col[FILENAME, name[i]]; if (!c) { print "no column " name[i] " in the reference"; bad++; continue }
              if (!(($1, name[i]) in got)) { print "no arm " $1 " in the smoke run"; bad++; break }
              g = got[$1, name[i]]; r = $c
              if (g == r) continue
              d = g - r; if (d < 0) d = -d
              if (g == "" || r == "" || d > 2e-4) { print $1 " " name[i] ": " g " now, " r " in the reference"; bad++ } } }
        END { exit bad > 0 }' "$1" "$2"
}
for d in 00-intro 01-routing 02-capacity 04-upcycling 05-stability; do
    if [ $same_kernels = 0 ]; then
        echo "  skip $d: the references need OpenBLAS's Haswell kernels (x86 with AVX2 and FMA)"
        continue
    fi
    diffs=$(same_losses "plots/$d-smoke/summary.csv" "plots/$d/smoke.csv" 2>&1)
    check "$d: the smoke run's losses equal plots/$d/smoke.csv" $? \
        "$(printf '%s\n' "$diffs" | head -n 5); the engine's results moved: rerun the ablations, \
\`make book\`, then \`make smoke-reference\` (chapters/README.md)"
done

finish
