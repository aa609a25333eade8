/*
 * bench.c: `moe bench`, the training step's speed (measure/bench.c) or, with --decode, the
 * speed of decoding (measure/bench_decode.c): its options checked here, then the measurement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "infer/quant.h"
#include "measure/bench.h"

/* The options that belong to one mode of the benchmark (the training step, --decode,
 * --layout), given with another: a usage error naming them. */
static void check_modes(const Opts *o) {
    if (!o->decode && (o->csv || o->batch_list || o->n_ckpts || o->quant || o->offload))
        usage_error("bench", "%s are options of the decoding benchmark: add --decode",
                    "--csv, --batch, --ckpt, --quant and --offload");
    if (o->decode && (o->profile || o->profile_out || o->rounds > 1 || o->reference_attention))
        usage_error("bench", "%s time the training step: drop them with --decode",
                    "--profile, --rounds and --reference-attention");
    if (o->decode && o->csv && o->json) usage_error("bench", "%s: choose one", "--csv and --json");
    if (o->n_sets && !o->layout)
        usage_error("bench", "%s sets the grid of --layout: add --layout", "--set");
    if (o->layout && (o->decode || o->profile || o->profile_out || o->rounds > 1 || o->json))
        usage_error("bench", "%s are not options of --layout",
                    "--decode, --profile, --rounds and --json");
}

int cmd_bench(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "bench", argc, argv);
    BenchOptions bo = {.steps = (int)o.steps,
                       .warmup = (int)o.warmup,
                       .rounds = (int)o.rounds,
                       .threads = (int)o.threads,
                       .json = o.json,
                       .profile = o.profile || o.profile_out,
                       .reference_attention = o.reference_attention,
                       .device = o.device,
                       .n_configs = o.n_configs};
    bo.profile_out =
        o.profile_out ? o.profile_out : (bo.profile ? "build/bench_profile.csv" : NULL);
    char err[1024];
    check_modes(&o);
    if (o.decode) {
        bo.decode = 1, bo.csv = o.csv, bo.n_ckpts = o.n_ckpts;
        bo.quant = o.quant ? quant_format_parse(o.quant) : QUANT_FP32;
        bo.offload = (int)o.offload;
        for (int i = 0; i < o.n_ckpts; i++) {
            Config probe;
            load_ckpt_config(&probe, o.ckpts[i]); /* exit 2 on a missing or bad checkpoint */
            bo.ckpts[i] = o.ckpts[i];
        }
        if (!o.steps_given) bo.steps = 16;
        if (o.batch_list && !o.batch_list[0])
            usage_error("bench",
                        "--batch '%s' lists no batch size: give some (1,4,16,64), or "
                        "drop --batch for those",
                        o.batch_list);
        for (const char *p = o.batch_list; p && *p;) {
            char *end;
            const long b = strtol(p, &end, 10);
            /* a size after every comma: "1,4," is a mistake, not 1,4 */
            if (end == p || b < 1 || b > 256 || (*end && (*end != ',' || !end[1])))
                usage_error("bench",
                            "--batch is a list of batch sizes from 1 to 256 separated "
                            "by commas (1,4,16,64), not '%s'",
                            o.batch_list);
            if (bo.n_batches == BENCH_MAX_BATCHES)
                usage_error("bench", "--batch %s: at most 8 batch sizes", o.batch_list);
            bo.batches[bo.n_batches++] = (int)b;
            p = *end ? end + 1 : end;
        }
    }
    if (o.device && !backend_in_build(o.device, err, sizeof err))
        usage_error("bench", "--device: %s", err);
    if (o.precision) {
        char set[64];
        Config probe;
        config_defaults(&probe);
        snprintf(set, sizeof set, "train.precision=%.40s", o.precision);
        if (config_set(&probe, set, err, sizeof err) != 0)
            usage_error("bench", "--precision: %s", err);
        bo.precision = probe.precision;
    }
    for (int i = 0; i < o.n_configs; i++) {
        Config c;
        int B, T;
        if (bench_config(&c, &B, &T, o.configs[i], err, sizeof err) != 0)
            usage_error("bench", "--config: %s", err);
        bo.configs[i] = o.configs[i];
    }
    if (o.layout) {
        if (bench_layout_run(&bo, (const char *const *)o.sets, o.n_sets, stdout, err, sizeof err) !=
            0)
            moe_input_error("bench --layout: %s", err);
        return 0;
    }
    if ((o.decode ? bench_decode_run(&bo, stdout, err, sizeof err)
                  : bench_run(&bo, stdout, err, sizeof err)) != 0)
        moe_input_error("bench: %s", err);
    return 0;
}
