#!/usr/bin/env bash
# chapters/lib.sh: what the ablation scripts (chapters/*/ablate.sh, chapters/00-intro/compare.sh)
# share. Each script sources it from the repository root; it is never run alone.
#
#   ablate_args "$@"      the common options; sets
#       mode              full | quick | smoke
#       suffix            "" | -quick | -smoke: runs/chNN-NAME$suffix, plots/NN-name$suffix
#       summarize_only    1 with --summarize (tables and figures from the existing runs)
#       only              the names given with --only (each may be repeated; empty: every arm)
#       MODEL_SETS        --set options of the model's shape every fresh run gets first: the
#                         tiny model of --smoke, empty otherwise (full mode trains exactly the
#                         settings the script lists)
#       TRAIN_SETS        --set options of the batch and evaluation size (--smoke only)
#       EXTRA_SETS        --set options of $EXTRA_SET (extra_sets), which every run gets last
#   extra_sets            the settings of the environment's EXTRA_SET="key=value ..." as
#                         EXTRA_SETS; with some, suffix gains -with-KEY-VALUE... (or
#                         -$EXTRA_TAG) so that the runs and figures are not the stock ones
#   extra_note            the sentence summary.md says about them (nothing without any)
#   ablate_build [mpi]    build what the runs need (unless MOE_BIN names a binary); sets $moe
#   check_only NAME...    every --only name must be one of NAME..., else exit 2 with the list
#   wants NAME            true when NAME is to be trained now
#   launch ARGS...        the script's `train ARGS` in the background, two at a time
#   launched              wait for every run launch started
#   warmup_sets STEPS     quick and smoke: --set train.warmup=STEPS/12 (the full runs' 50 of
#                         600); full mode: nothing, the default warm-up stays
#   missing_runs DIR...   prints the run directories without a train.csv (nothing when all exist)
#   require_runs WHAT DIR...   missing runs: say which and how to train them; return 1
#   prov DIR KEY          one value of a run's provenance.txt
#   write_provenance OUT NAME=DIR...   OUT/provenance.txt, gathered from the runs' own
#   provenance_note NAME=DIR...        the sentence summary.md says about commits and -dirty
#   write_curves FILE NAME=DIR...      FILE (csv): arm,step,val_loss at every evaluation
#   seed_spread FILE REF [COL]        "n min max" of column COL (val_loss) over the rows REF and
#                                     REF-seedN of a summary.csv (its header names the columns)
#   domain_mi CSV                     the domain-expert mutual information of a domains.csv
#   final_loss_figure PNG TITLE REF COL CSV NAME...   the dot chart of the final losses of the
#                                     arms NAME... (chapters/final_loss.gp) with REF's seed spread
#   seed_note REF COL CSV             the sentence summary.md says about that spread
# and for the scripts that run layouts against moe plan (03-expert-parallel/layouts.sh,
# 11-parallelism/ablate.sh), whose one-process run is $runs/reference:
#   field KEY                         the first number of KEY in a JSON text on stdin
#   step_s DIR                        a run's median step in seconds (its step's tokens over
#                                     train.csv's tok_s)
#   loss_rel DIR [STEPS]              the largest relative difference of a step's loss from
#                                     $runs/reference's, over every step or the first STEPS
#
# The smoke mode exists to run every arm, summary and figure of a script end to end in seconds
# (tests/test_ablations.sh): a model of width 32, 2 blocks, context 32, batch 4, its numbers mean
# nothing.

usage_text=${usage_text:-"[--quick | --smoke] [--summarize] [--only NAME]..."}
ablate_usage() {
    echo "usage: $0 $usage_text" >&2
    echo "  --quick      fewer steps (plots/*-quick/)   --smoke  every arm for a few steps of a tiny model (plots/*-smoke/)" >&2
    echo "  --summarize  only redo the tables and figures from the existing runs" >&2
    echo "  --only NAME  (re)train this arm (repeatable), then summarise if every run exists" >&2
    exit 2
}

ablate_args() {
    mode=full
    suffix=""
    summarize_only=0
    only=()
    MODEL_SETS=()
    TRAIN_SETS=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --quick | --smoke)
                if [ "$mode" != full ] && [ "$mode" != "${1#--}" ]; then
                    echo "$0: --quick and --smoke exclude each other" >&2
                    exit 2
                fi
                mode=${1#--} ;;
            --summarize) summarize_only=1 ;;
            --only)
                [ $# -ge 2 ] && [ -n "$2" ] || { echo "$0: --only needs an arm name" >&2; exit 2; }
                only+=("$2")
                shift ;;
            -h | --help) ablate_usage ;;
            *) echo "$0: unknown option '$1'" >&2; ablate_usage ;;
        esac
        shift
    done
    if [ "$summarize_only" = 1 ] && [ ${#only[@]} -gt 0 ]; then
        echo "$0: --summarize trains nothing; --only names what to train: use one of them" >&2
        exit 2
    fi
    [ "$mode" = full ] || suffix=-$mode
    extra_sets
    if [ "$mode" = smoke ]; then
        MODEL_SETS=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2
                    --set model.seq_len=32 --set model.d_ff=64 --set moe.d_expert=32)
        TRAIN_SETS=(--set train.batch=4 --set train.eval_batches=2 --set train.ckpt_every=0)
    fi
    return 0
}

# EXTRA_SET="train.device=cuda model.d_model=512": settings for every run of the script, after
# its own (the same rehearsal on a GPU or a bigger model). Their runs and figures go to folders
# of their own, named after the settings (runs/ch01-aux-with-device-cuda-d_model-512) or
# EXTRA_TAG (runs/ch01-aux-gpu), never over the stock ones.
extra_sets() {
    local kv key tag="" words=()
    EXTRA_SETS=()
    read -ra words <<< "${EXTRA_SET:-}"
    for kv in ${words[@]+"${words[@]}"}; do
        case $kv in
            [a-z]*.*=?*) ;;
            *) echo "$0: EXTRA_SET: '$kv' is not a key=value setting (moe info --keys lists the keys)" >&2
               exit 2 ;;
        esac
        EXTRA_SETS+=(--set "$kv")
        key=${kv%%=*}
        tag="$tag-${key##*.}-${kv#*=}" # model.d_model=512: -d_model-512
    done
    [ ${#EXTRA_SETS[@]} -gt 0 ] || return 0
    tag=$(printf '%s' "$tag" | tr -c 'A-Za-z0-9._-' '_')
    # a long list: its checksum instead (the same settings, the same folders)
    [ ${#tag} -le 48 ] || tag=-$(printf '%s' "${words[*]}" | cksum | cut -d' ' -f1)
    if [ -n "${EXTRA_TAG:-}" ]; then
        case $EXTRA_TAG in
            *[!A-Za-z0-9._-]* | .*) echo "$0: EXTRA_TAG '$EXTRA_TAG': letters, digits, '.', '_', '-' only" >&2
                                    exit 2 ;;
        esac
        tag=-$EXTRA_TAG
    else
        tag=-with$tag
    fi
    suffix="${suffix:-}$tag"
}

extra_note() {
    local words=()
    read -ra words <<< "${EXTRA_SET:-}"
    [ ${#words[@]} -gt 0 ] || return 0
    printf 'Extra settings (EXTRA_SET), applied to every run after its own: %s.\n' "${words[*]}"
}

# by_mode FULL QUICK SMOKE: the value of the three for this run's $mode (set by ablate_args).
by_mode() {
  case $mode in full) echo "$1" ;; quick) echo "$2" ;; smoke) echo "$3" ;; esac
}

ablate_build() {
    if [ -z "${MOE_BIN:-}" ]; then
        if [ "${1:-}" = mpi ]; then
            command -v mpicc > /dev/null || { echo "no mpicc: run make deps (Open MPI) first" >&2; exit 2; }
            make --no-print-directory mpi data/corpus/train.bin > /dev/null
            moe=build/mpi/moe
        else
            make --no-print-directory build/moe data/corpus/train.bin > /dev/null
            moe=build/moe
        fi
    else
        moe=$MOE_BIN # another binary (e.g. a copy, while the tree is rebuilt)
        [ -x "$moe" ] || { echo "MOE_BIN=$moe is not an executable" >&2; exit 2; }
        [ -f data/corpus/train.bin ] && [ -f data/corpus/val.bin ] ||
            make --no-print-directory data/corpus/train.bin > /dev/null
    fi
}

check_only() {
    local o n found
    for o in "${only[@]}"; do
        found=0
        for n in "$@"; do [ "$n" = "$o" ] && found=1; done
        if [ "$found" = 0 ]; then
            echo "no arm named '$o'; the names are: $*" >&2
            exit 2
        fi
    done
}

wants() {
    [ "$summarize_only" = 0 ] || return 1
    [ ${#only[@]} -eq 0 ] && return 0
    local o
    for o in "${only[@]}"; do [ "$o" = "$1" ] && return 0; done
    return 1
}

# launch ARGS...: `train ARGS` (the script's own) in the background, two at a time (the
# machine's cores, one thread each: OMP_NUM_THREADS=1); a failed run (exit status 1 or 2) stops
# the script at the next wait (of launch, or of launched)
pending=0
launch() {
    train "$@" &
    pending=$((pending + 1))
    if [ "$pending" -ge 2 ]; then wait -n; pending=$((pending - 1)); fi
}
# launched: wait for every run launch started
launched() { while [ "$pending" -gt 0 ]; do wait -n; pending=$((pending - 1)); done; }

warmup_sets() { [ "$mode" = full ] || echo "--set train.warmup=$(($1 / 12))"; }

missing_runs() {
    local d
    for d in "$@"; do [ -f "$d/train.csv" ] || echo "$d"; done
}

require_runs() { # WHAT DIR...: nothing missing, or the message and status 1
    local what=$1 miss
    shift
    miss=$(missing_runs "$@" | tr '\n' ' ')
    [ -z "$miss" ] && return 0
    echo "$what: no run in ${miss% }; train them first (without --summarize, or with --only NAME)" >&2
    return 1
}

prov() { awk -F' = ' -v k="$2" '$1 == k { print $2; exit }' "$1/provenance.txt" 2> /dev/null; }

# NAME=DIR pairs -> "name dir" lines on stdout
pairs() { local p; for p in "$@"; do echo "${p%%=*} ${p#*=}"; done; }

# distinct values of one provenance key over the runs, "value (N runs)" joined by ", "
distinct() { # KEY NAME=DIR...
    local key=$1 name dir
    shift
    pairs "$@" | while read -r name dir; do
        v=$(prov "$dir" "$key")
        echo "${v:-unknown}"
    done | sort | uniq -c |
        awk '{ n = $1; $1 = ""; sub(/^ /, ""); printf "%s%s (%d run%s)", (NR > 1 ? ", " : ""), $0, n, (n > 1 ? "s" : "") }
             END { print "" }'
}

write_provenance() { # OUT NAME=DIR...
    local out=$1 name dir here_commit
    shift
    here_commit=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
    git diff --quiet HEAD -- 2> /dev/null || here_commit=$here_commit-dirty
    {
        echo "# Where the runs summarised here come from: gathered from each run's provenance.txt"
        echo "# (runs/NAME/provenance.txt) by $0."
        echo "runs = $#"
        echo "commits = $(distinct commit "$@")"
        local dirty
        dirty=$(pairs "$@" | while read -r name dir; do
                    case $(prov "$dir" commit) in *-dirty) printf '%s ' "$name" ;; esac
                done)
        if [ -n "$dirty" ]; then
            echo "dirty = yes: ${dirty% } (built from a tree with uncommitted changes)"
        else
            echo "dirty = no"
        fi
        echo "data.train = $(distinct data.train "$@")"
        echo "data.val = $(distinct data.val "$@")"
        echo "cpu = $(distinct cpu "$@")"
        echo "host = $(distinct host "$@")"
        echo "cores_online = $(distinct cores_online "$@")"
        echo "threads = $(distinct threads "$@")"
        echo "summarised_with = $here_commit"
        echo "extra_set = ${EXTRA_SET:-(none)}"
        echo
        echo "# run: commit, threads, started, seed"
        pairs "$@" | while read -r name dir; do
            echo "$name: $(prov "$dir" commit), threads $(prov "$dir" threads), started $(prov "$dir" started), seed $(prov "$dir" seed)"
        done
    } > "$out/provenance.txt"
}

provenance_note() { # NAME=DIR...
    local name dir dirty="" nd=0
    while read -r name dir; do
        case $(prov "$dir" commit) in *-dirty) dirty="$dirty $name"; nd=$((nd + 1)) ;; esac
    done < <(pairs "$@")
    [ "$nd" -gt 1 ] && [ "$nd" = $# ] && dirty=" all $# runs"
    printf 'Built from commit(s) %s; machine %s, threads %s (provenance.txt next to this file has each run'"'"'s).' \
        "$(distinct commit "$@")" "$(distinct cpu "$@")" "$(distinct threads "$@")"
    if [ -n "$dirty" ]; then
        printf ' **Built from a dirty tree** (uncommitted changes, so no commit has exactly their code):%s.\n' "$dirty"
    else
        printf ' No run was built from a dirty tree.\n'
    fi
    extra_note
}

write_curves() { # FILE NAME=DIR...: the validation loss of every arm at every evaluation
    local file=$1 name dir
    shift
    {
        echo "arm,step,val_loss"
        pairs "$@" | while read -r name dir; do
            awk -F, -v name="$name" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                $c["val_loss"] != "" { print name "," $1 "," $c["val_loss"] }' "$dir/train.csv"
        done
    } > "$file"
}

seed_spread() { # SUMMARY_CSV REF [COLUMN]: "n min max" over the rows REF, REF-seed2, ...
    awk -F, -v ref="$2" -v col="${3:-val_loss}" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $1 == ref || index($1, ref "-seed") == 1 && substr($1, length(ref) + 6) ~ /^[0-9]+$/ {
            v = $c[col] + 0; n++
            if (n == 1 || v < lo) lo = v; if (n == 1 || v > hi) hi = v }
        END { printf "%d %.4f %.4f\n", n, lo, hi }' "$1"
}

seed_note() { # REF COL CSV: what summary.md says about the seed spread
    local n lo hi
    read -r n lo hi < <(seed_spread "$3" "$1" "$2")
    if [ "$n" -ge 2 ]; then
        awk -v n="$n" -v lo="$lo" -v hi="$hi" -v ref="$1" 'BEGIN {
            printf "Seed spread: %s trained with %d values of train.seed (arms %s, %s-seed2, ...) ends between %.4f and %.4f, a spread (max - min) of %.4f nats; it is measured on that arm only, and final_loss.png draws it on every arm as the size of difference another seed could make.\n", ref, n, ref, ref, lo, hi, hi - lo }'
    else
        echo "Seed spread: not measured (only one seed of $1 here; train $1-seed2 and $1-seed3 with --only): read differences under about 0.01 nats as noise."
    fi
}

domain_mi() { # DOMAINS_CSV: the mutual information of domain and expert at the last evaluation
    # (nats, mean over the MoE blocks; each domain weighs the same: I = H(mean_d p_d) -
    # mean_d H(p_d), 0 when every domain uses the experts alike, ln D at most)
    awk -F, 'NR > 1 { last = $1 } { row[NR] = $0 } END {
          for (r = 2; r <= NR; r++) { split(row[r], f, ","); if (f[1] != last) continue
            p[f[2], f[3], f[4]] = f[5]; L[f[2]] = 1; D[f[3]] = 1; E[f[4]] = 1 }
          for (l in L) { nd = 0; hd = 0; for (e in E) m[e] = 0
            for (d in D) { nd++; for (e in E) { q = p[l, d, e]; m[e] += q; if (q > 0) hd -= q * log(q) } }
            hm = 0; for (e in E) { q = m[e] / nd; if (q > 0) hm -= q * log(q) }
            s += hm - hd / nd; nl++ }
          printf "%.4f", nl ? s / nl : 0 }' "$1"
}

final_loss_figure() { # PNG TITLE REF COL CSV NAME...
    local png=$1 ttl=$2 ref=$3 col=$4 csv=$5 d n lo hi note
    shift 5
    d=$(mktemp -d)
    read -r n lo hi < <(seed_spread "$csv" "$ref" "$col")
    awk -F, -v col="$col" -v names="$*" -v ref="$ref" -v lo="$lo" -v hi="$hi" -v n="$n" -v seeds="$d/seeds" '
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        { v[$1] = $c[col] }
        END { k = split(names, a, " "); half = n >= 2 ? (hi - lo) / 2 : 0
              for (i = 1; i <= k; i++) { if (!(a[i] in v) || v[a[i]] == "") continue
                  x = v[a[i]] + 0
                  if (a[i] == ref && n >= 2) printf "%d %s %.6f %.6f %.6f 1\n", i, a[i], x, lo, hi
                  else printf "%d %s %.6f %.6f %.6f 0\n", i, a[i], x, x - half, x + half
                  if (a[i] == ref) y = i }
              for (s in v) if (s == ref || index(s, ref "-seed") == 1) print v[s], y > seeds }' \
        "$csv" > "$d/data"
    touch "$d/seeds"
    if [ "$n" -ge 2 ]; then
        note=$(awk -v n="$n" -v lo="$lo" -v hi="$hi" -v ref="$ref" 'BEGIN {
            printf "bars: min-max of %s over %d seeds (train.seed), %.4f nats, measured on that arm only and drawn on every arm", ref, n, hi - lo }')
    else
        note="no seed spread: only one seed of $ref was trained (train $ref-seed2 and -seed3 with --only)"
    fi
    gnuplot -e "data='$d/data'; seeds='$d/seeds'; out='$png'; ttl='$ttl'; note='$note'; H=$((200 + 28 * $#))" \
        chapters/final_loss.gp
    rm -rf "$d"
}

field() { sed -n "s/.*\"$1\": *\([-0-9.e+]*\).*/\1/p" | head -n 1; }

step_s() {
    local bt
    bt=$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 }
                      $1 == "train.accum" { a = $2 } END { print b * t * a }' "$1/config.txt")
    awk -F, -v bt="$bt" 'NR > 1 { print bt / $7 }' "$1/train.csv" | sort -g |
        awk '{ a[NR] = $1 } END { printf "%.4f", a[int((NR + 1) / 2)] }'
}

loss_rel() {
    awk -F, -v last="${2:-0}" 'NR == FNR { if (FNR > 1) a[$1] = $2; next }
             FNR > 1 && (last == 0 || $1 <= last) { d = ($2 - a[$1]) / a[$1]; d = d < 0 ? -d : d; if (d > m) m = d }
             END { printf "%.2g", m }' "$runs/reference/train.csv" "$1/train.csv"
}
