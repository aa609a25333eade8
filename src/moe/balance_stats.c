/*
 * balance_stats.c: how even a load over the experts is (MaxVio, CV) and how sure the router is
 * (the mean top-1 score): the pieces of router.csv's statistics that token choice
 * (router_stats, router_balance.c) and expert choice (expert_choice_stats, expert_choice.c)
 * share. A leaf: it calls nothing else of moe/.
 */
#include "moe/moe_ops.h"

#include <math.h>

void load_balance(float *maxvio, float *cv, const float *load, int E) {
    /* load (E). mean = 1/E when the loads are fractions of all assignments; computed here so
     * that an average of several batches' loads works the same way. */
    double mean = 0.0, maxl = load[0], var = 0.0;
    for (int e = 0; e < E; e++) {
        mean += load[e];
        if (load[e] > maxl) maxl = load[e];
    }
    mean /= E;
    for (int e = 0; e < E; e++) var += ((double)load[e] - mean) * ((double)load[e] - mean);
    var /= E; /* population variance: the E experts are the whole population */
    *maxvio = mean > 0.0 ? (float)((maxl - mean) / mean) : 0.0f;
    *cv = mean > 0.0 ? (float)(sqrt(var) / mean) : 0.0f;
}

float router_mean_top1(const float *scores, int N, int E) {
    /* scores (N, E): mean over tokens of max_e scores[n, e] */
    double sum = 0.0;
    for (int n = 0; n < N; n++) {
        float best = scores[(size_t)n * E];
        for (int e = 1; e < E; e++)
            best = scores[(size_t)n * E + e] > best ? scores[(size_t)n * E + e] : best;
        sum += best;
    }
    return N > 0 ? (float)(sum / N) : 0.0f;
}
