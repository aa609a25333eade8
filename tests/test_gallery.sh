#!/usr/bin/env bash
# test_gallery.sh: chapter 6's gallery of broken runs, in its smoke form (run by `make test`).
#
#   1. chapters/06-troubleshooting/gallery.sh --smoke (without MPI: the ep-imbalance arm is
#      tests/mpi/test_gallery_ep.sh's) exits 0 and writes gallery.csv, gallery.md, a report and
#      a figure per arm, thresholds.md and runs.tar.gz; a report is moe doctor's output on its
#      run. (The smoke model, 2 blocks of width 32 on 4 x 32 bytes a step, is too small to show
#      most of the failures: its verdicts are not judged.)
#   2. the committed gallery (plots/06-troubleshooting/, the handbook's): runs.tar.gz holds every
#      arm's run directory without its checkpoint; moe doctor on each, now, writes exactly the
#      committed report, names the failure each broken arm provokes (none missed) and nothing on
#      the three healthy arms (the false positives are counted, and must be 0); thresholds.md is
#      the table moe doctor prints now (a changed threshold is a rerun of the gallery)
#   3. symptom.gp: an arm that stops early (a divergence) gets a second panel on the steps it
#      ran; an arm as long as the healthy run keeps the one

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=${MOE_BIN:-build/moe}
moe=$(cd "$(dirname "$moe")" && pwd)/$(basename "$moe") # absolute: the committed runs are read from $tmp
out=plots/06-troubleshooting-smoke

echo "test_gallery: gallery.sh --smoke"
MOE_BIN=$moe MOE_MPI_BIN= bash chapters/06-troubleshooting/gallery.sh --smoke > "$tmp/g.log" 2>&1
check "gallery.sh --smoke exits 0" $? "$(tail -n 30 "$tmp/g.log")"
arms=$(awk -F, 'NR > 1' "$out/gallery.csv" | wc -l)
[ "$arms" = 17 ] && [ -s "$out/gallery.md" ] && [ -s "$out/thresholds.md" ] && [ -s "$out/runs.tar.gz" ] &&
  [ -s "$out/divergence.csv" ]
check "gallery.csv has every arm ($arms); gallery.md, thresholds.md, runs.tar.gz, divergence.csv exist" $? "$(cat "$out/gallery.csv")"
missing=""
while IFS=, read -r arm expect found rc _; do
  [ "$found" = skipped ] && continue
  [ -s "$out/reports/$arm.txt" ] || missing="$missing reports/$arm.txt"
  [ "$arm" = healthy ] || [ -s "$out/$arm.png" ] || missing="$missing $arm.png"
done < <(tail -n +2 "$out/gallery.csv")
[ -z "$missing" ]
check "a report and a figure for every arm trained" $? "missing:$missing"
"$moe" doctor runs/ch06-gallery-collapse-smoke > "$tmp/collapse.txt"
[ $? != 2 ] && cmp -s "$tmp/collapse.txt" "$out/reports/collapse.txt"
check "the collapse arm's report is moe doctor's output on its run" $? "$(diff "$tmp/collapse.txt" "$out/reports/collapse.txt")"

echo "test_gallery: the committed gallery (plots/06-troubleshooting/)"
g=plots/06-troubleshooting
mkdir -p "$tmp/g"
tar -xzf "$g/runs.tar.gz" -C "$tmp/g"
check "runs.tar.gz unpacks" $? ""
# divergence.csv (what 6.1 quotes): the run's train.csv, columns step, lr, loss and grad_norm
head -n 1 "$tmp/g/runs/ch06-gallery-divergence/train.csv" | grep -q '^step,loss,aux_loss,z_loss,lr,grad_norm,' &&
  awk -F, '{ print $1 "," $5 "," $2 "," $6 }' "$tmp/g/runs/ch06-gallery-divergence/train.csv" |
  sed '1s/.*/step,lr,loss,grad_norm/' | cmp -s - "$g/divergence.csv"
check "divergence.csv is the divergence run's learning rate, loss and gradient norm at every step" $? \
  "$(cat "$g/divergence.csv")"
differs="" missed="" false_pos="" n=0
while IFS=, read -r arm expect found rc _; do
  n=$((n + 1))
  [ "$found" = skipped ] && { missed="$missed $arm(skipped)"; continue; }
  # the report names its run as runs/ch06-gallery-NAME: run it from where that path resolves
  (cd "$tmp/g" && "$moe" doctor "runs/ch06-gallery-$arm") > "$tmp/report.txt"
  cmp -s "$tmp/report.txt" "$g/reports/$arm.txt" || differs="$differs $arm"
  now=$(sed -n 's/^\(FAILURE\|WARNING\|NOTE\) \([a-z_]*\):.*/\2/p' "$tmp/report.txt" | tr '\n' ' ')
  for f in $expect; do
    [ "$f" = - ] || case " $now " in *" $f "*) ;; *) missed="$missed $arm($f)" ;; esac
  done
  [ "$expect" = - ] && [ -n "${now// /}" ] && false_pos="$false_pos $arm($now)"
done < <(tail -n +2 "$g/gallery.csv")
[ "$n" = 17 ]
check "gallery.csv has every arm ($n)" $? "$(cat "$g/gallery.csv")"
[ -z "$differs" ]
check "moe doctor now writes the committed report of every arm" $? "differ:$differs (rerun gallery.sh --summarize)"
[ -z "$missed" ]
check "moe doctor names the failure each broken arm provokes" $? "missed:$missed"
[ -z "$false_pos" ]
check "0 false positives on the healthy arms" $? "false positives:$false_pos"
[ "$(awk -F, 'NR > 1 && $2 == "-"' "$g/gallery.csv" | wc -l)" = 3 ]
check "three healthy arms" $? "$(cat "$g/gallery.csv")"
"$moe" doctor --thresholds | cmp -s - "$g/thresholds.md"
check "thresholds.md is the table moe doctor prints now" $? \
  "$("$moe" doctor --thresholds | diff - "$g/thresholds.md")"

echo "test_gallery: symptom.gp on an arm that stops early"
# png_width FILE: the width in the PNG header (IHDR, bytes 16-19, big-endian)
png_width() { od -An -tu1 -j16 -N4 "$1" | awk '{ print ((($1 * 256) + $2) * 256 + $3) * 256 + $4 }'; }
awk 'BEGIN { for (s = 1; s <= 300; s++) print s, 5 - s / 100 }' > "$tmp/short.healthy.dat"
awk 'BEGIN { for (s = 1; s <= 8; s++) print s, (s < 8 ? 5 - s / 4 : 9) }' > "$tmp/short.dat"
cp "$tmp/short.healthy.dat" "$tmp/long.healthy.dat"
cp "$tmp/short.healthy.dat" "$tmp/long.dat"
for arm in short long; do
  gnuplot -e "dir='$tmp'; name='$arm'; label='loss'; healthy=1; out='$tmp/$arm.png'" \
    chapters/06-troubleshooting/symptom.gp > "$tmp/$arm.log" 2>&1 || echo "gnuplot failed" >> "$tmp/$arm.log"
done
[ "$(png_width "$tmp/short.png")" = 1200 ] && [ "$(png_width "$tmp/long.png")" = 720 ]
check "an arm of 8 steps against 300 gets its zoomed panel (1200 pixels wide), one of 300 not (720)" $? \
  "widths $(png_width "$tmp/short.png") and $(png_width "$tmp/long.png"); $(cat "$tmp/short.log" "$tmp/long.log")"
finish
