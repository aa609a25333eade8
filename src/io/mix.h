/*
 * mix.h: the share of each domain in the training windows (data.mix, data.mix_temperature,
 * data.mix_end; handbook chapter 8).
 *
 * A mix is written as one of
 *   natural                 the shard as it is: windows anywhere, each domain by its size (the
 *                           loader's draw without a mix, unchanged)
 *   uniform                 every domain of the shard the same share
 *   name:weight,...         shares by domain name (a shard's names: en, de, es, it, ru, code).
 *                           When every domain is named the weights are relative (normalised to
 *                           sum 1); otherwise the named weights are shares (adding up to at most
 *                           1) and the domains not named share the rest in proportion to their
 *                           sizes. A weight of 0 leaves a domain out.
 * data.mix_temperature T > 0 instead gives each domain a share proportional to size^(1/T):
 * T = 1 is the natural mix, a large T nearly uniform (the multilingual models' recipe). A
 * domain's size is its count of window starts (its tokens, less T at each end of a run).
 * Syntax is checked with the config (mix_parse); names against a shard when training starts
 * (mix_resolve).
 */
#ifndef MOE_IO_MIX_H
#define MOE_IO_MIX_H

#include "io/data.h"

enum { MIX_NATURAL, MIX_UNIFORM, MIX_WEIGHTS };

typedef struct {
    int kind; /* MIX_* */
    int n;    /* MIX_WEIGHTS: the named domains */
    char name[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME];
    double weight[SHARD_MAX_DOMAINS];
} MixSpec;

/* The text of a mix (above) into m; -1 with a message naming the entry when it is not one: an
 * empty or long name, a name twice, a weight that is not a finite number >= 0, more than
 * SHARD_MAX_DOMAINS entries. (Weights all 0 are judged against the shard, by mix_resolve.) */
int mix_parse(const char *text, MixSpec *m, char *err, int errlen);

/* The share of each of the shard's domains, summing to 1, into share[0 .. n_domains): from the
 * spec, or with temperature > 0 from the sizes (the spec must then be natural). size[d]: each
 * domain's window starts. -1 with a message for a name the shard does not have (the message
 * lists its domains), named shares above 1 with domains left unnamed, or a mix that leaves no
 * domain with windows a share above 0 (all weights 0). */
int mix_resolve(const MixSpec *m, double temperature, const Shard *s, const uint64_t *size,
                double *share, char *err, int errlen);

/* "en:0.300,de:0.200,..." of shares (every domain of s), for provenance and messages. */
void mix_format(const Shard *s, const double *share, char *out, size_t n);

#endif
