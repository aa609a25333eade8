#!/usr/bin/env bash
# test_layout.sh: the folders of src/ depend on each other one way only.
#
# src/README.md's map lists the folders in order; a file may include headers of its own folder
# and of the folders listed before it, never after (no arrow back up, so no circle); a header
# at the top of src/ (moe.h, the public one) stands above them all and may include any; a
# subfolder (backend/cpu/) is part of its folder. Every #include "..." of every file under src/
# is checked against that order, and every folder of src/ must be in the map. Then the check
# itself on a scratch tree: an include that points up fails, naming the file and the arrow.
# Needs only bash, awk and grep: no build.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_layout: the folders of src/ and their arrows"

# layers SRC_DIR README: one pass over the includes, printing every arrow that points up
layers() {
    local src=$1 readme=$2
    mapfile -t order < <(awk -F'|' '/^## Map/ { on = 1 } on && /^\| `[a-z]+\/`/ {
        gsub(/[ `\/]/, "", $2); print $2 } on && /^## / && !/Map/ { exit }' "$readme")
    [ ${#order[@]} -gt 0 ] || { echo "no folders in the map of $readme"; return 1; }
    local -A rank=()
    local i=0 status=0 d file inc from to
    for d in "${order[@]}"; do rank[$d]=$i; i=$((i + 1)); done
    for d in "$src"/*/; do
        d=$(basename "$d")
        [ -n "${rank[$d]+x}" ] || { echo "src/$d/ is not in the map of $readme"; status=1; }
    done
    while IFS=: read -r file _ inc; do
        inc=${inc#*\"}; inc=${inc%%\"*}
        case $inc in */*) ;; *) continue ;; esac   # a header beside the file
        from=${file#"$src"/}
        case $from in */*) ;; *) continue ;; esac  # src/moe.h, the public header: above every folder
        from=${from%%/*}; to=${inc%%/*}
        [ "$from" = "$to" ] && continue
        [ -n "${rank[$to]+x}" ] || { echo "$file includes $inc: $to/ is not a folder of src/"; status=1; continue; }
        if [ "${rank[$to]}" -gt "${rank[$from]:-0}" ]; then
            echo "$file includes $inc: $from/ may not depend on $to/, which the map lists after it"
            status=1
        fi
    done < <(grep -rn '^#include "' "$src" --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh')
    return $status
}

layers src src/README.md > "$tmp/out" 2>&1
check "every include of src/ points to its own folder or one listed before it in src/README.md" $? \
    "$(head -n 20 "$tmp/out")"

# the training loop reads the model's routing through the model's functions (model/inspect.h,
# model/route_face.h): src/train/ includes neither the MoE block's pieces (moe/) nor the expert
# exchange (model/ep.h), and reaches into no block of the model (Model.blocks)
grep -rnE '^#include "(moe/|model/ep\.h)' src/train > "$tmp/out"
[ ! -s "$tmp/out" ]
check "src/train/ includes neither moe/ nor model/ep.h" $? "$(head -n 20 "$tmp/out")"
grep -rnE 'blocks\[' src/train > "$tmp/out"
[ ! -s "$tmp/out" ]
check "src/train/ reads no Model.blocks (the routing through model functions)" $? "$(head -n 20 "$tmp/out")"

# the check on a scratch tree: base <- model; model including base passes, base including
# model fails with the arrow named
mkdir -p "$tmp/src/base" "$tmp/src/model"
printf '## Map\n\n| folder | file |\n| --- | --- |\n| `base/` | x |\n| `model/` | y |\n\n## Next\n' > "$tmp/README.md"
printf '#include "base/util.h"\n' > "$tmp/src/model/model.c"
printf '#include "util.h"\n' > "$tmp/src/base/util.c"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
check "a downward include passes" $? "$(cat "$tmp/out")"
printf '#include "model/model.h"\n#include "base/util.h"\n' > "$tmp/src/top.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
check "a header at the top of src/ (the public one) may include any folder" $? "$(cat "$tmp/out")"
printf '#include "model/model.h"\n' > "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src/base/util.h includes model/model.h: base/ may not depend on model/" "$tmp/out"
check "an include that points up fails, naming the file and the arrow" $? "status $rc: $(cat "$tmp/out")"
# a subfolder (backend/cpu/, backend/cuda/) is its folder's: its files may include what the
# folder may, and an include of it from a folder listed before is an arrow up like any other
mkdir -p "$tmp/src/model/sub"
printf '#include "base/util.h"\n' > "$tmp/src/model/sub/part.c"
printf '#include "model/sub/part.h"\n' > "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src/base/util.h includes model/sub/part.h: base/ may not depend on model/" "$tmp/out" &&
    ! grep -q "model.sub.part\.c" "$tmp/out"
check "a subfolder counts as its folder: model/sub/ includes base/, base/ may not include model/sub/" $? \
    "status $rc: $(cat "$tmp/out")"
rm -r "$tmp/src/model/sub"
mkdir -p "$tmp/src/extra"
rm "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src.extra/ is not in the map" "$tmp/out"
check "a folder missing from the map fails" $? "status $rc: $(cat "$tmp/out")"

finish
