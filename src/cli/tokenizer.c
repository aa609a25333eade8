/*
 * tokenizer.c: `moe tokenizer train|encode|decode`, byte-level BPE (tok/tok.h) on the command
 * line: a tokenizer.json trained from text files; text on standard input to ids on standard
 * output, a line of ids for each line of text (or, with --docs, for each document ended by a
 * NUL byte); and ids back to text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/files.h"
#include "tok/tok.h"

#define TOK_TEXT_MAX (1ull << 32) /* one training file; larger corpora come as several */

typedef struct {
    const char *sub, *tokenizer, *out, *pattern;
    const char **from; /* (n_from) */
    int n_from, docs;
    long vocab;
} TokOpts;

static void parse(TokOpts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->from = (const char **)calloc_check((size_t)argc + 1, sizeof *o->from);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help("tokenizer"), stdout);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) {
            if (o->sub) usage_error("tokenizer", "one of train, encode, decode, not also '%s'", a);
            o->sub = a;
            continue;
        }
        if (!cli_option_allowed("tokenizer", a)) usage_error("tokenizer", "unknown option '%s'", a);
        if (strcmp(a, "--docs") == 0) {
            o->docs = 1;
            continue;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0')
            usage_error("tokenizer", "%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--tokenizer") == 0)
            o->tokenizer = v;
        else if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--pattern") == 0)
            o->pattern = v;
        else if (strcmp(a, "--vocab") == 0) {
            char *end;
            errno = 0;
            o->vocab = strtol(v, &end, 10);
            if (errno || *end || end == v || o->vocab < 256 || o->vocab > (1 << 24))
                usage_error("tokenizer",
                            "--vocab expects a whole number from 256 to 16777216, got '%s'", v);
        } else { /* --from FILE..., up to the next option */
            o->from[o->n_from++] = v;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                o->from[o->n_from++] = argv[++i];
        }
    }
    if (!o->sub) usage_error("tokenizer", "%s", "name what to do: train, encode or decode");
}

/* a whole file's bytes (*n of them), or exit 2 */
static char *read_text(const char *path, size_t *n) {
    const FileSpec spec = {"text file",
                           "pass files of text, each at most 4 GiB (split a larger one)", NULL,
                           TOK_TEXT_MAX};
    char err[1024];
    char *text = file_read_all(path, &spec, n, err, sizeof err);
    if (!text) moe_input_error("moe tokenizer train: %s", err);
    return text;
}

static int train(const TokOpts *o) {
    if (!o->vocab || !o->n_from || !o->out)
        usage_error("tokenizer", "%s", "train needs --vocab N, --from FILE... and --out FILE");
    const int pattern = tok_pattern_by_name(o->pattern ? o->pattern : "llama3");
    if (pattern < 0)
        usage_error("tokenizer", "--pattern is gpt2, llama3 or qwen2, not '%s'", o->pattern);
    if (file_exists(o->out))
        moe_input_error("moe tokenizer train: %s already exists; choose another --out or remove "
                        "it first",
                        o->out);
    const double t0 = now_seconds();
    TokTrainer *tr = tok_trainer_new((TokPattern)pattern);
    for (int f = 0; f < o->n_from; f++) {
        size_t n;
        char *text = read_text(o->from[f], &n);
        tok_trainer_count(tr, text, n);
        free(text);
    }
    Tokenizer t;
    const int merges = tok_trainer_run(tr, &t, (int)o->vocab);
    tok_trainer_free(tr);
    char err[1024];
    if (tok_save(&t, o->out, err, sizeof err)) moe_fatal("moe tokenizer train: %s", err);
    fprintf(stderr,
            "moe tokenizer train: %s: %d tokens (256 bytes, %d merges%s), pattern %s, %.1f s\n",
            o->out, t.n_vocab, merges, t.n_vocab < o->vocab ? ": the text has no pair left" : "",
            tok_pattern_name((TokPattern)pattern), now_seconds() - t0);
    tok_free(&t);
    return 0;
}

/* the ids as decimal numbers separated by spaces, then a newline */
static void print_ids(const TokIds *ids) {
    for (size_t k = 0; k < ids->n; k++) {
        char buf[16], *p = buf + sizeof buf;
        unsigned v = (unsigned)ids->id[k];
        do *--p = (char)('0' + v % 10), v /= 10;
        while (v);
        if (k) putchar(' ');
        fwrite(p, 1, (size_t)(buf + sizeof buf - p), stdout);
    }
    putchar('\n');
}

/* standard output written in full, or exit 1 (a full disk, a closed pipe) */
static int flushed(const char *sub) {
    if (fflush(stdout) != 0 || ferror(stdout))
        moe_fatal("moe tokenizer %s: writing standard output failed", sub);
    return 0;
}

static int encode(Tokenizer *t, int docs) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    TokIds ids = {NULL, 0, 0};
    while ((n = getdelim(&line, &cap, docs ? '\0' : '\n', stdin)) > 0) {
        if (line[n - 1] == (docs ? '\0' : '\n')) n--; /* the separator is not encoded */
        ids.n = 0;
        tok_encode(t, line, (size_t)n, &ids);
        print_ids(&ids);
    }
    free(line);
    tok_ids_free(&ids);
    return flushed("encode");
}

/* one line of ids as its text; exit 2 at the first word that is not an id of t */
static void decode_line(const Tokenizer *t, char *s, long line_no, int docs) {
    for (char *w = strtok(s, " \t\r\n"); w; w = strtok(NULL, " \t\r\n")) {
        char *end;
        errno = 0;
        const long id = strtol(w, &end, 10);
        size_t len;
        const char *bytes =
            errno || *end || w[0] == '-' || w[0] == '+' ? NULL : tok_decode_id(t, id, &len);
        if (!bytes)
            moe_input_error(
                "moe tokenizer decode: line %ld: '%.40s' is not an id of the vocabulary "
                "(0 to %d)",
                line_no, w, t->n_vocab - 1);
        fwrite(bytes, 1, len, stdout);
    }
    putchar(docs ? '\0' : '\n');
}

static int decode(const Tokenizer *t, int docs) {
    char *line = NULL;
    size_t cap = 0;
    long no = 0;
    while (getline(&line, &cap, stdin) > 0) decode_line(t, line, ++no, docs);
    free(line);
    return flushed("decode");
}

int cmd_tokenizer(int argc, char **argv) {
    TokOpts o;
    parse(&o, argc, argv);
    int rc;
    if (strcmp(o.sub, "train") == 0) {
        if (o.tokenizer || o.docs)
            usage_error("tokenizer", "%s", "train takes no --tokenizer or --docs");
        rc = train(&o);
    } else if (strcmp(o.sub, "encode") == 0 || strcmp(o.sub, "decode") == 0) {
        if (!o.tokenizer) usage_error("tokenizer", "%s needs --tokenizer FILE", o.sub);
        if (o.vocab || o.n_from || o.out || o.pattern)
            usage_error("tokenizer", "%s takes --tokenizer and --docs only", o.sub);
        Tokenizer t;
        char err[1024];
        if (tok_load(&t, o.tokenizer, err, sizeof err))
            moe_input_error("moe tokenizer %s: %s", o.sub, err);
        rc = o.sub[0] == 'e' ? encode(&t, o.docs) : decode(&t, o.docs);
        tok_free(&t);
    } else {
        usage_error("tokenizer", "train, encode or decode, not '%s'", o.sub);
    }
    free(o.from);
    return rc;
}

/* ---- moe corpus --tokenizer --------------------------------------------------------------- */

typedef struct {
    Tokenizer t;
    TokIds ids; /* the last document's */
} CorpusEncoder;

static const int *corpus_encode(void *ctx, const uint8_t *text, size_t n, size_t *n_ids) {
    CorpusEncoder *e = (CorpusEncoder *)ctx;
    e->ids.n = 0;
    tok_encode(&e->t, (const char *)text, n, &e->ids);
    *n_ids = e->ids.n;
    return e->ids.id;
}

void corpus_tokenizer_open(CorpusTokenizer *ct, const char *path) {
    static const FileSpec spec = {"tokenizer", "pass a tokenizer.json (moe tokenizer train)",
                                  "tokenizer.json", 1ull << 31};
    char err[1024];
    CorpusEncoder *e = (CorpusEncoder *)calloc_check(1, sizeof *e);
    memset(ct, 0, sizeof *ct);
    /* the bytes the shards name by their CRC-32 are those copied beside them */
    char *file = file_read_all(path, &spec, &ct->file_len, err, sizeof err);
    if (!file || tok_load(&e->t, path, err, sizeof err) != 0)
        moe_input_error("moe corpus: --tokenizer: %s (nothing was written)", err);
    ct->file = file;
    ct->crc32 = crc32_update(0, file, ct->file_len);
    ct->vocab = (uint32_t)e->t.n_vocab;
    ct->encode = corpus_encode;
    ct->ctx = e;
}

void corpus_tokenizer_close(CorpusTokenizer *ct) {
    CorpusEncoder *e = (CorpusEncoder *)ct->ctx;
    tok_free(&e->t);
    tok_ids_free(&e->ids);
    free(e);
    free((char *)ct->file);
}
