/*
 * corpus.c: the multi-domain corpus (train.bin, val.bin) from Debian text packages.
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
 */
#include "io/data.h"
#include "io/files.h"

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

/* Document [off, off + len) of file; empty or blank ones are dropped. */
static void add_doc(Domain *d, uint32_t file, const uint8_t *b, size_t off, size_t len) {
    size_t k = 0;
    while (k < len && (b[off + k] == ' ' || (b[off + k] >= '\t' && b[off + k] <= '\r'))) k++;
    if (k == len) return;
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

/* Cut file `file` of d into documents. */
static void split_file(Domain *d, uint32_t file, const uint8_t *b, size_t n, int headers) {
    size_t doc = 0, line = 0;
    while (line < n) {
        const uint8_t *nl = memchr(b + line, '\n', n - line);
        size_t end = nl ? (size_t)(nl - b) + 1 : n; /* one past this line's '\n' */
        if (!headers) {
            size_t body = end - line - (nl ? 1 : 0);
            if (body && b[line + body - 1] == '\r') body--;
            if (body == 1 && b[line] == '%') { /* separator: close the fortune before it */
                add_doc(d, file, b, doc, line - doc);
                doc = end;
            }
        } else {
            while (end - doc > CORPUS_MAX_DOC) { /* this line would overflow the document */
                size_t cut = line > doc ? line : doc + CORPUS_MAX_DOC; /* long lines are cut */
                add_doc(d, file, b, doc, cut - doc);
                doc = cut;
            }
        }
        line = end;
    }
    add_doc(d, file, b, doc, n - doc);
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

int corpus_build(const char *out_dir, uint64_t seed, double val_frac, char *err, int errlen) {
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
        if (!SPECS[di].headers || list_package_headers(d, SPECS[di].package) != 0)
            list_files(d, SPECS[di].dir, SPECS[di].headers);
        if (d->n_files == 0) {
            set_error(err, errlen,
                      "corpus: no %s files for domain '%s' in %s; install the Debian "
                      "package %s (`make deps` installs everything, or: sudo apt-get install %s)",
                      SPECS[di].headers ? "header" : "fortune", SPECS[di].name, SPECS[di].dir,
                      SPECS[di].package, SPECS[di].package);
            goto done;
        }
        qsort(d->files, (size_t)d->n_files, sizeof(char *), cmp_str);
        for (int f = 0; f < d->n_files; f++) {
            long n = read_file(d->files[f], &buf, &cap);
            if (n < 0) {
                set_error(err, errlen,
                          "corpus: cannot read '%s' (%s); check its permissions or "
                          "reinstall %s",
                          d->files[f], strerror(errno), SPECS[di].package);
                goto done;
            }
            split_file(d, (uint32_t)f, buf, (size_t)n, SPECS[di].headers);
        }
        if (d->total < budget) budget = d->total, smallest = di;
    }

    /* 2. choose each domain's documents, then copy them in file order into train or val. */
    for (int di = 0; di < N_DOMAINS; di++) {
        Domain *d = &dom[di];
        choose_docs(d, di, seed, budget);
        int loaded = -1;
        for (uint32_t i = 0; i < d->n_docs; i++) {
            if (!d->take[i]) continue;
            Span s = d->docs[i];
            if ((int)s.file != loaded) {
                if (read_file(d->files[s.file], &buf, &cap) < 0) {
                    set_error(err, errlen,
                              "corpus: cannot reread '%s'; was it changed during the "
                              "build? Run `make data` again",
                              d->files[s.file]);
                    goto done;
                }
                loaded = (int)s.file;
                d->files_used++;
            }
            int val = split_u(seed, di, i) < val_frac;
            out_add(&out[val], buf + s.off, s.len, di);
            d->docs_used++;
            *(val ? &d->val_tokens : &d->train_tokens) += s.len;
        }
    }

    char names[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME] = {{0}};
    for (int di = 0; di < N_DOMAINS; di++)
        snprintf(names[di], SHARD_DOMAIN_NAME, "%s", SPECS[di].name);
    char path[1100];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof(path), "%s/%s", out_dir, k ? "val.bin" : "train.bin");
        if (shard_write(path, out[k].tokens, out[k].n, out[k].docs, out[k].n_docs,
                        (const char(*)[SHARD_DOMAIN_NAME])names, N_DOMAINS, err, errlen) != 0)
            goto done;
    }

    printf("corpus: %d domains, budget %llu tokens each (%s), seed %llu, val_frac %.3f\n",
           N_DOMAINS, (unsigned long long)budget,
           smallest >= 0 ? "the size of the smallest domain" : "the per-domain cap",
           (unsigned long long)seed, val_frac);
    printf("  %-6s %7s %10s %14s %12s\n", "domain", "files", "documents", "train tokens",
           "val tokens");
    for (int di = 0; di < N_DOMAINS; di++)
        printf("  %-6s %7d %10u %14llu %12llu\n", SPECS[di].name, dom[di].files_used,
               dom[di].docs_used, (unsigned long long)dom[di].train_tokens,
               (unsigned long long)dom[di].val_tokens);
    printf("  %-6s %7s %10u %14llu %12llu\n", "total", "", out[0].n_docs + out[1].n_docs,
           (unsigned long long)out[0].n, (unsigned long long)out[1].n);
    printf("corpus: wrote %s/train.bin and %s/val.bin in %.2f s\n", out_dir, out_dir,
           now_seconds() - t0);
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
