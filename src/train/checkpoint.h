/*
 * checkpoint.h: a model's state as a checkpoint file (format: io/tensorfile.h).
 *
 * Entries: "param/<tensor>" for every tensor of the parameter table, "adam_m/<tensor>" and
 * "adam_v/<tensor>" for the AdamW moments, "rng/loader" (the data loader's RNG: the data
 * position), "rng/router" (the stream of the router's exploration noise),
 * "router_bias/layers.L" for each MoE block L (the aux-free biases, E floats), and where a run
 * skipped updates (train.spike_action=skip) "optimizer/skipped" (their count, 8 bytes). The header
 * holds the step, the config text the run's settings. Tensor names and shapes are checked one
 * by one on load, so a checkpoint of another model shape is refused with a message that names
 * the first difference.
 */
#ifndef MOE_CHECKPOINT_H
#define MOE_CHECKPOINT_H

#include "base/util.h"
#include "model/model.h"

/* Save weights, moments, step and the loader RNG (may be NULL) atomically to path. */
int checkpoint_save(const Model *m, const Rng *loader_rng, const char *path, char *err, int errlen);

/* Read the settings stored in a checkpoint (defaults, then its config text). */
int checkpoint_config(const char *path, Config *c, char *err, int errlen);

/* The step a checkpoint file's header holds, or -1 where path is no checkpoint. */
long long checkpoint_step(const char *path);

/* Load a checkpoint into a model built with the same shape. with_optimizer also restores
 * the moments, the step and (when loader_rng is not NULL) the loader RNG; without it only
 * the weights are loaded and the step is left at 0. */
int checkpoint_load(Model *m, Rng *loader_rng, const char *path, int with_optimizer, char *err,
                    int errlen);

#endif
