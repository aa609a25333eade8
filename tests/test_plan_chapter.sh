#!/usr/bin/env bash
# test_plan_chapter.sh: chapter 7's files are what `moe plan` gives now, and its commands run.
#
#   - chapters/07-planning/plan.sh --check: every planned file of plots/07-planning (presets,
#     counts, runs, validation, layouts, the expert-parallel sweep, the ladder, the searches,
#     walk.txt, the handbook's tables) equals what the planner writes today, so a change of the
#     cost model that moves a number fails here until the chapter is rerun (and `make book`
#     rewrites the quoted numbers);
#   - walk (chapters/07-planning/walk.c) agrees with the planner term by term on every published
#     run, and refuses an unknown run with exit status 2;
#   - the commands the chapter shows run: the presets, a run, a search, a moe.c config on four
#     processes;
#   - the two figures draw from the committed CSV files.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_plan_chapter: plots/07-planning and the chapter's commands"
build=${MOE_BUILD:-build}
moe=$(executable "${MOE_BIN:-$build/moe}" make) || exit 1
walk=$(executable "$build/chapters/07-planning/walk" "make chapters") || exit 1

MOE_BIN=$moe bash chapters/07-planning/plan.sh --check > "$tmp/check" 2>&1
check "bash chapters/07-planning/plan.sh --check: the committed files are the planner's" $? \
    "$(head -n 20 "$tmp/check")"

runs=$("$moe" plan --presets --csv | awk -F, '$1 == "run" { print $2 }')
[ -n "$runs" ]
check "moe plan --presets --csv lists the published runs" $?
for r in $runs; do
    "$walk" "$r" > "$tmp/walk" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q ' =$' "$tmp/walk" && ! grep -q DIFFERS "$tmp/walk"
    check "walk $r: every term equals the planner's" $? "status $rc: $(grep DIFFERS "$tmp/walk" | head -n 3)"
done
"$walk" no-such-run > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "no run preset 'no-such-run'" "$tmp/out"
check "walk with an unknown run: exit 2 and the presets named" $? "status $rc: $(cat "$tmp/out")"

"$moe" plan --presets > "$tmp/presets" 2>&1
check "build/moe plan --presets" $? "$(head -n 3 "$tmp/presets")"
"$moe" plan --run deepseek-v3 > "$tmp/run" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "fits" "$tmp/run"
check "build/moe plan --run deepseek-v3 fits (exit 0)" $? "status $rc: $(tail -n 3 "$tmp/run")"
"$moe" plan --run deepseek-v3 --search > "$tmp/run" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "(best)" "$tmp/run" && grep -q "slower" "$tmp/run"
check "build/moe plan --run deepseek-v3 --search ranks the run's layouts" $? "status $rc: $(head -n 12 "$tmp/run")"
"$moe" plan --run qwen3-235b-tp4 > "$tmp/run" 2>&1
check "build/moe plan --run qwen3-235b-tp4" $? "$(tail -n 3 "$tmp/run")"
"$moe" plan --model mixtral-8x7b --cluster h100 --gpus 64 --set train.global_batch=256 --search > "$tmp/search" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "(best)" "$tmp/search"
check "build/moe plan --model mixtral-8x7b --cluster h100 --gpus 64 ... --search ranks layouts" $? \
    "status $rc: $(head -n 12 "$tmp/search")"
printf 'dist.ep=4\n' > "$tmp/my.conf"
"$moe" plan --config "$tmp/my.conf" --cluster laptop --gpus 4 > "$tmp/conf" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "engine moe.c" "$tmp/conf" && grep -q "ep 4" "$tmp/conf"
check "build/moe plan --config my.conf --cluster laptop --gpus 4: the moe.c engine, ep 4" $? \
    "status $rc: $(cat "$tmp/conf")"

if command -v gnuplot > /dev/null; then
    for fig in layouts ep; do
        gnuplot -e "data='plots/07-planning/$fig.csv'; out='$tmp/$fig.png'" \
            "chapters/07-planning/$fig.gp" > "$tmp/gp" 2>&1 && [ -s "$tmp/$fig.png" ]
        check "chapters/07-planning/$fig.gp draws plots/07-planning/$fig.csv" $? "$(cat "$tmp/gp")"
    done
else
    echo "  (no gnuplot: the figures are not drawn; make deps installs it)"
fi
finish
