#!/usr/bin/env bash
# paths.sh: every source path the documents and the code's comments name exists.
#
#   bash tests/book/paths.sh [FILE...]
#
# A named path is a word that starts with src/ and ends in a file name (src/moe/router.c,
# src/model/ep.h) or a folder (src/nn/); braces list alternatives (src/io/files.{h,c} names
# two files) and a * any text (src/moe/router*.c). Files default to every tracked Markdown file and every C source and header
# outside src/ and in it, so a file moved or renamed without its mentions fails make test with
# the place that still names the old path. Needs only bash, git and grep.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    mapfile -t files < <(git ls-files '*.md' '*.c' '*.h' '*.sh' '*.txt' Makefile |
                         grep -v -e '^tests/book/fixtures/' -e '^tests/book/paths.sh$')
fi
bad=0
while IFS= read -r hit; do
    where=${hit%%:src/*}
    path=src/${hit#*:src/}
    path=${path%%[.,;:)]}         # a sentence's punctuation after the path
    case $path in
        *{*}*) # src/a/b.{h,c}: every alternative
            pre=${path%%\{*}; rest=${path#*\{}; alts=${rest%%\}*}; post=${rest#*\}}
            IFS=, read -r -a list <<<"$alts"
            for a in "${list[@]}"; do
                [ -e "$pre$a$post" ] || { echo "$where: names $pre$a$post, which does not exist"; bad=1; }
            done ;;
        *'*'*) compgen -G "$path" > /dev/null || { echo "$where: names $path, which matches no file"; bad=1; } ;;
        *) [ -e "$path" ] || { echo "$where: names $path, which does not exist"; bad=1; } ;;
    esac
done < <(grep -noE '(^|[^A-Za-z0-9_./-])src/[A-Za-z0-9_./{},*-]*[A-Za-z0-9_}/*]' "${files[@]}" /dev/null |
         sed -E 's/^([^:]*:[0-9]+):[^s]*src\//\1:src\//')
[ $bad = 0 ] && echo "paths.sh: every src/ path named in ${#files[@]} files exists"
exit $bad
