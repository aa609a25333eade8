/*
 * Chapter 3, step_profile.c: where one process's training step goes, op by op, for the model of
 * an existing run.
 *
 *   make chapters && build/chapters/03-expert-parallel/step_profile --run runs/ch03-ep1-aux \
 *       --out /tmp/profile-run [--steps 30]
 *
 * A run over several processes records in dist.csv the seconds each process spends in its
 * experts; a one-process run has no dist.csv. To split its step the same way, this program
 * trains the run's model again (its config.txt, the same settings and threads) for a few steps
 * into another run directory with the engine's op profiler on (src/model/profile.h: PROF_EXPERTS is
 * the expert GEMMs and their SwiGLU, what ep.c times as expert seconds), and prints the mean
 * seconds per optimizer step of every op, forward plus backward, into NEW_RUN_DIR/profile.csv
 * (the training loop's own lines go to stdout):
 *
 *   op,seconds_per_step
 *   experts,0.0612
 *   ...
 *
 * The new run's train.csv has its own tokens/s, so the caller can turn these into shares of its
 * step (chapters/03-expert-parallel/ablate.sh does, for the ep1 bars of time.png).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"

static void usage(void) {
    fprintf(stderr, "usage: step_profile --run RUN_DIR --out NEW_RUN_DIR [--steps N]\n");
    exit(MOE_EXIT_INPUT);
}

int main(int argc, char **argv) {
    const char *run = NULL, *out = NULL;
    int steps = 30;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--run") == 0)
            run = argv[++i];
        else if (strcmp(argv[i], "--out") == 0)
            out = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 100000)
                moe_input_error("--steps takes 1 to 100000, not %s", argv[i]);
            steps = (int)v;
        } else
            usage();
    }
    if (!run || !out) usage();

    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/config.txt", run);
    if (!file_exists(path))
        moe_input_error("no %s: train the run first (moe train --out %s)", path, run);
    Config c;
    config_defaults(&c);
    if (config_load_file(&c, path, err, sizeof err) != 0) moe_input_error("%s: %s", path, err);
    /* the same model, data and threads; only the length and what is written change */
    c.steps = steps;
    if (c.warmup > steps) c.warmup = steps;
    c.eval_every = 0;
    c.ckpt_every = 0;
    c.ep = 1;

    prof_reset();
    prof_enabled = 1;
    TrainOptions o = {.out_dir = out, .quiet = 1};
    if (train_run(&c, &o) != 0) return 1;
    prof_enabled = 0;

    snprintf(path, sizeof path, "%s/profile.csv", out);
    FILE *f = fopen_check(path, "w");
    fprintf(f, "op,seconds_per_step\n");
    for (int op = 0; op < PROF_COUNT; op++)
        fprintf(f, "%s,%.6f\n", prof_name((ProfOp)op),
                (prof_total.fwd[op] + prof_total.bwd[op]) / steps);
    if (fclose(f) != 0) moe_fatal("cannot write %s", path);
    printf("step_profile: wrote %s\n", path);
    return 0;
}
