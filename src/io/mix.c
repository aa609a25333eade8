/*
 * mix.c: a domain mix from its text, and the shares it gives a shard's domains. See mix.h.
 */
#include "io/mix.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mix_parse(const char *text, MixSpec *m, char *err, int errlen) {
    memset(m, 0, sizeof *m);
    if (strcmp(text, "natural") == 0) return m->kind = MIX_NATURAL, 0;
    if (strcmp(text, "uniform") == 0) return m->kind = MIX_UNIFORM, 0;
    m->kind = MIX_WEIGHTS;
    for (const char *p = text;;) {
        const size_t len = strcspn(p, ",");
        char entry[96];
        snprintf(entry, sizeof entry, "%.*s", (int)(len < 95 ? len : 95), p);
        const char *colon = strchr(entry, ':');
        if (!colon || colon == entry || (size_t)(colon - entry) >= SHARD_DOMAIN_NAME)
            return set_error(err, errlen,
                             "data.mix: '%s' is not name:weight (a domain name of at most %d "
                             "characters, then a weight); write natural, uniform or e.g. "
                             "en:0.4,code:0.2",
                             entry, SHARD_DOMAIN_NAME - 1);
        if (m->n == SHARD_MAX_DOMAINS)
            return set_error(err, errlen, "data.mix: more than %d domains", SHARD_MAX_DOMAINS);
        char *end = NULL;
        errno = 0;
        const double w = strtod(colon + 1, &end);
        const int nl = (int)(colon - entry);
        if (!colon[1] || *end || isnan(w))
            return set_error(err, errlen,
                             "data.mix: the weight of '%.*s' is '%s', not a number; write a "
                             "weight >= 0 (en:0.4)",
                             nl, entry, colon + 1);
        if (w < 0)
            return set_error(err, errlen,
                             "data.mix: the weight of '%.*s' is %s, below 0; write a weight >= 0 "
                             "(0 leaves the domain out)",
                             nl, entry, colon + 1);
        /* strtod's ERANGE: past DBL_MAX, or below the smallest normal double, where a weight
         * keeps too few bits to be compared with the others */
        if (!isfinite(w) || (errno == ERANGE && fabs(w) > 1.0))
            return set_error(err, errlen,
                             "data.mix: the weight of '%.*s', %s, is too large for a double; a "
                             "weight is a share (at most 1), or with every domain named a "
                             "ratio: scale them all down",
                             nl, entry, colon + 1);
        if (errno == ERANGE || (w > 0 && w < DBL_MIN))
            return set_error(err, errlen,
                             "data.mix: the weight of '%.*s', %s, is above 0 but below the "
                             "smallest normal double (%g); write 0 to leave the domain out, or "
                             "a larger weight (with every domain named only the ratios matter, "
                             "so all may be scaled up)",
                             nl, entry, colon + 1, DBL_MIN);
        snprintf(m->name[m->n], SHARD_DOMAIN_NAME, "%.*s", (int)(colon - entry), entry);
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->name[i], m->name[m->n]) == 0)
                return set_error(err, errlen, "data.mix names '%s' twice", m->name[i]);
        m->weight[m->n++] = w;
        if (!p[len]) break;
        p += len + 1;
    }
    return 0; /* weights all 0 are judged against the shard (mix_resolve) */
}

int mix_resolve(const MixSpec *m, double temperature, const Shard *s, const uint64_t *size,
                double *share, char *err, int errlen) {
    const int D = (int)s->n_domains;
    double total = 0.0;
    for (int d = 0; d < D; d++) share[d] = 0.0;
    if (temperature > 0.0) { /* size^(1/T) */
        for (int d = 0; d < D; d++)
            share[d] = size[d] ? pow((double)size[d], 1.0 / temperature) : 0;
    } else if (m->kind == MIX_NATURAL) {
        for (int d = 0; d < D; d++) share[d] = (double)size[d];
    } else if (m->kind == MIX_UNIFORM) {
        for (int d = 0; d < D; d++) share[d] = size[d] ? 1.0 : 0.0;
    } else {
        int named[SHARD_MAX_DOMAINS] = {0}, n_named = 0;
        double named_sum = 0.0;
        for (int i = 0; i < m->n; i++) {
            int d = 0;
            while (d < D && strcmp(s->domain[d], m->name[i]) != 0) d++;
            if (d == D) {
                char list[SHARD_MAX_DOMAINS * (SHARD_DOMAIN_NAME + 2)] = "";
                for (int k = 0; k < D; k++) {
                    strcat(list, k ? ", " : "");
                    strcat(list, s->domain[k]);
                }
                return set_error(err, errlen,
                                 "data.mix names '%s', which %s does not have; its "
                                 "domains: %s",
                                 m->name[i], s->path, list);
            }
            named[d] = 1, n_named++;
            share[d] = m->weight[i];
            named_sum += m->weight[i];
        }
        if (n_named < D) { /* the rest shared by size */
            if (named_sum > 1.0 + 1e-9)
                return set_error(err, errlen,
                                 "data.mix: the named domains' shares add up to %g, more than 1, "
                                 "and the others need the rest; name every domain to give "
                                 "relative weights, or lower the shares",
                                 named_sum);
            double rest = 0.0;
            for (int d = 0; d < D; d++) rest += named[d] ? 0.0 : (double)size[d];
            for (int d = 0; d < D; d++)
                if (!named[d] && rest > 0) share[d] = (1.0 - named_sum) * (double)size[d] / rest;
        }
    }
    for (int d = 0; d < D; d++) {
        if (!size[d]) share[d] = 0.0; /* a domain without one whole window is never drawn */
        total += share[d];
    }
    if (total <= 0.0)
        return set_error(err, errlen,
                         "data.mix leaves nothing to draw from %s: every domain has a share of 0, "
                         "or only domains without a window of model.seq_len + 1 tokens have "
                         "one; give a domain with windows a share above 0",
                         s->path);
    for (int d = 0; d < D; d++) share[d] /= total;
    return 0;
}

void mix_format(const Shard *s, const double *share, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (uint32_t d = 0; d < s->n_domains && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%s:%.4f", d ? "," : "", s->domain[d], share[d]);
}
