/*
 * corpus.c: the multi-domain corpus (train.bin, val.bin) from Debian text packages, or from the
 * user's own files.
 *
 * Six domains, in this order (the order fixes the domain indices in the shards):
 *   en    regular files directly in /usr/share/games/fortunes/   (package fortunes)
 *   de    /usr/share/games/fortunes/de/                           (fortunes-de)
 *   es    /usr/share/games/fortunes/es/                           (fortunes-es)
 *   it    /usr/share/games/fortunes/it/                           (fortunes-it)
 *   ru    /usr/share/games/fortunes/ru/                           (fortunes-ru)
 *   code  the C headers of libc6-dev (*.h under /usr/include)     (libc6-dev)
 * The headers are those the dpkg database lists for libc6-dev, so that other -dev packages
 * installed on the machine do not change the corpus; without a dpkg database (not Debian),
 * every *.h under /usr/include is taken instead. Fortune folders are read flat: symlinks, the *.dat
 * indexes, the *.u8 aliases and the offensive off/ subfolders are skipped. Symlinks are never
 * followed, and files are taken in sorted path order, so the result depends only on the installed
 * packages and the seed.
 *
 * Documents: one fortune (the text between lines holding only "%"), or one header file cut at
 * line boundaries into pieces of at most CORPUS_MAX_DOC bytes (a longer line is cut mid-line).
 * Blank documents are dropped.
 *
 * Balance: every domain gets the same token budget, min(CORPUS_DOMAIN_CAP, the smallest
 * domain's size), so no language dominates the mixture and per-domain losses are comparable.
 * A domain's documents are visited in a seeded random order and taken while they fit the
 * budget; the chosen ones are then written in their original order.
 *
 * Split: document i of domain d goes to val when u(seed, d, i) < val_frac, u a hash mapped to
 * [0, 1); i counts all documents of the domain, so the split of a document does not move
 * when the budget changes.
 *
 * corpus_build_from (moe corpus --from) builds the same shards from the user's files: plain
 * text cut into paragraphs, or JSONL records, every document kept (no budget), the same split.
 *
 * With a tokenizer (moe corpus --tokenizer) everything above is done on the bytes as it is
 * without one (the same documents, budget and split); only when the shards are written is
 * each document encoded whole into the tokenizer's ids.
 */
#include "io/data.h"
#include "io/files.h"
#include "io/json.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CORPUS_DOMAIN_CAP (2500u * 1000u) /* tokens (bytes) per domain at most */
#define CORPUS_MAX_DOC 8192               /* bytes per header-file document at most */
#define FORTUNES "/usr/share/games/fortunes"
#if defined(__x86_64__)
#define MOE_DEB_ARCH "amd64"
#elif defined(__aarch64__)
#define MOE_DEB_ARCH "arm64"
#else
#define MOE_DEB_ARCH "unknown"
#endif

typedef struct {
    const char *name, *dir, *package;
    int headers; /* 1: *.h files, recursively, cut by size; 0: a flat folder of fortune files */
} DomainSpec;

static const DomainSpec SPECS[] = {
    {"en", FORTUNES, "fortunes", 0},          {"de", FORTUNES "/de", "fortunes-de", 0},
    {"es", FORTUNES "/es", "fortunes-es", 0}, {"it", FORTUNES "/it", "fortunes-it", 0},
    {"ru", FORTUNES "/ru", "fortunes-ru", 0}, {"code", "/usr/include", "libc6-dev", 1},
};
enum { N_DOMAINS = sizeof(SPECS) / sizeof(SPECS[0]) };

typedef struct {
    uint32_t file, off, len; /* bytes [off, off + len) of file */
} Span;

typedef struct {
    char **files;
    int n_files, cap_files;
    Span *docs;
    uint32_t n_docs, cap_docs;
    uint64_t total; /* bytes in all documents */
    uint8_t *take;  /* (n_docs) 1 when the document is within the budget */
    int files_used;
    uint32_t docs_used;
    uint64_t train_tokens, val_tokens;
} Domain;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void add_file(Domain *d, const char *path) {
    if (d->n_files == d->cap_files) {
        d->cap_files = d->cap_files ? 2 * d->cap_files : 64;
        d->files = (char **)realloc(d->files, sizeof(char *) * (size_t)d->cap_files);
        if (!d->files) moe_fatal("out of memory listing corpus files");
    }
    size_t len = strlen(path) + 1;
    d->files[d->n_files] = (char *)malloc_check(len);
    memcpy(d->files[d->n_files++], path, len);
}

/* Regular files in dir (lstat: symlinks are neither followed nor taken); with recurse, also
 * the *.h files of every real subfolder; without, fortune files minus *.dat and *.u8. */
static void list_files(Domain *d, const char *dir, int headers) {
    DIR *dp = opendir(dir);
    if (!dp) return; /* a missing folder shows up as a domain without files */
    struct dirent *ent;
    while ((ent = readdir(dp)) != NULL) {
        if (ent->d_name[0] == '.') continue;
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name) >= (int)sizeof(path)) continue;
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (headers && S_ISDIR(st.st_mode))
            list_files(d, path, headers);
        else if (S_ISREG(st.st_mode) &&
                 (headers ? ends_with(path, ".h")
                          : !ends_with(path, ".dat") && !ends_with(path, ".u8")))
            add_file(d, path);
    }
    closedir(dp);
}

/* The *.h files dpkg lists for a package (regular files only); returns -1 when the dpkg
 * database has no list for it. */
static int list_package_headers(Domain *d, const char *package) {
    char list[256];
    snprintf(list, sizeof list, "/var/lib/dpkg/info/%s:%s.list", package, MOE_DEB_ARCH);
    FILE *f = fopen(list, "r");
    if (!f) {
        snprintf(list, sizeof list, "/var/lib/dpkg/info/%s.list", package);
        f = fopen(list, "r");
    }
    if (!f) return -1;
    char path[4096];
    while (fgets(path, sizeof path, f)) {
        path[strcspn(path, "\n")] = '\0';
        struct stat st;
        if (ends_with(path, ".h") && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
            add_file(d, path);
    }
    fclose(f);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when the n bytes at p are all spaces, tabs and line ends (or n is 0). */
static int blank_bytes(const uint8_t *p, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!(p[k] == ' ' || (p[k] >= '\t' && p[k] <= '\r'))) return 0;
    return 1;
}

/* Document [off, off + len) of file; empty or blank ones are dropped. */
static void add_doc(Domain *d, uint32_t file, const uint8_t *b, size_t off, size_t len) {
    if (blank_bytes(b + off, len)) return;
    if (d->n_docs == d->cap_docs) {
        d->cap_docs = d->cap_docs ? 2 * d->cap_docs : 1024;
        d->docs = (Span *)realloc(d->docs, sizeof(Span) * d->cap_docs);
        if (!d->docs) moe_fatal("out of memory listing corpus documents");
    }
    d->docs[d->n_docs++] = (Span){file, (uint32_t)off, (uint32_t)len};
    d->total += len;
}

/* Whole file into *buf (grown as needed); returns its length or -1. */
static long read_file(const char *path, uint8_t **buf, size_t *cap) {
    static const FileSpec spec = {"corpus file", "it is skipped", NULL, UINT32_MAX};
    char why[256];
    uint64_t size;
    FILE *f = open_regular(path, &spec, &size, why, sizeof why);
    if (!f) return -1;
    size_t n = 0, k;
    for (;;) {
        if (n == *cap) {
            *cap = *cap ? 2 * *cap : 1 << 16;
            *buf = (uint8_t *)realloc(*buf, *cap);
            if (!*buf) moe_fatal("out of memory reading '%s'", path);
        }
        k = fread(*buf + n, 1, *cap - n, f);
        if (k == 0) break;
        n += k;
    }
    int bad = ferror(f) || n > UINT32_MAX;
    fclose(f);
    return bad ? -1 : (long)n;
}

/* How a file is cut into documents. */
typedef enum {
    CUT_FORTUNES,   /* at lines holding only "%" */
    CUT_HEADERS,    /* at line boundaries into pieces of at most CORPUS_MAX_DOC bytes */
    CUT_PARAGRAPHS, /* before a line that follows a blank line, and as CUT_HEADERS */
} CutMode;

typedef void (*EmitDoc)(void *ctx, const uint8_t *b, size_t off, size_t len);

/* Cut b (n bytes) into documents, each passed to emit; they tile b except for the fortune
 * separators. A paragraph keeps the blank lines after it, so its text reads as in the file. */
static void cut_docs(const uint8_t *b, size_t n, CutMode mode, EmitDoc emit, void *ctx) {
    size_t doc = 0, line = 0;
    int after_blank = 0;
    while (line < n) {
        const uint8_t *nl = memchr(b + line, '\n', n - line);
        size_t end = nl ? (size_t)(nl - b) + 1 : n; /* one past this line's '\n' */
        if (mode == CUT_FORTUNES) {
            size_t body = end - line - (nl ? 1 : 0);
            if (body && b[line + body - 1] == '\r') body--;
            if (body == 1 && b[line] == '%') { /* separator: close the fortune before it */
                emit(ctx, b, doc, line - doc);
                doc = end;
            }
        } else {
            int blank = blank_bytes(b + line, end - line);
            if (mode == CUT_PARAGRAPHS && !blank && after_blank && line > doc) {
                emit(ctx, b, doc, line - doc);
                doc = line;
            }
            after_blank = blank;
            while (end - doc > CORPUS_MAX_DOC) { /* this line would overflow the document */
                size_t cut = line > doc ? line : doc + CORPUS_MAX_DOC; /* long lines are cut */
                emit(ctx, b, doc, cut - doc);
                doc = cut;
            }
        }
        line = end;
    }
    emit(ctx, b, doc, n - doc);
}

typedef struct {
    Domain *d;
    uint32_t file;
} FileCut;

static void emit_span(void *ctx, const uint8_t *b, size_t off, size_t len) {
    FileCut *c = (FileCut *)ctx;
    add_doc(c->d, c->file, b, off, len);
}

/* Cut file `file` of d into documents. */
static void split_file(Domain *d, uint32_t file, const uint8_t *b, size_t n, int headers) {
    FileCut c = {d, file};
    cut_docs(b, n, headers ? CUT_HEADERS : CUT_FORTUNES, emit_span, &c);
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* u(seed, d, i) in [0, 1): the split coin of document i of domain d. */
static double split_u(uint64_t seed, int d, uint32_t i) {
    uint64_t h = mix(mix(mix(seed) ^ (uint64_t)(d + 1)) ^ ((uint64_t)i + 0x9E3779B97F4A7C15ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* Mark the documents of d taken, in a seeded random order, while they fit the budget. */
static void choose_docs(Domain *d, int di, uint64_t seed, uint64_t budget) {
    uint32_t *order = (uint32_t *)malloc_check(sizeof(uint32_t) * (d->n_docs + 1));
    for (uint32_t i = 0; i < d->n_docs; i++) order[i] = i;
    Rng r;
    rng_seed(&r, mix(seed ^ 0xC0FFEEull) + (uint64_t)di);
    for (uint32_t i = d->n_docs; i > 1; i--) { /* Fisher-Yates */
        uint32_t j = (uint32_t)rng_below(&r, i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    d->take = (uint8_t *)calloc_check(d->n_docs + 1, 1);
    uint64_t used = 0;
    for (uint32_t k = 0; k < d->n_docs && used + d->docs[order[k]].len <= budget; k++) {
        d->take[order[k]] = 1;
        used += d->docs[order[k]].len;
    }
    free(order);
}

typedef struct {
    uint8_t *tokens;
    uint64_t n, cap;
    ShardDoc *docs;
    uint32_t n_docs, cap_docs;
} Out;

static void out_add(Out *o, const uint8_t *p, uint32_t len, int domain) {
    while (o->n + len > o->cap) {
        o->cap = o->cap ? 2 * o->cap : 1 << 20;
        o->tokens = (uint8_t *)realloc(o->tokens, o->cap);
        if (!o->tokens) moe_fatal("out of memory building the corpus");
    }
    if (o->n_docs == o->cap_docs) {
        o->cap_docs = o->cap_docs ? 2 * o->cap_docs : 4096;
        o->docs = (ShardDoc *)realloc(o->docs, sizeof(ShardDoc) * o->cap_docs);
        if (!o->docs) moe_fatal("out of memory building the corpus");
    }
    memcpy(o->tokens + o->n, p, len);
    o->docs[o->n_docs++] = (ShardDoc){o->n, len, (uint32_t)domain};
    o->n += len;
}

/* Step 1 for domain di: list its files and cut each into documents (buf, cap: the reading
 * buffer, grown as needed). */
static int cut_domain(Domain *d, int di, uint8_t **buf, size_t *cap, char *err, int errlen) {
    if (!SPECS[di].headers || list_package_headers(d, SPECS[di].package) != 0)
        list_files(d, SPECS[di].dir, SPECS[di].headers);
    if (d->n_files == 0)
        return set_error(
            err, errlen,
            "corpus: no %s files for domain '%s' in %s; install the Debian "
            "package %s (`make deps` installs everything, or: sudo apt-get install %s)",
            SPECS[di].headers ? "header" : "fortune", SPECS[di].name, SPECS[di].dir,
            SPECS[di].package, SPECS[di].package);
    qsort(d->files, (size_t)d->n_files, sizeof(char *), cmp_str);
    for (int f = 0; f < d->n_files; f++) {
        long n = read_file(d->files[f], buf, cap);
        if (n < 0)
            return set_error(err, errlen,
                             "corpus: cannot read '%s' (%s); check its permissions or "
                             "reinstall %s",
                             d->files[f], strerror(errno), SPECS[di].package);
        split_file(d, (uint32_t)f, *buf, (size_t)n, SPECS[di].headers);
    }
    return 0;
}

/* Step 2 for domain di: choose its documents within budget, then copy them in file order into
 * out[0] (train) or out[1] (val). */
static int copy_domain(Domain *d, int di, uint64_t seed, uint64_t budget, double val_frac, Out *out,
                       uint8_t **buf, size_t *cap, char *err, int errlen) {
    choose_docs(d, di, seed, budget);
    int loaded = -1;
    for (uint32_t i = 0; i < d->n_docs; i++) {
        if (!d->take[i]) continue;
        Span s = d->docs[i];
        if ((int)s.file != loaded) {
            if (read_file(d->files[s.file], buf, cap) < 0)
                return set_error(err, errlen,
                                 "corpus: cannot reread '%s'; was it changed during the "
                                 "build? Run `make data` again",
                                 d->files[s.file]);
            loaded = (int)s.file;
            d->files_used++;
        }
        int val = split_u(seed, di, i) < val_frac;
        out_add(&out[val], *buf + s.off, s.len, di);
        d->docs_used++;
        *(val ? &d->val_tokens : &d->train_tokens) += s.len;
    }
    return 0;
}

/* The split (out[0] train, out[1] val, of bytes) as train.bin and val.bin in out_dir: the bytes
 * themselves, or with tok each document's ids, then tok's file as tokenizer.json (last: shards
 * with a tokenizer_crc32 and no tokenizer.json beside them are refused by moe train, never
 * trained on with the wrong one). tokens gets each domain's tokens in train and val. */
static int write_shards(const char *out_dir, const Out out[2],
                        const char names[][SHARD_DOMAIN_NAME], int n_domains,
                        const CorpusTokenizer *tok, uint64_t tokens[][2], char *err, int errlen) {
    char path[1100];
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        snprintf(path, sizeof(path), "%s/%s", out_dir, k ? "val.bin" : "train.bin");
        const Out *o = &out[k];
        if (!tok) {
            for (uint32_t i = 0; i < o->n_docs; i++)
                tokens[o->docs[i].domain][k] += o->docs[i].length;
            rc = shard_write_bytes(path, o->tokens, o->n, o->docs, o->n_docs, names,
                                   (uint32_t)n_domains, err, errlen);
            continue;
        }
        /* byte-level BPE gives at most a token a byte of valid UTF-8; an ill-formed byte is
         * read as U+FFFD, three bytes, so the room grows when it must */
        uint64_t cap = o->n ? o->n : 1, n = 0;
        int *ids = (int *)malloc_check(sizeof(int) * cap);
        ShardDoc *docs = (ShardDoc *)malloc_check(sizeof(ShardDoc) * (o->n_docs ? o->n_docs : 1));
        for (uint32_t i = 0; i < o->n_docs; i++) {
            size_t got;
            const int *doc =
                tok->encode(tok->ctx, o->tokens + o->docs[i].start, o->docs[i].length, &got);
            if (n + got > cap) {
                while (n + got > cap) cap *= 2;
                ids = (int *)realloc_check(ids, sizeof(int) * cap);
            }
            memcpy(ids + n, doc, sizeof(int) * got);
            docs[i] = (ShardDoc){n, (uint32_t)got, o->docs[i].domain};
            tokens[o->docs[i].domain][k] += got;
            n += got;
        }
        rc = shard_write(path, ids, n, tok->vocab, tok->crc32, docs, o->n_docs, names,
                         (uint32_t)n_domains, err, errlen);
        free(ids);
        free(docs);
    }
    if (rc != 0 || !tok) return rc;
    snprintf(path, sizeof(path), "%s/tokenizer.json", out_dir);
    const void *buf[1] = {tok->file};
    const size_t len[1] = {tok->file_len};
    return write_atomic(path, buf, len, 1, err, errlen);
}

/* The table's header, and one row: a domain's files (< 0: none, the total line), documents,
 * train and val tokens, and with a tokenizer its bytes and bytes per token. */
static void print_header(int width, int bpe) {
    printf("  %-*s %7s %10s %14s %12s", width, "domain", "files", "documents", "train tokens",
           "val tokens");
    if (bpe) printf(" %12s %11s", "bytes", "bytes/token");
    printf("\n");
}

static void print_row(int width, const char *name, int files, uint32_t docs,
                      const uint64_t tokens[2], uint64_t bytes, int bpe) {
    char f[16] = "";
    if (files >= 0) snprintf(f, sizeof f, "%d", files);
    printf("  %-*s %7s %10u %14llu %12llu", width, name, f, docs, (unsigned long long)tokens[0],
           (unsigned long long)tokens[1]);
    const uint64_t n = tokens[0] + tokens[1];
    if (bpe) printf(" %12llu %11.2f", (unsigned long long)bytes, n ? (double)bytes / n : 0.0);
    printf("\n");
}

static void print_done(const char *out_dir, const CorpusTokenizer *tok, double t0) {
    if (tok)
        printf("corpus: wrote %s/train.bin, %s/val.bin (vocab %u, tokenizer_crc32 %08x) and "
               "%s/tokenizer.json in %.2f s\n",
               out_dir, out_dir, tok->vocab, tok->crc32, out_dir, now_seconds() - t0);
    else
        printf("corpus: wrote %s/train.bin and %s/val.bin in %.2f s\n", out_dir, out_dir,
               now_seconds() - t0);
}

int corpus_build(const char *out_dir, uint64_t seed, double val_frac, const CorpusTokenizer *tok,
                 char *err, int errlen) {
    if (!(val_frac > 0.0 && val_frac < 1.0))
        return set_error(err, errlen, "corpus: val_frac is %g, must be in (0, 1), e.g. 0.05",
                         val_frac);
    double t0 = now_seconds();
    Domain dom[N_DOMAINS];
    memset(dom, 0, sizeof(dom));
    Out out[2]; /* train, val */
    memset(out, 0, sizeof(out));
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = -1;

    /* 1. list and cut every file; the budget is the smallest domain (at most the cap). */
    uint64_t budget = CORPUS_DOMAIN_CAP;
    int smallest = -1;
    for (int di = 0; di < N_DOMAINS; di++) {
        Domain *d = &dom[di];
        if (cut_domain(d, di, &buf, &cap, err, errlen) != 0) goto done;
        if (d->total < budget) budget = d->total, smallest = di;
    }

    /* 2. choose each domain's documents, then copy them in file order into train or val. */
    for (int di = 0; di < N_DOMAINS; di++) {
        if (copy_domain(&dom[di], di, seed, budget, val_frac, out, &buf, &cap, err, errlen) != 0)
            goto done;
    }

    char names[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME] = {{0}};
    for (int di = 0; di < N_DOMAINS; di++)
        snprintf(names[di], SHARD_DOMAIN_NAME, "%s", SPECS[di].name);
    uint64_t tokens[SHARD_MAX_DOMAINS + 1][2] = {{0}}; /* the last row: the total */
    if (write_shards(out_dir, out, (const char(*)[SHARD_DOMAIN_NAME])names, N_DOMAINS, tok, tokens,
                     err, errlen) != 0)
        goto done;

    /* the budget is of bytes, which are the tokens without a tokenizer */
    printf("corpus: %d domains, budget %llu %s each (%s), seed %llu, val_frac %.3f\n", N_DOMAINS,
           (unsigned long long)budget, tok ? "bytes" : "tokens",
           smallest >= 0 ? "the size of the smallest domain" : "the per-domain cap",
           (unsigned long long)seed, val_frac);
    print_header(6, tok != NULL);
    uint64_t *total = tokens[SHARD_MAX_DOMAINS];
    for (int di = 0; di < N_DOMAINS; di++) {
        print_row(6, SPECS[di].name, dom[di].files_used, dom[di].docs_used, tokens[di],
                  dom[di].train_tokens + dom[di].val_tokens, tok != NULL);
        total[0] += tokens[di][0], total[1] += tokens[di][1];
    }
    print_row(6, "total", -1, out[0].n_docs + out[1].n_docs, total, out[0].n + out[1].n,
              tok != NULL);
    print_done(out_dir, tok, t0);
    rc = 0;
done:
    for (int di = 0; di < N_DOMAINS; di++) {
        for (int f = 0; f < dom[di].n_files; f++) free(dom[di].files[f]);
        free(dom[di].files);
        free(dom[di].docs);
        free(dom[di].take);
    }
    for (int k = 0; k < 2; k++) {
        free(out[k].tokens);
        free(out[k].docs);
    }
    free(buf);
    return rc;
}

/* ---- the corpus from the user's own files (moe corpus --from) ------------------------------
 * Every input is read, cut and checked before anything is written, so a refusal leaves the
 * output folder as it was. Each domain collects its documents in a pool (their text back to
 * back, in the order of the files and lines); the split then copies them into train or val. */

typedef struct {
    char names[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME];
    int n;
    Out pool[SHARD_MAX_DOMAINS]; /* each domain's documents (the ShardDoc domain unused) */
    int files[SHARD_MAX_DOMAINS];
} FromDomains;

/* A domain name: 1 to SHARD_DOMAIN_NAME - 1 letters, digits, '_', '-' or '.'. */
static int valid_domain_name(const char *s, size_t len) {
    if (len == 0 || len >= SHARD_DOMAIN_NAME) return 0;
    for (size_t k = 0; k < len; k++) {
        char c = s[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

/* The index of domain `name`, added when new; -1 when it would be one too many. */
static int from_domain(FromDomains *fd, const char *name) {
    for (int k = 0; k < fd->n; k++)
        if (strcmp(fd->names[k], name) == 0) return k;
    if (fd->n == SHARD_MAX_DOMAINS) return -1;
    snprintf(fd->names[fd->n], SHARD_DOMAIN_NAME, "%s", name);
    return fd->n++;
}

static int too_many_domains(char *err, int errlen, const char *where, const char *name,
                            const FromDomains *fd) {
    char have[SHARD_MAX_DOMAINS * (SHARD_DOMAIN_NAME + 2)] = "";
    for (int k = 0; k < fd->n; k++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", k ? ", " : "",
                 fd->names[k]);
    return set_error(err, errlen,
                     "corpus: %s: domain '%s' would be one more than the %d a shard holds "
                     "(%s); merge domains with NAME=PATH or the \"domain\" fields (nothing was "
                     "written)",
                     where, name, SHARD_MAX_DOMAINS, have);
}

typedef struct {
    Out *pool;
    uint32_t docs; /* documents this file gave */
} PoolCut;

static void emit_pool(void *ctx, const uint8_t *b, size_t off, size_t len) {
    PoolCut *c = (PoolCut *)ctx;
    if (blank_bytes(b + off, len)) return;
    out_add(c->pool, b + off, (uint32_t)len, 0);
    c->docs++;
}

/* One input argument, "[NAME=]PATH": *path and the domain name (NAME, else the file's name
 * without its last extension). "./a=b.txt" is a path: NAME must be a valid domain name. */
static int parse_from_spec(const char *spec, const char **path, char *name, char *err, int errlen) {
    const char *eq = strchr(spec, '=');
    if (eq && valid_domain_name(spec, (size_t)(eq - spec))) {
        snprintf(name, SHARD_DOMAIN_NAME, "%.*s", (int)(eq - spec), spec);
        *path = eq + 1;
        return 0;
    }
    *path = spec;
    const char *base = strrchr(spec, '/');
    base = base ? base + 1 : spec;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (!valid_domain_name(base, len))
        return set_error(err, errlen,
                         "corpus: the file name '%s' does not make a domain name (1 to %d "
                         "letters, digits, '_', '-' or '.' before the extension); name its "
                         "domain: --from NAME=%s (nothing was written)",
                         spec, SHARD_DOMAIN_NAME - 1, spec);
    snprintf(name, SHARD_DOMAIN_NAME, "%.*s", (int)len, base);
    return 0;
}

/* The 1-based line of byte `at` of b. */
static size_t line_of(const uint8_t *b, size_t at) {
    size_t line = 1;
    for (size_t k = 0; k < at; k++) line += b[k] == '\n';
    return line;
}

static const char *json_type_name(JsonType t) {
    static const char *const names[] = {"null",   "true/false", "number",
                                        "string", "array",      "object"};
    return names[t];
}

/* One JSONL file: each non-blank line an object with a "text" string and an optional "domain"
 * string (else `name`); every blank text is dropped. *records counts the documents kept and
 * *touched gets a bit for each domain that received one. */
static int read_jsonl(FromDomains *fd, const char *path, const char *name, const uint8_t *b,
                      size_t n, uint32_t *records, unsigned *touched, char *err, int errlen) {
    size_t lineno = 0;
    for (size_t line = 0; line < n;) {
        const uint8_t *nl = memchr(b + line, '\n', n - line);
        size_t end = nl ? (size_t)(nl - b) : n;
        lineno++;
        if (!blank_bytes(b + line, end - line)) {
            JsonReader j = {(const char *)b + line, end - line, 0, ""};
            JsonValue v;
            if (json_document(&j, &v) != 0)
                return set_error(err, errlen,
                                 "corpus: %s:%zu: not a JSON object (%s, at column %zu); each "
                                 "line of a .jsonl file is one object such as {\"text\": "
                                 "\"...\"} (nothing was written)",
                                 path, lineno, j.msg, j.i + 1);
            const JsonValue *text = json_get(&v, "text"), *dom = json_get(&v, "domain");
            char why[160] = "";
            if (v.type != JSON_OBJECT)
                snprintf(why, sizeof why, "is a JSON %s, not an object", json_type_name(v.type));
            else if (!text)
                snprintf(why, sizeof why, "has no \"text\" field");
            else if (text->type != JSON_STRING)
                snprintf(why, sizeof why, "has a \"text\" that is a JSON %s, not a string",
                         json_type_name(text->type));
            else if (dom && dom->type != JSON_STRING)
                snprintf(why, sizeof why, "has a \"domain\" that is a JSON %s, not a string",
                         json_type_name(dom->type));
            else if (dom && !valid_domain_name(dom->string, strlen(dom->string)))
                snprintf(why, sizeof why,
                         "has the \"domain\" '%.40s', not a domain name (1 to %d letters, "
                         "digits, '_', '-' or '.')",
                         dom->string, SHARD_DOMAIN_NAME - 1);
            if (why[0]) {
                set_error(err, errlen,
                          "corpus: %s:%zu: the line %s; each line of a .jsonl file is one "
                          "object with a \"text\" string and an optional \"domain\" string "
                          "(nothing was written)",
                          path, lineno, why);
                json_value_free(&v);
                return -1;
            }
            const char *dname = dom ? dom->string : name;
            int di = from_domain(fd, dname);
            if (di < 0) {
                char where[600];
                snprintf(where, sizeof where, "%s:%zu", path, lineno);
                too_many_domains(err, errlen, where, dname, fd);
                json_value_free(&v);
                return -1;
            }
            size_t len = strlen(text->string);
            if (!blank_bytes((const uint8_t *)text->string, len)) {
                out_add(&fd->pool[di], (const uint8_t *)text->string, (uint32_t)len, 0);
                (*records)++;
                *touched |= 1u << di;
            }
            json_value_free(&v);
        }
        line = end + 1;
    }
    return 0;
}

/* Read one input into its domains' pools; -1 with a message naming the file (and line). */
static int read_from_file(FromDomains *fd, const char *spec, uint8_t **buf, size_t *cap, char *err,
                          int errlen) {
    const char *path;
    char name[SHARD_DOMAIN_NAME];
    if (parse_from_spec(spec, &path, name, err, errlen) != 0) return -1;
    static const FileSpec fspec = {"corpus file", "pass a text file or a .jsonl file", NULL,
                                   UINT32_MAX};
    char why[768];
    uint64_t size;
    FILE *f = open_regular(path, &fspec, &size, why, sizeof why);
    if (!f) return set_error(err, errlen, "corpus: %s (nothing was written)", why);
    if (size >= *cap) { /* one byte more: never a NULL buffer, even for an empty file */
        *cap = (size_t)size + 1;
        *buf = (uint8_t *)realloc_check(*buf, *cap);
    }
    size_t n = size ? fread(*buf, 1, (size_t)size, f) : 0;
    int bad = ferror(f) || n != size;
    fclose(f);
    if (bad)
        return set_error(err, errlen, "corpus: cannot read '%s' (%s) (nothing was written)", path,
                         strerror(errno));
    const uint8_t *nul = memchr(*buf, 0, n);
    if (nul)
        return set_error(err, errlen,
                         "corpus: %s:%zu: a NUL byte (byte %zu of the file); --from takes text "
                         "(UTF-8), and this looks like a binary file (nothing was written)",
                         path, line_of(*buf, (size_t)(nul - *buf)), (size_t)(nul - *buf) + 1);
    uint32_t docs = 0;
    if (ends_with(path, ".jsonl")) {
        unsigned touched = 0;
        if (read_jsonl(fd, path, name, *buf, n, &docs, &touched, err, errlen) != 0) return -1;
        for (int di = 0; di < fd->n; di++) fd->files[di] += (touched >> di) & 1u;
    } else {
        int di = from_domain(fd, name);
        if (di < 0) return too_many_domains(err, errlen, path, name, fd);
        PoolCut c = {&fd->pool[di], 0};
        cut_docs(*buf, n, CUT_PARAGRAPHS, emit_pool, &c);
        docs = c.docs;
        fd->files[di]++;
    }
    if (docs == 0)
        return set_error(err, errlen,
                         "corpus: %s holds no text (it is empty or blank%s); give it text or "
                         "leave it out (nothing was written)",
                         path, ends_with(path, ".jsonl") ? ", or every \"text\" is" : "");
    return 0;
}

int corpus_build_from(const char *out_dir, const char *const *specs, int n_specs, uint64_t seed,
                      double val_frac, const CorpusTokenizer *tok, char *err, int errlen) {
    if (!(val_frac > 0.0 && val_frac < 1.0))
        return set_error(err, errlen, "corpus: val_frac is %g, must be in (0, 1), e.g. 0.05",
                         val_frac);
    if (n_specs < 1) return set_error(err, errlen, "corpus: --from needs at least one file");
    double t0 = now_seconds();
    FromDomains fd;
    memset(&fd, 0, sizeof fd);
    Out out[2]; /* train, val */
    memset(out, 0, sizeof out);
    uint64_t split[SHARD_MAX_DOMAINS][2] = {{0}}; /* bytes of each domain in train, val */
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = -1;
    for (int k = 0; k < n_specs; k++)
        if (read_from_file(&fd, specs[k], &buf, &cap, err, errlen) != 0) goto done;

    /* document i of domain d goes to val when u(seed, d, i) < val_frac, as in corpus_build */
    for (int di = 0; di < fd.n; di++) {
        const Out *p = &fd.pool[di];
        for (uint32_t i = 0; i < p->n_docs; i++) {
            int val = split_u(seed, di, i) < val_frac;
            out_add(&out[val], p->tokens + p->docs[i].start, p->docs[i].length, di);
            split[di][val] += p->docs[i].length;
        }
    }
    if (out[0].n_docs == 0 || out[1].n_docs == 0) {
        set_error(err, errlen,
                  "corpus: %u documents, and the split (--val-frac %g) left %s empty; give more "
                  "text (more paragraphs or records)%s (nothing was written)",
                  out[0].n_docs + out[1].n_docs, val_frac,
                  out[1].n_docs == 0 ? "the validation shard" : "the training shard",
                  out[1].n_docs == 0 ? ", a larger --val-frac or another --seed" : "");
        goto done;
    }
    uint64_t tokens[SHARD_MAX_DOMAINS + 1][2] = {{0}}; /* the last row: the total */
    if (write_shards(out_dir, out, (const char(*)[SHARD_DOMAIN_NAME])fd.names, fd.n, tok, tokens,
                     err, errlen) != 0)
        goto done;

    printf("corpus: %d domain%s from %d file%s, every document kept, seed %llu, val_frac %.3f\n",
           fd.n, fd.n == 1 ? "" : "s", n_specs, n_specs == 1 ? "" : "s", (unsigned long long)seed,
           val_frac);
    print_header(15, tok != NULL);
    uint64_t *total = tokens[SHARD_MAX_DOMAINS];
    for (int di = 0; di < fd.n; di++) {
        print_row(15, fd.names[di], fd.files[di], fd.pool[di].n_docs, tokens[di],
                  split[di][0] + split[di][1], tok != NULL);
        total[0] += tokens[di][0], total[1] += tokens[di][1];
    }
    print_row(15, "total", -1, out[0].n_docs + out[1].n_docs, total, out[0].n + out[1].n,
              tok != NULL);
    print_done(out_dir, tok, t0);
    rc = 0;
done:
    for (int di = 0; di < SHARD_MAX_DOMAINS; di++) {
        free(fd.pool[di].tokens);
        free(fd.pool[di].docs);
    }
    for (int k = 0; k < 2; k++) {
        free(out[k].tokens);
        free(out[k].docs);
    }
    free(buf);
    return rc;
}
