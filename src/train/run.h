/*
 * run.h: the run directory and what it records.
 *
 *   runs/NAME/config.txt      every resolved setting (key = value)
 *   runs/NAME/provenance.txt  commit, data shard checksums, seed, threads, machine, the
 *                             training FLOPs per token, the checkpoint --init started from
 *   runs/NAME/train.csv       step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss
 *   runs/NAME/router.csv      step,layer,maxvio,cv,entropy,drop_frac,load_*,bias_*,top1_score,
 *                             drop_*,pad_frac,expert_sim: one row per step and MoE block
 *   runs/NAME/val_router.csv  step,layer,maxvio,cv,load_*,drop_frac (at every evaluation)
 *   runs/NAME/domains.csv     step,layer,domain,expert,fraction (at every evaluation)
 *   runs/NAME/ckpt.bin        the last checkpoint
 * src/README.md ("Run directory") defines every column.
 */
#ifndef MOE_RUN_H
#define MOE_RUN_H

#include <stdio.h>

#include "config/config.h"
#include "io/data.h"
#include "io/files.h"
#include "parallel/dist.h"

void run_path(char *out, size_t n, const char *dir, const char *file);

/* Write config.txt (every setting of c), atomically; exits 2 with a message when it cannot. */
void run_write_config(const char *dir, const Config *c);

/* Write provenance.txt: commit, shard paths and CRC-32s, the shares of a domain mix (mix_lines:
 * "key = value" lines the trainer resolved, or NULL), seed, threads, host and CPU, the
 * checkpoint whose weights the run started from (init_from, `moe train --init`; NULL: none)
 * and the processes of a run spread over several (d; NULL: one). */
void run_write_provenance(const char *dir, const Config *c, const Shard *train, const Shard *val,
                          const char *mix_lines, int threads, int resumed_at, const char *init_from,
                          const Dist *d);

/* The data check of a resume: 0 when the shards' payload CRC-32s are those that the last
 * data.train / data.val lines of dir/provenance.txt record (or nothing is recorded); -1 with a
 * message naming the file that changed, and the flag that allows it, when one differs. */
int run_check_data(const char *dir, const Shard *train, const Shard *val, char *err, int errlen);

/* Open a CSV for appending. When keep_until_step >= 0 the existing file is first cut back to
 * its header and the complete rows whose first field (the step) is <= keep_until_step (a
 * resumed run drops the rows written after its checkpoint, and a torn last row); when the
 * file is new, header is written and flushed at once. Every write is checked: a failure
 * removes the temporary file and exits 2 with a message (the run directory stays as it was). */
FILE *csv_open(const char *dir, const char *file, const char *header, int keep_until_step);

#endif
