#!/usr/bin/env bash
# Chapter 8: the same MoE on bytes and on BPE vocabularies of 4096 and 16384 tokens of the same
# text, at equal training compute.
#
#   bash chapters/08-data-mix/vocab.sh            # the bytes arm 600 steps (the handbook's numbers)
#   bash chapters/08-data-mix/vocab.sh --quick    # the bytes arm 150 steps
#   bash chapters/08-data-mix/vocab.sh --smoke    # every arm for a few steps of a tiny model (the test)
#   bash chapters/08-data-mix/vocab.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/08-data-mix/vocab.sh --only NAME [--quick]   # (re)train one arm
#   MOE_BIN=path/to/moe bash chapters/08-data-mix/vocab.sh
#
# The tokenizers learn from the training documents of chapter 0's byte corpus (the text of
# data/corpus/train.bin, never its validation documents); moe corpus --tokenizer then encodes
# the same documents with the same split (runs/ch08-vocab-data/: the tokenizers, one corpus a
# vocabulary). Every arm is chapter 0's default MoE at model.vocab = the vocabulary's size, the
# same seed, batch and context in tokens (the BPE arms again with a second seed, their gap being
# the small one). Equal compute is equal training FLOPs: moe plan's FLOPs a token (forward and
# backward matrix products, the head's 6 x d_model x vocab among them) times the tokens, so an
# arm of a larger vocabulary trains fewer steps (steps x FLOPs a token is the bytes arm's). The
# time a token is measured apart from the runs, in short runs of the three vocabularies taken in
# turn, a few rounds (the median): on a machine shared with other work the load then weighs on
# every vocabulary alike. Writes runs/ch08-vocab-NAME[-quick|-smoke]/,
# runs/ch08-vocab-timing[-quick|-smoke].txt and in
# plots/08-data-mix[-quick|-smoke]/: vocab.csv and vocab.md (one row an arm: parameters in the
# embedding and head, the head's share of the FLOPs, the measured time a token, the text seen,
# validation loss a token and bits a byte, the router's balance), vocab_curves.csv,
# vocab_provenance.txt, vocab_curves.png and vocab_parts.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/08-data-mix
usage_text="[--quick | --smoke] [--summarize] [--only NAME]..."
. chapters/lib.sh

# name | model.vocab | train.seed
ARMS=("bytes|256|1337" "bpe-4k|4096|1337" "bpe-16k|16384|1337" "bpe-4k-seed2|4096|2" "bpe-16k-seed2|16384|2")
MAIN=(bytes bpe-4k bpe-16k) # the figures' bars and the timing

ablate_args "$@"
steps_bytes=$(by_mode 600 150 36)
rounds=$(by_mode 3 1 1)        # timing: runs of each vocabulary, in turn
time_steps=$(by_mode 30 12 4)  # timing: steps a run (the first quarter not counted)
# shellcheck disable=SC2046 # the arms' names, one word each
check_only $(for v in "${ARMS[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/08-data-mix$suffix
mkdir -p "$out"
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT

# a shard's header fields (src/REFERENCE.md, "Token shards")
n_tokens() { od -An -tu8 -j16 -N8 "$1" | tr -d ' '; }
n_docs() { od -An -tu4 -j24 -N4 "$1" | tr -d ' '; }

# ---- the tokenizers and their corpora --------------------------------------------------------
data=runs/ch08-vocab-data
kind=$(cat data/corpus/source.txt 2> /dev/null || echo debian)
if [ "$kind" = fallback ]; then # the files make data built the fallback corpus from (Makefile)
  from=(--from data/fallback/{en,de,es,it,ru}.txt)
  while read -r h; do from+=("code=$h"); done < <(printf '%s\n' src/*/*.h src/*/*/*.h | LC_ALL=C sort)
else
  from=()
fi
for v in "${ARMS[@]}"; do
  IFS='|' read -r name vocab seed <<<"$v"
  { [ "$vocab" = 256 ] || [ "$seed" != 1337 ]; } && continue
  if [ ! -f "$data/$name/train.bin" ] || [ ! -f "$data/$name/val.bin" ]; then
    mkdir -p "$data"
    if [ ! -f "$data/train.txt" ]; then # the byte shard's tokens are its text, documents back to back
      tail -c +$((256 + 16 * $(n_docs data/corpus/train.bin) + 1)) data/corpus/train.bin > "$data/train.txt.tmp"
      mv "$data/train.txt.tmp" "$data/train.txt"
    fi
    rm -rf "${data:?}/$name" "$data/$name.json"
    "$moe" tokenizer train --vocab "$vocab" --from "$data/train.txt" --out "$data/$name.json" > "$tmpd/tok" 2>&1 ||
      { cat "$tmpd/tok" >&2; exit 2; }
    "$moe" corpus ${from[@]+"${from[@]}"} --tokenizer "$data/$name.json" --out "$data/$name" > "$data/$name.txt"
  fi
done
val_bytes=$(n_tokens data/corpus/val.bin)
train_bytes=$(n_tokens data/corpus/train.bin)

# shards, FLOPs a token and parameters of each arm (moe plan, the engine's own counts)
declare -A train_of val_of flops emb head total steps_of vocab_of
for v in "${ARMS[@]}"; do
  IFS='|' read -r name vocab seed <<<"$v"
  vocab_of[$name]=$vocab
  if [ "$vocab" = 256 ]; then
    train_of[$name]=data/corpus/train.bin; val_of[$name]=data/corpus/val.bin
  else
    name=${name%-seed*} # a seed arm trains on its vocabulary's corpus
    train_of[${v%%|*}]=$data/$name/train.bin; val_of[${v%%|*}]=$data/$name/val.bin
    # the same documents: the BPE corpus holds every byte of the byte corpus (its table's total)
    have=$(awk '$1 == "total" { print $(NF - 1) }' "$data/$name.txt")
    if [ "$have" != $((train_bytes + val_bytes)) ]; then
      echo "$data/$name holds $have bytes of text, data/corpus $((train_bytes + val_bytes)): not the same documents; remove $data and run again" >&2
      exit 2
    fi
  fi
  name=${v%%|*}
  echo "model.vocab = $vocab" > "$tmpd/$name.cfg"
  # shellcheck disable=SC2046 # MODEL_SETS: the smoke model's shape
  "$moe" plan --config "$tmpd/$name.cfg" ${MODEL_SETS[@]+"${MODEL_SETS[@]}"} --json > "$tmpd/$name.json"
  read -r "flops[$name]" "emb[$name]" "head[$name]" "total[$name]" < <(tr ',{}' '\n' < "$tmpd/$name.json" |
    awk -F': ' '{ gsub(/[" ]/, "", $1); v[$1] = $2 } END { print v["flops_token"], v["embedding"], v["head"], v["total"] }')
done
for v in "${ARMS[@]}"; do
  name=${v%%|*}
  steps_of[$name]=$(awk -v s="$steps_bytes" -v fb="${flops[bytes]}" -v f="${flops[$name]}" \
                    'BEGIN { n = int(s * fb / f + 0.5); print n < 2 ? 2 : n }')
done

# ---- the runs ------------------------------------------------------------------------------
all=()
dirs=()
trained=0
for v in "${ARMS[@]}"; do
  IFS='|' read -r name vocab seed <<<"$v"
  dir=runs/ch08-vocab-$name$suffix
  st=${steps_of[$name]}
  if wants "$name"; then
    rm -rf "$dir"
    echo "== $name: model.vocab=$vocab, $st steps (equal training FLOPs), seed $seed"
    "$moe" train --out "$dir" --quiet ${MODEL_SETS[@]+"${MODEL_SETS[@]}"} ${TRAIN_SETS[@]+"${TRAIN_SETS[@]}"} \
      --set model.vocab="$vocab" --set "data.train=${train_of[$name]}" --set "data.val=${val_of[$name]}" \
      --set train.steps="$st" --set train.warmup=$((st / 12)) --set train.eval_every=$(((st + 5) / 6)) \
      --set train.seed="$seed" ${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}
    trained=1
  fi
  all+=("$name=$dir")
  dirs+=("$dir")
done

# the time a token: short runs of the three vocabularies in turn, $rounds times; a line
# "name round us" a run, us its median step time over the steps after the first quarter,
# divided by the step's tokens
timing=runs/ch08-vocab-timing$suffix.txt
if [ "$trained" = 1 ] || { [ "$summarize_only" = 0 ] && [ ! -f "$timing" ]; }; then
  echo "== timing: $rounds round(s) of $time_steps steps of each vocabulary"
  : > "$timing.tmp"
  for r in $(seq "$rounds"); do
    for name in "${MAIN[@]}"; do
      rm -rf "$tmpd/time"
      "$moe" train --out "$tmpd/time" --quiet ${MODEL_SETS[@]+"${MODEL_SETS[@]}"} ${TRAIN_SETS[@]+"${TRAIN_SETS[@]}"} \
        --set model.vocab="${vocab_of[$name]}" --set "data.train=${train_of[$name]}" \
        --set "data.val=${val_of[$name]}" --set train.steps="$time_steps" --set train.warmup=0 --set train.eval_every=0 \
        --set train.ckpt_every=0 ${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"} > /dev/null
      awk -F, -v w=$((time_steps / 4)) 'NR > 1 && $1 > w && $7 > 0 { print 1e6 / $7 }' "$tmpd/time/train.csv" |
        sort -g | awk -v n0="$name" -v r="$r" '{ x[++n] = $1 }
          END { printf "%s %d %.3f\n", n0, r, n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }' >> "$timing.tmp"
    done
  done
  mv "$timing.tmp" "$timing"
fi
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has a run"; exit 0
fi
[ -f "$timing" ] || { echo "$0: no $timing: run without --summarize to measure the time a token" >&2; exit 2; }

# ---- summary: one row an arm -----------------------------------------------------------------
# emb_head_share: (embedding + head) / all parameters; head_flop_share: the head's 6 x d_model x
# vocab of the FLOPs a token; us_per_token: the time a token of the timing runs (the median
# over the rounds; a seed arm has its vocabulary's); time_vs_bytes: that against the bytes arm's; text_mb: MB of text
# the run read (steps x batch x seq_len tokens x the training shard's bytes a token);
# bytes_per_token: of the validation shard (the same documents in every arm); val_bpb: the last
# validation loss a token / bytes_per_token / ln 2; maxvio, cv: the training batches' over the
# last 20% of the steps, mean over the blocks (router.csv); domain_mi: as in summary.csv
{
  echo "arm,vocab,steps,flops_token,train_pflops,params,emb_head,emb_head_share,head_flop_share,us_per_token,time_vs_bytes,text_mb,bytes_per_token,val_loss,val_bpb,maxvio,cv,domain_mi"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name vocab seed <<<"$v"
    dir=runs/ch08-vocab-$name$suffix
    st=$(awk -F, 'NR > 1 { s = $1 } END { print s }' "$dir/train.csv")
    bt=$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 } END { print b * t }' "$dir/config.txt")
    dm=$(awk -F' = ' '$1 == "model.d_model" { print $2 }' "$dir/config.txt")
    us=$(awk -v n0="${name%-seed*}" '$1 == n0 { print $3 }' "$timing" | sort -g |
         awk '{ x[++n] = $1 } END { printf "%.2f", n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }')
    vt=$(n_tokens "${val_of[$name]}")
    tt=$(n_tokens "${train_of[$name]}")
    val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { printf "%.4f", v }' "$dir/train.csv")
    maxvio=$(awk -F, -v from=$((st * 4 / 5)) 'NR > 1 && $1 > from { m += $3; c += $4; n++ }
             END { printf "%.3f,%.3f", n ? m / n : 0, n ? c / n : 0 }' "$dir/router.csv")
    mi=$(domain_mi "$dir/domains.csv")
    awk -v OFS=, -v name="$name" -v vocab="$vocab" -v st="$st" -v f="${flops[$name]}" -v bt="$bt" \
        -v p="${total[$name]}" -v eh=$((emb[$name] + head[$name])) -v dm="$dm" -v us="$us" \
        -v vb="$val_bytes" -v vt="$vt" -v tb="$train_bytes" -v tt="$tt" -v val="$val" \
        -v rv="$maxvio" -v mi="$mi" 'BEGIN {
          print name, vocab, st, f, sprintf("%.4g", st * bt * f / 1e15), p, eh, sprintf("%.4f", eh / p),
                sprintf("%.4f", 6 * dm * vocab / f), us, "US", sprintf("%.3f", st * bt * tb / tt / 1e6),
                sprintf("%.3f", vb / vt), val, sprintf("%.4f", val * vt / vb / log(2)), rv, mi }'
  done
} > "$tmpd/vocab.csv"
# the time a token against the bytes arm's
awk -F, -v OFS=, 'NR == 1 { print; next } { row[NR] = $0; if ($1 == "bytes") ref = $10 }
     END { for (i = 2; i <= NR; i++) { $0 = row[i]; $11 = sprintf("%.2f", $10 / ref); print } }' \
  "$tmpd/vocab.csv" > "$out/vocab.csv"

{
  echo "| arm | vocab | steps | FLOPs a token | training PFLOPs | parameters | embedding + head | their share | head's share of the FLOPs | µs a token | time a token vs bytes | text read (MB) | bytes a token (val) | val loss (nats a token) | val bits a byte | MaxVio | CV | domain-expert information |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "|"; for (i = 1; i <= 18; i++) printf " %s |", $i; print "" }' "$out/vocab.csv"
  echo
  echo "Every arm: chapter 0's default MoE at model.vocab = the vocabulary, the same batch and context (in tokens), seed 1337 (the -seed2 arms: 2), trained for equal FLOPs (steps x FLOPs a token, moe plan's count of the forward and backward matrix products, is the bytes arm's $steps_bytes steps). The BPE tokenizers learned from the text of data/corpus/train.bin; their corpora hold the same documents and the same split ($data/). Val loss: at the last step, over train.eval_batches x train.batch windows of the validation shard; bits a byte = nats a token x the validation shard's tokens / its $val_bytes bytes / ln 2. µs a token: the median over $rounds round(s) of short runs ($time_steps steps) of the three vocabularies taken in turn (a run's median step time over its steps after the first quarter, divided by the step's tokens; a seed arm has its vocabulary's), measured apart from the training runs so that a load on the machine weighs on every vocabulary alike. MaxVio and CV: the training batches', mean over the MoE blocks and the last 20% of the steps. Domain-expert information: as in summary.md."
  provenance_note "${all[@]}" | sed 's/provenance.txt next to/vocab_provenance.txt next to/'
} > "$out/vocab.md"

write_curves "$tmpd/curves.csv" "${all[@]}"
# vocab_curves.csv: the validation loss against the FLOPs and the text read, in bits a byte too
awk -F, -v OFS=, 'FNR == 1 && NR == 1 { next } NR == FNR { f[$1] = $4; r[$1] = $13; t[$1] = $12 / $3; next }
     FNR == 1 { print "arm,step,train_pflops,text_mb,val_loss,val_bpb"; next }
     { s = $2; print $1, s, sprintf("%.5f", s * f[$1] * BT / 1e15), sprintf("%.4f", s * t[$1]),
       $3, sprintf("%.4f", $3 / r[$1] / log(2)) }' \
  BT="$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 } END { print b * t }' "${dirs[0]}/config.txt")" \
  "$out/vocab.csv" "$tmpd/curves.csv" > "$out/vocab_curves.csv"
# (provenance.txt of the folder is the mix ablation's)
write_provenance "$tmpd" "${all[@]}"
mv "$tmpd/provenance.txt" "$out/vocab_provenance.txt"

# ---- figures ---------------------------------------------------------------------------------
# a line an arm; a seed arm in its vocabulary's colour, dashed (chapters/series.gp: 9-16)
names=()
types=()
for v in "${ARMS[@]}"; do
  n=${v%%|*}
  names+=("$n")
  for i in "${!MAIN[@]}"; do
    [ "${n%-seed*}" = "${MAIN[$i]}" ] && types+=($((i + 1 + (${#n} != ${#MAIN[$i]} ? 8 : 0))))
  done
  awk -F, -v n="$n" '$1 == n { print $3, $6, $5 }' "$out/vocab_curves.csv" > "$tmpd/$n.val"
done
awk -F, -v main="${MAIN[*]}" 'BEGIN { split(main, m, " "); for (i in m) keep[m[i]] = 1 }
     NR > 1 && keep[$1] { print $1, $8 * 100, $9 * 100, $11, $16 }' "$out/vocab.csv" > "$tmpd/parts.dat"
gnuplot -e "dir='$tmpd'; names='${names[*]}'; types='${types[*]}'; out='$out/vocab_curves.png'" $here/vocab_curves.gp
gnuplot -e "data='$tmpd/parts.dat'; out='$out/vocab_parts.png'" $here/vocab_parts.gp
cat "$out/vocab.md"
echo "wrote $out/: vocab.csv vocab.md vocab_curves.csv vocab_provenance.txt vocab_curves.png vocab_parts.png"
