#!/usr/bin/env bash
# test_demo.sh: the recipe of `make demo` (run by `make test`), on a tiny model: make demo-run
# with the corpus and the run directory in a scratch folder (CORPUS, DEMO_OUT) and a model of
# width 32 trained for 4 steps (DEMO_SET). It builds the corpus from the Debian packages, trains,
# plots and samples: the run directory has every file the demo promises, and a sample is printed.
# Skipped without gnuplot or the fortunes packages (make deps installs both).

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
build=${MOE_BUILD:-build}
case ${build%/} in build/san | */build/san) san=1 ;; *) san=0 ;; esac
if ! command -v gnuplot > /dev/null 2>&1 || [ ! -d /usr/share/games/fortunes/de ]; then
    skip "gnuplot or the fortunes packages are missing" "make deps"
fi
# run from `make test`: its jobserver and command-line variables are not for this make
unset MAKEFLAGS MFLAGS MAKELEVEL
export OMP_NUM_THREADS=2
tiny="--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32"
tiny="$tiny --set moe.num_experts=4 --set moe.d_expert=32 --set train.batch=4 --set train.steps=4"
tiny="$tiny --set train.warmup=1 --set train.eval_every=2 --set train.eval_batches=2 --quiet"

echo "test_demo: make demo-run on a tiny model"
make -s --no-print-directory demo-run SANITIZE=$san CORPUS="$tmp/corpus" DEMO_OUT="$tmp/demo" \
    DEMO_SET="$tiny" > "$tmp/out.txt" 2>&1
rc=$?
check "make demo-run exits 0" $rc "exit $rc: $(tail -n 20 "$tmp/out.txt")"
[ -s "$tmp/corpus/train.bin" ] && [ -s "$tmp/corpus/val.bin" ]
check "it builds the corpus" $? "$(ls -l "$tmp/corpus" 2>&1)"
missing=""
for f in config.txt provenance.txt train.csv router.csv domains.csv ckpt.bin loss.png balance.png \
    load_heatmap.png domains.png; do
    [ -s "$tmp/demo/$f" ] || missing="$missing $f"
done
[ -z "$missing" ]
check "the run directory has every file the demo names" $? "missing:$missing"
awk '/^--- a sample/ { s = 1; next } /^---$/ { exit !(s && n > 0) } s { n += length($0) }' "$tmp/out.txt"
check "it prints a sample between the --- lines" $? "$(tail -n 12 "$tmp/out.txt")"
grep -q "demo: done. Run directory $tmp/demo" "$tmp/out.txt"
check "it names the run directory" $? "$(tail -n 3 "$tmp/out.txt")"
make -s --no-print-directory demo-run SANITIZE=$san CORPUS="$tmp/corpus" DEMO_OUT="$tmp/demo" \
    DEMO_SET="$tiny" > "$tmp/out2.txt" 2>&1
grep -q "demo: replacing the previous $tmp/demo" "$tmp/out2.txt"
check "a second run replaces the first" $? "$(head -n 5 "$tmp/out2.txt")"
finish
