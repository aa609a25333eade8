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
 *   runs/NAME/tokenizer.json  the tokenizer of BPE shards (tokenizer_crc32 not 0), copied from
 *                             beside data.train; none for bytes
 *   runs/NAME/lock            empty; `moe train` holds a lock on it while it runs
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

/* Write provenance.txt: commit, shard paths and CRC-32s, the tokenizer's path and CRC-32 (the
 * shards' tokenizer_crc32; tokenizer NULL: bytes, no line), the shares of a domain mix
 * (mix_lines: "key = value" lines the trainer resolved, or NULL), seed, threads, host and CPU,
 * the checkpoint whose weights the run started from (init_from, `moe train --init`; NULL: none)
 * and the processes of a run spread over several (d; NULL: one). */
void run_write_provenance(const char *dir, const Config *c, const Shard *train, const Shard *val,
                          const char *tokenizer, const char *mix_lines, int threads, int resumed_at,
                          const char *init_from, const Dist *d);

/* The tokenizer of a run's shards, by the convention that a run's tokenizer is dir/tokenizer.json
 * and its identity the CRC-32 of the file, the shards' tokenizer_crc32 (0: bytes, no tokenizer).
 * train and val must be of the same tokenizer. A run that has its tokenizer.json already
 * (resume: a resume or a restart) keeps it: it must be the shards'. Otherwise the tokenizer is
 * tokenizer.json beside the training shard (moe corpus --tokenizer puts it there), and it must be
 * the shards'. 0 with its path in path ("" for bytes), or -1 with a message naming the files,
 * both CRC-32s and what to do. */
int run_find_tokenizer(const char *dir, int resume, const Shard *train, const Shard *val,
                       char *path, size_t path_len, char *err, int errlen);

/* Copy the tokenizer at from (run_find_tokenizer's path, of CRC-32 crc) into dir as
 * tokenizer.json, atomically; nothing when it is that file already. Exits 2 when it cannot. */
void run_copy_tokenizer(const char *dir, const char *from, uint32_t crc);

/* The data check of a resume: 0 when the shards' payload CRC-32s are those that the last
 * data.train / data.val lines of dir/provenance.txt record (or its lines predate the
 * checksums); -1 with a message naming the file that changed, and the flag that allows it,
 * when one differs, or when provenance.txt is missing or records no data at all. */
int run_check_data(const char *dir, const Shard *train, const Shard *val, char *err, int errlen);

/* Lock the run directory for this process, or exit 2 with "DIR is in use by process N" when
 * another process holds it. The lock (fcntl, on DIR/lock) lasts until the process ends, however
 * it ends: the kernel releases it, so a killed run leaves no stale lock behind. A second call
 * does nothing. */
void run_lock(const char *dir);

/* The settings check of a resume: 0 when dir/config.txt (when there is one) holds the settings
 * of the checkpoint (stored) or those this command resolved (now: stored and its --set);
 * -1 with a message naming each key that differs and both values, or the line that is not a
 * setting. */
int run_check_config(const char *dir, const Config *stored, const Config *now, char *err,
                     int errlen);

/* The logs check of a resume from the checkpoint of step: every CSV of dir starts with its
 * header line, and train.csv holds the row of that step (the rows of a step are on disk
 * before its checkpoint); -1 with a message naming the damaged file otherwise. */
int run_check_logs(const char *dir, int step, char *err, int errlen);

/* The check of a run without ckpt.bin that --resume would start again from step 0 with its
 * config.txt: -1 with a message when its logs show it had a checkpoint (train.csv rows past
 * the step of its first one, or a resumed segment in provenance.txt), or train.csv is
 * damaged: the checkpoint was lost, and starting again would overwrite the logs. */
int run_check_restart(const char *dir, char *err, int errlen);

/* s as one word of a shell command: as it is when it is safe, else in single quotes. */
void shell_word(char *out, size_t n, const char *s);

/* Open a CSV for appending. When keep_until_step >= 0 the existing file is first cut back to
 * its header and the complete rows whose first field (the step) is <= keep_until_step (a
 * resumed run drops the rows written after its checkpoint, and a torn last row); when the
 * file is new, header is written and flushed at once. Every write is checked: a failure
 * removes the temporary file and exits 2 with a message (the run directory stays as it was). */
FILE *csv_open(const char *dir, const char *file, const char *header, int keep_until_step);

#endif
