# book.awk: checks (and with fix=1 rewrites) the numbers a document quotes from the files
# under plots/, following the markers described in chapters/README.md ("Numbers in the
# handbook"). Run through tests/book/book.sh:
#
#   awk -f book.awk -v plots=DIR -v allow=FILE -v fix=0|1 DOC...
#
# Three kinds of marker, all HTML comments (invisible when the Markdown is rendered):
#   2.0784<!-- 01-routing/summary.csv aux-1e-2 val_loss -->      a number and where it comes from
#   0.046<!-- = [REF] - [REF] -->                                 a number computed from others
#   <!-- table FILE --> / <!-- transcript FILE -->                the next block copies FILE
# Any other comment (one that does not follow a number) is a note and is left alone.
# Every decimal number and percentage of the prose without a marker must be on the allow-list.
# Written for POSIX awk (Debian's mawk included): no gawk extensions.
#
# Errors print as DOC:LINE: message; the exit status is 1 when any remains (after fixing).

BEGIN {
    nerr = 0
    ndocs = 0
    load_allow(allow)
}

FNR == 1 { docs[++ndocs] = FILENAME }
{ nl[FILENAME] = FNR; D[FILENAME, FNR] = $0 }

END {
    for (di = 1; di <= ndocs; di++) process(docs[di])
    for (k in allowed)
        if (!(k in allow_used))
            err(allow ":" allowed_line[k], "allow-list entry '" k "' is not used by any document; remove it")
    exit nerr > 0
}

function err(where, msg) { print where ": " msg; nerr++ }
function rstrip(s) { sub(/[ \t\r]+$/, "", s); return s }
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t\r]+$/, "", s); return s }
function is_blank(s) { return s ~ /^[ \t\r]*$/ }
function is_fence(s) { return s ~ /^ *(```|~~~)/ }

# ---- the allow-list: NUMBER  REASON, one a line; # starts a comment ----------------------------
function load_allow(f,   line, n, key, rc) {
    if (f == "") return
    n = 0
    while ((rc = (getline line < f)) > 0) {
        n++
        if (line ~ /^[ \t]*(#|$)/) continue
        line = trim(line)
        key = line; sub(/[ \t].*$/, "", key)
        if (trim(substr(line, length(key) + 1)) == "") {
            err(f ":" n, "allow-list entry '" key "' has no reason: write why it is a setting, not a result")
            continue
        }
        allowed[key] = 1; allowed_line[key] = n
    }
    if (rc < 0) err(f, "cannot read the allow-list")
    close(f)
}

# ---- the files under plots/: loaded once, lines in F[file, i] ----------------------------------
function load(f,   path, line, n, rc) {
    if (f in FN) return FN[f] >= 0
    path = plots "/" f
    n = 0
    while ((rc = (getline line < path)) > 0) F[f, ++n] = line
    close(path)
    FN[f] = (rc < 0 && n == 0) ? -1 : n
    return FN[f] >= 0
}

# ---- a document, line by line ------------------------------------------------------------------
function process(doc,   i, n, line, infence, inindent, prevblank, changed, out) {
    n = nl[doc]; infence = 0; inindent = 0; prevblank = 1; changed = 0
    for (i = 1; i <= n; i++) orig[i] = D[doc, i]
    i = 1
    while (i <= n) {
        line = D[doc, i]
        if (infence) { if (is_fence(line)) infence = 0; i++; prevblank = 0; continue }
        if (is_fence(line)) { infence = 1; i++; continue }
        if (inindent && (line ~ /^    / || is_blank(line))) { prevblank = is_blank(line); i++; continue }
        inindent = 0
        if (prevblank && line ~ /^    /) { inindent = 1; prevblank = 0; i++; continue }
        if (line ~ /^[ \t]*<!--[ \t]*(table|transcript)[ \t]/) { i = block(doc, i, n); prevblank = 1; continue }
        D[doc, i] = prose(doc, i, line)
        prevblank = is_blank(line)
        i++
    }
    if (!fix) return
    for (i = 1; i <= n; i++) if (D[doc, i] != orig[i]) changed = 1
    if (!changed) return
    out = doc ".new"
    for (i = 1; i <= n; i++) print D[doc, i] > out
    close(out)
}

# ---- <!-- table FILE --> and <!-- transcript FILE -->: the next block, line by line ------------
# Each non-blank line of the block (less the 4-space indent of an indented code block) must be a
# line of FILE, in the order of FILE. Fixing replaces a line that is not: in a table, by FILE's
# next table row with the same first cell; elsewhere, by FILE's next line of the same shape
# (the same text once the numbers are masked and the spaces collapsed).
function block(doc, i, n,   spec, kind, f, j, first, last, strip, k, t, cur, r, found) {
    spec = D[doc, i]
    if (spec !~ /-->[ \t]*$/) { err(doc ":" i, "a table/transcript marker must be alone on its line and end with -->"); return i + 1 }
    sub(/^[ \t]*<!--[ \t]*/, "", spec); sub(/[ \t]*-->[ \t]*$/, "", spec)
    kind = spec; sub(/[ \t].*$/, "", kind)
    f = trim(substr(spec, length(kind) + 1))
    j = i + 1
    while (j <= n && is_blank(D[doc, j])) j++
    if (j > n) { err(doc ":" i, kind " marker with no block after it"); return j }
    strip = 0
    if (is_fence(D[doc, j])) {
        first = j + 1; last = first
        while (last <= n && !is_fence(D[doc, last])) last++
        if (last > n) { err(doc ":" j, "code block without its closing fence"); return last }
        last--; j = last + 2
    } else if (D[doc, j] ~ /^    /) {
        strip = 4; first = j; last = j
        while (last < n && (D[doc, last + 1] ~ /^    / || (is_blank(D[doc, last + 1]) && D[doc, last + 2] ~ /^    /))) last++
        j = last + 1
    } else {
        first = j; last = j
        while (last < n && !is_blank(D[doc, last + 1])) last++
        j = last + 1
    }
    if (f == "" || index(f, " ")) { err(doc ":" i, kind " marker: name one file under " plots "/, e.g. <!-- " kind " 01-routing/summary.md -->"); return j }
    if (!load(f)) { err(doc ":" i, "no file " plots "/" f " (the " kind " after this line quotes it)"); return j }
    cur = 1
    for (k = first; k <= last; k++) {
        t = rstrip(substr(D[doc, k], strip + 1))
        if (t == "") continue
        found = find_line(f, t, cur)
        if (found) { cur = found + 1; continue }
        if (fix) {
            r = (kind == "table") ? find_row(f, first_cell(t), cur) : find_shape(f, shape(t), cur)
            if (r) {
                print doc ":" k ": " t
                print doc ":" k ": -> " F[f, r] "   (" f " line " r ")"
                D[doc, k] = substr(D[doc, k], 1, strip) F[f, r]
                cur = r + 1
                continue
            }
        }
        err(doc ":" k, "this line of the " kind " is not in " plots "/" f (cur > 1 ? " after its line " (cur - 1) : "") \
            " (the book copies the file's lines in order; make book refreshes them):\n    " t)
    }
    return j
}

function find_line(f, t, from,   r) {
    for (r = from; r <= FN[f]; r++) if (rstrip(F[f, r]) == t) return r
    return 0
}
function first_cell(row,   c) {
    if (row !~ /^[ \t]*\|/) return "\001"
    split(row, c, "|"); return trim(c[2])
}
function find_row(f, key, from,   r) {
    for (r = from; r <= FN[f]; r++) if (first_cell(F[f, r]) == key) return r
    return 0
}
function shape(s) {
    gsub(/[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/, "#", s)
    gsub(/[ \t]+/, " ", s)
    return trim(s)
}
function find_shape(f, sh, from,   r) {
    for (r = from; r <= FN[f]; r++) if (shape(F[f, r]) == sh) return r
    return 0
}

# ---- a line of prose: its markers, and its unmarked numbers ------------------------------------
function prose(doc, i, line,   rest, out, p, e, spec, before, at, q, v, clean, tok, pre, key, newq) {
    out = ""; rest = line
    while ((p = index(rest, "<!--")) > 0) {
        e = index(substr(rest, p + 4), "-->")
        if (e == 0) { err(doc ":" i, "a marker without its closing -->"); break }
        before = substr(rest, 1, p - 1)
        spec = trim(substr(rest, p + 4, e - 1))
        # a comment right after a number is its marker; any other comment is a note, left alone
        if ((at = match(before, /[-+]?[0-9][0-9,]*(\.[0-9]+)?( ?%)?$/)) > 0) {
            q = substr(before, at)
            ERR = ""
            v = (spec ~ /^=/) ? expr(substr(spec, 2)) : lookup(spec)
            if (ERR != "") err(doc ":" i, q " <!-- " spec " -->: " ERR)
            else if (!agrees(q, v)) {
                newq = requote(q, v)
                if (fix) {
                    print doc ":" i ": " q " -> " newq "   (" spec " = " v ")"
                    before = substr(before, 1, at - 1) newq
                } else
                    err(doc ":" i, "quotes " q " but " spec " is " v " (" newq " at the quoted precision); run make book to rewrite it")
            }
        }
        out = out before "<!--" substr(rest, p + 4, e + 2)
        rest = substr(rest, p + e + 6)
    }
    out = out rest

    # unmarked decimals and percentages: markers become \001, code spans and link targets go
    clean = line
    gsub(/<!--[^>]*-->/, "\001", clean)
    gsub(/`[^`]*`/, " ", clean)
    gsub(/\]\([^)]*\)/, "]", clean)
    while (match(clean, /[0-9][0-9,]*(\.[0-9]+)?( ?%)?/)) {
        tok = substr(clean, RSTART, RLENGTH)
        # part of a word (cf0.5, x4.82, drop-0.25, arXiv:2101.03961) is a name, not a number
        pre = RSTART > 1 ? substr(clean, RSTART - 1, 1) : ""
        if (pre == "-" && RSTART > 2 && substr(clean, RSTART - 2, 1) ~ /[A-Za-z]/) pre = "a"
        if (RSTART > 6 && substr(clean, RSTART - 6, 6) == "arXiv:") pre = "a"   # a reference
        clean = substr(clean, RSTART + RLENGTH)
        sub(/,+$/, "", tok)
        if (pre ~ /[A-Za-z0-9_.]/) continue
        if (tok !~ /\./ && tok !~ /%$/) continue
        if (substr(clean, 1, 1) == "\001") continue
        key = tok; gsub(/[, ]/, "", key)
        if (key in allowed) { allow_used[key] = 1; continue }
        err(doc ":" i, "unmarked number " tok ": mark where it comes from (" tok "<!-- FILE KEY COLUMN -->) or, if it is a setting, list it in " allow " with the reason")
    }
    return out
}

# ---- comparing a quoted number with its source -------------------------------------------------
# The quote agrees when it is the source rounded to the quoted precision: its decimals, or for an
# integer of four digits or more its significant digits (16,800 quotes 16826; 600 is exact).
# Halfway cases accept either rounding.
function unit(q,   d, z) {
    gsub(/[-+, %]/, "", q)
    if ((d = index(q, ".")) > 0) return 10 ^ -(length(q) - d)
    sub(/^0+/, "", q); z = 0
    if (length(q) < 4) return 1
    while (length(q) > 1 && substr(q, length(q)) == "0") { q = substr(q, 1, length(q) - 1); z++ }
    return 10 ^ z
}
function qvalue(q) { gsub(/[, %]/, "", q); return q + 0 }
function abs(x) { return x < 0 ? -x : x }
function agrees(q, v,   u) { u = unit(q); return abs(qvalue(q) - v) <= u / 2 * (1 + 1e-9) + 1e-12 }
# v written the way q is: its decimals or significant digits, sign, thousands commas, % suffix
function requote(q, v,   u, d, s, suffix, ip, fp, c) {
    u = unit(q); suffix = ""
    if (match(q, / ?%$/)) suffix = substr(q, RSTART)
    d = q; gsub(/[-+, %]/, "", d); d = index(d, ".") ? length(d) - index(d, ".") : 0
    s = d > 0 ? sprintf("%." d "f", v) : sprintf("%.0f", sprintf("%.0f", v / u) * u)
    if (q ~ /^\+/ && s !~ /^-/) s = "+" s
    if (index(q, ",")) {
        ip = s; fp = ""
        if ((c = index(s, ".")) > 0) { ip = substr(s, 1, c - 1); fp = substr(s, c) }
        s = commas(ip) fp
    }
    return s suffix
}
function commas(ip,   sign, out) {
    sign = ""
    if (ip ~ /^[-+]/) { sign = substr(ip, 1, 1); ip = substr(ip, 2) }
    out = ""
    while (length(ip) > 3) { out = "," substr(ip, length(ip) - 2) out; ip = substr(ip, 1, length(ip) - 3) }
    return sign ip out
}

# ---- a reference: FILE [after "TEXT"]... [KEY COLUMN | #N] -------------------------------------
# KEY COLUMN: a csv row by its first field and a header name (or $N, the Nth field); a Markdown
# table row by its first cell and its table's header (or $N, the Nth cell); a text line by its
# first word, with $N its Nth word. after "TEXT" starts the search past the next TEXT; #N is the
# Nth number after that (#1 when nothing follows the last after).
function lookup(spec,   n, T, f, k, cl, cp, p, r, nums, want) {
    n = words(spec, T)
    if (ERR != "") return 0
    if (n == 0) { ERR = "empty marker"; return 0 }
    f = T[1]
    if (!load(f)) { ERR = "no file " plots "/" f; return 0 }
    cl = 1; cp = 1; k = 2
    while (k <= n && T[k] == "after") {
        if (k + 1 > n) { ERR = "after needs a \"TEXT\""; return 0 }
        for (r = cl; r <= FN[f]; r++) {
            p = index(substr(F[f, r], r == cl ? cp : 1), T[k + 1])
            if (p) { cp = (r == cl ? cp : 1) + p - 1 + length(T[k + 1]); cl = r; break }
        }
        if (r > FN[f]) { ERR = "no \"" T[k + 1] "\" in " f (k > 2 ? " after the text before it" : ""); return 0 }
        k += 2
    }
    if (k > n) { if (k == 2) { ERR = "name a KEY COLUMN, after \"TEXT\" or #N after the file"; return 0 }; want = 1 }
    else if (T[k] ~ /^#[0-9]+$/ && k == n) want = substr(T[k], 2) + 0
    else if (k + 1 == n) return cell(f, T[k], T[k + 1], cl)
    else { ERR = "cannot read the reference after '" f "': expected KEY COLUMN, after \"TEXT\" or #N"; return 0 }
    return nth_number(f, cl, cp, want)
}

# the Nth number from line cl, byte cp on (a sign counts when it does not follow a word)
function nth_number(f, cl, cp, want,   r, s, off, got, pre, tok) {
    got = 0
    for (r = cl; r <= FN[f]; r++) {
        s = substr(F[f, r], r == cl ? cp : 1); off = 0
        while (match(s, /[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
            tok = substr(s, RSTART, RLENGTH)
            pre = RSTART > 1 ? substr(s, RSTART - 1, 1) : ""
            if (tok ~ /^[-+]/ && pre ~ /[A-Za-z0-9_)]/) tok = substr(tok, 2)
            s = substr(s, RSTART + RLENGTH)
            if (++got == want) return tok + 0
        }
    }
    ERR = "fewer than " want " numbers after that text in " f
    return 0
}

function cell(f, key, col, from,   r, c, h, H, C, nc, ci, v, sep) {
    if (f ~ /\.csv$/) {
        nc = split(F[f, 1], H, ",")
        ci = colindex(col, H, nc, f)
        if (ERR != "") return 0
        for (r = (from > 2 ? from : 2); r <= FN[f]; r++) { split(F[f, r], C, ","); if (C[1] == key) break }
        if (r > FN[f]) { ERR = "no row '" key "' in " f (from > 1 ? " after that text" : ""); return 0 }
        return number(C[ci], f, key, col)
    }
    r = find_row(f, key, from)
    if (r) {
        for (h = r; h > 1 && F[f, h - 1] ~ /^[ \t]*\|/; h--) ;
        nc = split(F[f, h], H, "|"); for (c = 1; c < nc; c++) H[c] = trim(H[c + 1]); nc -= 2
        ci = colindex(col, H, nc, f)
        if (ERR != "") return 0
        split(F[f, r], C, "|")
        return number(C[ci + 1], f, key, col)
    }
    if (col !~ /^\$[0-9]+$/) { ERR = "no table row '" key "' in " f; return 0 }
    for (r = from; r <= FN[f]; r++) { nc = split(F[f, r], C, /[ \t]+/); sep = (C[1] == "") ? 1 : 0; if (C[1 + sep] == key) break }
    if (r > FN[f]) { ERR = "no row or line starting with '" key "' in " f; return 0 }
    return number(C[substr(col, 2) + sep], f, key, col)
}
function colindex(col, H, nc,   c, names) {
    if (col ~ /^\$[0-9]+$/) {
        c = substr(col, 2) + 0
        if (c < 1 || c > nc) ERR = "column " col " is past the " nc " columns"
        return c
    }
    names = ""
    for (c = 1; c <= nc; c++) { if (trim(H[c]) == col) return c; names = names (c > 1 ? ", " : "") trim(H[c]) }
    ERR = "no column '" col "' (columns: " names ")"
    return 0
}
function number(s, f, key, col) {
    s = trim(s); gsub(/[`*,]/, "", s); sub(/ ?%$/, "", s)
    if (s !~ /^[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) { ERR = f " " key " " col " is '" s "', not a number"; return 0 }
    return s + 0
}

# words of a marker: split on blanks, "double quoted" text kept whole (quotes removed)
function words(s, T,   n, c, w, inq, i) {
    n = 0; w = ""; inq = 0
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\"") { if (inq) { T[++n] = w; w = ""; inq = 0 } else inq = 1; continue }
        if (!inq && (c == " " || c == "\t")) { if (w != "") { T[++n] = w; w = "" }; continue }
        w = w c
    }
    if (inq) { ERR = "unclosed \" in the marker"; return 0 }
    if (w != "") T[++n] = w
    return n
}

# ---- = EXPRESSION: numbers, [REFERENCE], + - * / ( ) and abs( ) --------------------------------
function expr(s,   v) {
    ntok = 0; pos = 1
    if (!tokenize(s)) return 0
    v = e_sum()
    if (ERR == "" && pos <= ntok) ERR = "unexpected '" X[pos] "' in the expression"
    return v
}
function tokenize(s,   i, c, j) {
    i = 1
    while (i <= length(s)) {
        c = substr(s, i, 1)
        if (c == " " || c == "\t") { i++; continue }
        if (c == "[") {
            j = index(substr(s, i), "]")
            if (!j) { ERR = "a [ without its ]"; return 0 }
            X[++ntok] = substr(s, i, j); i += j; continue
        }
        if (index("+-*/(),", c)) { X[++ntok] = c; i++; continue }
        if (substr(s, i, 3) ~ /^(abs|min|max)$/) { X[++ntok] = substr(s, i, 3); i += 3; continue }
        if (match(substr(s, i), /^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) { X[++ntok] = substr(s, i, RLENGTH); i += RLENGTH; continue }
        ERR = "cannot read '" substr(s, i) "' in the expression"; return 0
    }
    return 1
}
function e_sum(   v, op) {
    v = e_term()
    while (ERR == "" && pos <= ntok && (X[pos] == "+" || X[pos] == "-")) {
        op = X[pos++]
        v = (op == "+") ? v + e_term() : v - e_term()
    }
    return v
}
function e_term(   v, op, d) {
    v = e_factor()
    while (ERR == "" && pos <= ntok && (X[pos] == "*" || X[pos] == "/")) {
        op = X[pos++]; d = e_factor()
        if (ERR != "") return 0
        if (op == "*") v *= d
        else if (d == 0) { ERR = "division by zero"; return 0 }
        else v /= d
    }
    return v
}
function e_factor(   t, v, w) {
    if (pos > ntok) { ERR = "the expression ends too early"; return 0 }
    t = X[pos++]
    if (t == "-") return -e_factor()
    if (t == "min" || t == "max") {   # min(a, b, ...), max(a, b, ...)
        if (X[pos++] != "(") { ERR = t " needs ( )"; return 0 }
        v = e_sum()
        while (ERR == "" && X[pos] == ",") {
            pos++; w = e_sum()
            if ((t == "min" && w < v) || (t == "max" && w > v)) v = w
        }
        if (X[pos++] != ")") { if (ERR == "") ERR = "a ( without its )"; return 0 }
        return v
    }
    if (t == "(" || t == "abs") {
        if (t == "abs" && X[pos++] != "(") { ERR = "abs needs ( )"; return 0 }
        v = e_sum()
        if (X[pos++] != ")") { if (ERR == "") ERR = "a ( without its )"; return 0 }
        return t == "abs" ? abs(v) : v
    }
    if (t ~ /^\[/) return lookup(trim(substr(t, 2, length(t) - 2)))
    if (t ~ /^[0-9]/) return t + 0
    ERR = "unexpected '" t "' in the expression"; return 0
}
