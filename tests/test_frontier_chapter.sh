#!/usr/bin/env bash
# test_frontier_chapter.sh: chapter 10 end to end at a tiny size, and its program's bad input.
#
#   1. chapters/10-frontier/ablate.sh --smoke: exit 0; summary.csv a row per arm with a finite
#      validation loss; logits.csv four legs of every block of every arm; decode.csv the three
#      attentions at batch 1 and 16, MLA's cache smaller than MHA's; the figures are PNGs;
#      summary.md its tables and the provenance sentence; --summarize redoes the same
#      summary.csv and mtp.csv; an unknown arm and a bad option exit 2
#   2. what the chapter program found, as the handbook reads it: the cache a token that the
#      decoder allocated equals the formula for every attention (MHA 2 L H D floats, GQA with
#      fewer key-value heads, MLA L (kv_rank + rope_dim)), the parameters within 2% of MHA's,
#      and decoding from the cache gives the full forward's logits; qk-norm keeps the queries'
#      and keys' RMS at about 1 (the norm's unit gains after a few steps); group-limited routing
#      with topk_group=1 reaches exactly one process a token
#   3. the program alone on fresh models (the same text again) and on a checkpoint; its bad input exits 2 with a message: a missing checkpoint, --ep that does not
#      divide the experts, an unknown option
#   4. the multi-token prediction arm (part 4 of the script): mtp.csv the five runs, depths 0, 1,
#      2 at equal steps and depth 0 at the steps of depth 1's and 2's training FLOPs (FLOPs a
#      token rising with the depth, the TFLOPs equal within a step's), the modules' losses in
#      their columns alone, the depth-0 run's loss the baseline's, the draft's accepted guesses a
#      fraction of its guesses on mtp1 and mtp2 alone; mtp.md, mtp.png
# The dist.ep=4 runs (part 3 of the script) need Open MPI and are left out of the smoke mode.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_frontier_chapter: chapter 10 at a tiny size"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
prog=$(executable "$build/chapters/10-frontier/frontier" "make chapters") || exit 1
if ! command -v gnuplot > /dev/null 2>&1; then
    skip "gnuplot is not installed" "make deps"
fi
export OMP_NUM_THREADS=1 MOE_BIN=$moe

# 1. the script
out=plots/10-frontier-smoke
bash chapters/10-frontier/ablate.sh --smoke > "$tmp/ablate" 2>&1
check "ablate.sh --smoke runs" $? "$(tail -n 20 "$tmp/ablate")"
awk -F, 'NR == 1 { ok = $1 == "arm" && $4 == "val_loss" && $7 == "max_attn_logit"; next }
    { n++; if ($4 !~ /^[0-9.]+$/ || $4 <= 0 || $4 >= 10 || $6 != 0 || $7 !~ /^[-0-9.]+$/) bad++ }
    END { exit !(ok && n == 9 && bad == 0) }' "$out/summary.csv"
check "summary.csv: 9 arms, each with a finite validation loss, exit 0 and its logits" $? "$(cat "$out/summary.csv")"
# 9 arms x 4 legs x 2 blocks
awk -F, 'NR > 1 { n++; legs[$1 "," $2] = 1 } END { k = 0; for (x in legs) k++; exit !(n == 72 && k == 36) }' "$out/logits.csv"
check "logits.csv: every block of every arm at each of the four legs" $? "$(head -n 5 "$out/logits.csv")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { n++; cb[$1 "," $c["batch"]] = $c["cache_bytes"]; if (!($c["decode_tok_s"] > 0)) bad++ }
    END { exit !(n == 6 && bad == 0 && cb["mla,1"] < cb["mha,1"] && cb["gqa,1"] < cb["mha,1"]) }' "$out/decode.csv"
check "decode.csv: mha, gqa, mla at batch 1 and 16; GQA's and MLA's caches smaller than MHA's" $? \
    "$(cut -d, -f1,5,11,20 "$out/decode.csv")"
status=0
for p in val_loss logits final_loss; do
    [ "$(head -c 4 "$out/$p.png" | od -An -c | tr -d ' ')" = "211PNG" ] || { status=1; echo "    $p.png"; }
done
check "the three figures are PNGs" $status
grep -q '^| qk-hot | ' "$out/summary.md" && grep -q '^## The key-value cache and decoding' "$out/summary.md" &&
    grep -q '^## Group-limited routing' "$out/summary.md" && grep -q "Built from commit" "$out/summary.md"
check "summary.md: the tables and the provenance" $? "$(head -n 20 "$out/summary.md")"
cp "$out/summary.csv" "$tmp/summary.csv"
cp "$out/mtp.csv" "$tmp/mtp.csv"
bash chapters/10-frontier/ablate.sh --smoke --summarize > /dev/null 2>&1 && cmp -s "$out/summary.csv" "$tmp/summary.csv" &&
    cmp -s "$out/mtp.csv" "$tmp/mtp.csv"
check "--summarize redoes the same summary.csv and mtp.csv" $? "$(diff "$out/summary.csv" "$tmp/summary.csv" | head)"
bash chapters/10-frontier/ablate.sh --smoke --only nosuch > "$tmp/out" 2>&1
check "--only with an unknown arm exits 2 and names the arms" \
    $([ $? -eq 2 ] && grep -q "no arm named 'nosuch'; the names are: mha .*group mpi" "$tmp/out"; echo $?) "$(cat "$tmp/out")"
bash chapters/10-frontier/ablate.sh --fast > "$tmp/out" 2>&1
check "an unknown option exits 2" $([ $? -eq 2 ] && grep -q usage "$tmp/out"; echo $?) "$(cat "$tmp/out")"

# 2. what the program found
awk -F, 'NR == 1 { next } { n++; if ($4 != $5 || $7 > 1e-4) bad++; p[$1] = $2; b[$1] = $4 }
    END { r = p["mla"] / p["mha"]; g = p["gqa"] / p["mha"]
          exit !(n == 4 && !bad && b["mha"] == 2 * 4 * 4 * 32 * 4 && b["gqa"] == b["mha"] / 2 &&
                 b["mqa"] == b["mha"] / 4 && b["mla"] == 4 * (64 + 16) * 4 &&
                 r > 0.98 && r < 1.02 && g > 0.98 && g < 1.02) }' "$out/cache.csv"
check "cache.csv: the decoder's bytes a token equal the formula, params within 2%, cached = full forward" $? \
    "$(cat "$out/cache.csv")"
awk -F, '$1 == "qk-head" || $1 == "qk-hot" { n++; if ($8 < 0.9 || $8 > 1.1 || $9 < 0.9 || $9 > 1.1) bad++ }
    END { exit !(n == 2 && !bad) }' "$out/summary.csv"
check "qk-norm: the queries' and keys' RMS about 1" $? "$(grep qk "$out/summary.csv")"
awk -F, '$1 == "group" { ok = $11 == 1 && $13 <= 1 } END { exit !ok }' "$out/summary.csv"
check "group (topk_group=1): one process a token, at most one other it sends to" $? "$(grep '^group' "$out/summary.csv")"

# 3. the program alone, and its bad input
"$prog" > "$tmp/fresh.txt" 2>&1 && cmp -s "$tmp/fresh.txt" "$out/frontier.txt" &&
    grep -q "^1\. parameters and the key-value cache" "$tmp/fresh.txt" && grep -q "^3\. published shapes" "$tmp/fresh.txt"
check "the program on fresh models: its three parts, the same as the script's frontier.txt" $? "$(head -n 5 "$tmp/fresh.txt")"
ckpt=runs/ch10-mha-smoke/ckpt.bin
"$prog" --ckpt "$ckpt" --step 12 > "$tmp/rows" 2>&1
[ $? -eq 0 ] && [ "$(wc -l < "$tmp/rows")" -eq 3 ] && head -n 1 "$tmp/rows" | grep -q '^run,step,layer,max_attn_logit'
check "the program on a checkpoint: a header and a row a block" $? "$(cat "$tmp/rows")"
bad_prog() { # LABEL WORDS ARGS...
    local label=$1 words=$2
    shift 2
    "$prog" "$@" > "$tmp/out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$words" "$tmp/out"
    check "$label: exit 2" $? "status $rc: $(head -c 300 "$tmp/out")"
}
bad_prog "a missing checkpoint" "no checkpoint" --ckpt "$tmp/none.bin"
bad_prog "--ep that does not divide the experts" "does not divide" --ckpt "$ckpt" --ep 3
bad_prog "an unknown option" "usage" --fast 1

# 4. the multi-token prediction arm
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { n++; r[$1] = $0; d[$1] = $c["depth"]; st[$1] = $c["steps"]; f[$1] = $c["flops_token"]; t[$1] = $c["train_tflops"]
      v[$1] = $c["val_loss"]; m1[$1] = $c["mtp1_loss"]; m2[$1] = $c["mtp2_loss"]; k[$1] = $c["draft_kept"]
      g[$1] = $c["draft_guesses"]; s[$1] = $c["draft_steps"]; if ($c["exit_status"] != 0 || !(v[$1] > 0 && v[$1] < 10)) bad++ }
    END { step1 = t["mtp0"] / st["mtp0"]
          exit !(n == 5 && !bad && d["mtp0"] == 0 && d["mtp1"] == 1 && d["mtp2"] == 2 && d["mtp0-c1"] == 0 && d["mtp0-c2"] == 0 &&
                 st["mtp1"] == st["mtp0"] && st["mtp2"] == st["mtp0"] && f["mtp0"] < f["mtp1"] && f["mtp1"] < f["mtp2"] &&
                 st["mtp0-c1"] > st["mtp0"] && st["mtp0-c2"] > st["mtp0-c1"] &&
                 t["mtp0-c1"] - t["mtp1"] < step1 && t["mtp1"] - t["mtp0-c1"] < step1 &&
                 t["mtp0-c2"] - t["mtp2"] < step1 && t["mtp2"] - t["mtp0-c2"] < step1 &&
                 m1["mtp0"] == "" && m1["mtp1"] > 0 && m2["mtp1"] == "" && m1["mtp2"] > 0 && m2["mtp2"] > 0 &&
                 k["mtp0"] == "" && g["mtp1"] > 0 && k["mtp1"] <= g["mtp1"] && g["mtp2"] > 0 && k["mtp2"] <= g["mtp2"] &&
                 s["mtp1"] >= g["mtp1"] && s["mtp1"] + k["mtp1"] == s["mtp2"] + k["mtp2"]) }' "$out/mtp.csv"
check "mtp.csv: depths 0, 1, 2 at equal steps, depth 0 at their FLOPs, the modules' losses, the draft's guesses and steps (steps + accepted guesses the same bytes for both)" $? \
    "$(cat "$out/mtp.csv")"
awk -F, 'NR > 1 && $1 == "mha" { a = $4 } END { print a }' "$out/summary.csv" > "$tmp/mha_val"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $1 == "mtp0" { print $c["val_loss"] }' "$out/mtp.csv" |
    cmp -s - "$tmp/mha_val"
check "mtp0, depth 0 in one go, ends at the baseline's loss of four legs" $? "$(cat "$tmp/mha_val"); $(grep '^mtp0,' "$out/mtp.csv")"
grep -q '^## At equal steps and at equal compute' "$out/mtp.md" && grep -q '^| mtp0-c2 | 0 | ' "$out/mtp.md" &&
    [ "$(head -c 4 "$out/mtp.png" | od -An -c | tr -d ' ')" = "211PNG" ]
check "mtp.md its tables, mtp.png a PNG" $? "$(head -n 12 "$out/mtp.md")"

finish
