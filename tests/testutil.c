/* testutil.c: see testutil.h. */
#include "testutil.h"

#include "base/util.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

long tol_worst(const float *got, const float *want, size_t n, float atol, float rtol,
               double *excess) {
    long worst = -1;
    double worst_ex = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        double allowed = (double)atol + (double)rtol * fabs(w);
        double ex = fabs(g - w) - allowed;
        if (isnan(g) || isnan(w)) ex = INFINITY;
        if (ex > 0.0 && (worst < 0 || ex > worst_ex)) {
            worst = (long)i;
            worst_ex = ex;
        }
    }
    *excess = worst_ex;
    return worst;
}

void gradcheck(ScalarFn fn, void *ctx, float *x, const float *analytic, size_t n, float eps,
               size_t max_probe, const char *what) {
    size_t probes = n <= max_probe ? n : max_probe;
    for (size_t p = 0; p < probes; p++) {
        size_t i = (p * n) / probes; /* every element, or an even spread */
        float saved = x[i];
        x[i] = saved + eps;
        double up = fn(ctx);
        x[i] = saved - eps;
        double down = fn(ctx);
        x[i] = saved;
        float numeric = (float)((up - down) / (2.0 * (double)eps));
        double ex;
        long bad = tol_worst(&analytic[i], &numeric, 1, TOL_GRAD_ATOL, TOL_GRAD_RTOL, &ex);
        ck_assert_msg(bad < 0, "%s: gradient element %zu: analytic %.7g, finite difference %.7g",
                      what, i, (double)analytic[i], (double)numeric);
    }
}

void random_tokens(int *inputs, int *targets, int n, unsigned long long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        inputs[i] = (int)rng_below(&r, 256);
        targets[i] = (int)rng_below(&r, 256);
    }
}

void fill_uniform(float *x, size_t n, float scale, unsigned long long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * rng_uniform(&r) - 1.0f) * scale;
}

double dot_d(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

float max_abs(const float *a, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

uint8_t *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = (uint8_t *)malloc_check((size_t)*n + 1);
    ck_assert(fread(b, 1, (size_t)*n, f) == (size_t)*n);
    b[*n] = 0;
    fclose(f);
    return b;
}

void spit(const char *path, const void *b, long n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert(fwrite(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
}

static char tmp_dir[256];

const char *tmp_dir_make(const char *tag) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/moe_test_%s_XXXXXX", tag);
    ck_assert_msg(mkdtemp(tmp_dir) != NULL, "mkdtemp %s failed", tmp_dir);
    return tmp_dir;
}

static void remove_tree(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(dp);
    rmdir(dir);
}

void tmp_dir_remove(void) {
    if (tmp_dir[0]) remove_tree(tmp_dir);
    tmp_dir[0] = 0;
}

const char *tmp_path(const char *name) {
    static char p[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp_dir, name);
    return p[k];
}
