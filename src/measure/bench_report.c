/*
 * bench_report.c: the benchmark's report (bench.h), from the rows bench.c measured: the table,
 * the JSON object and the per-op CSV.
 */
#include "measure/bench_report.h"

#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "io/json.h"

/* One profile line: ms per step. total = fwd + bwd + time outside both passes. flops: the
 * op's model FLOPs per token (model_flops_by_op; 0 for most ops); gflops: those over its total
 * time, NAN for an op with none counted. */
typedef struct {
    const char *op;
    double fwd, bwd, total, flops, gflops;
} OpLine;

/* The ops, then "other": time of the step that no op accounts for (forward and backward
 * bookkeeping, zero_grad). The optimizer runs outside both passes: its time is in total. */
static int op_lines(OpLine *ln, const Row *w) {
    const StepResult *r = &w->r;
    const double tokens = (double)w->B * w->T;
    double fsum = 0.0, bsum = 0.0, all = 0.0;
    int n = 0;
    for (int op = 0; op < PROF_COUNT; op++) {
        double f = r->op_fwd[op], b = r->op_bwd[op], fl = w->op_flops[op];
        double gf = fl > 0.0 && f + b > 0.0 ? bench_gflops(fl, tokens, f + b) : NAN;
        all += f + b;
        if (op == PROF_OPTIMIZER) {
            ln[n++] = (OpLine){prof_name((ProfOp)op), 0.0, 0.0, 1e3 * (f + b), fl, gf};
            continue;
        }
        fsum += f;
        bsum += b;
        ln[n++] = (OpLine){prof_name((ProfOp)op), 1e3 * f, 1e3 * b, 1e3 * (f + b), fl, gf};
    }
    double of = fmax(r->fwd_mean - fsum, 0.0), ob = fmax(r->bwd_mean - bsum, 0.0);
    double ot = fmax(r->step_mean - all, of + ob);
    ln[n++] = (OpLine){"other", 1e3 * of, 1e3 * ob, 1e3 * ot, 0.0, NAN};
    return n;
}

/* 1 when the steps ran the loop attention of cpu-ref: asked for, or the backend's own */
static int loop_attention(const BenchOptions *o) {
    return o->reference_attention || (o->device && strcmp(o->device, "cpu-ref") == 0);
}

static const char *const PRECISIONS[] = {"fp32", "tf32", "bf16"};

/* The datasheet's dense peak of a GPU at a precision, TFLOP/s (no sparsity), or 0 for a GPU
 * not in this list. gpu is backend_cuda_describe's line, which starts with the GPU's name. */
static double datasheet_peak(const char *gpu, int precision) {
    static const struct {
        const char *name;
        double tflops[3]; /* fp32, tf32, bf16 */
    } PEAKS[] = {
        {"H200", {67.0, 494.7, 989.4}}, /* SXM */
        {"H100", {67.0, 494.7, 989.4}}, /* SXM */
        {"A100", {19.5, 156.0, 312.0}},
    };
    for (size_t i = 0; gpu && i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(gpu, PEAKS[i].name)) return PEAKS[i].tflops[precision];
    return 0.0;
}

static const double MIB = 1024.0 * 1024.0;

extern const char moe_git_commit[]; /* build/version.c: the commit this binary was built from */

/* A config's "profile" member: one object per op line. */
static void json_profile(FILE *out, const Row *w) {
    OpLine ln[PROF_COUNT + 1];
    int nl = op_lines(ln, w);
    fprintf(out, ",\n     \"profile\": [");
    for (int j = 0; j < nl; j++) {
        fprintf(out,
                "%s\n       {\"op\": \"%s\", \"fwd_ms\": %.6g, \"bwd_ms\": %.6g, "
                "\"total_ms\": %.6g, \"percent\": %.6g, \"flops_per_token\": %.6g, "
                "\"gflops\": ",
                j ? "," : "", ln[j].op, ln[j].fwd, ln[j].bwd, ln[j].total,
                100.0 * ln[j].total / (1e3 * w->r.step_mean), ln[j].flops);
        if (isnan(ln[j].gflops))
            fprintf(out, "null}");
        else
            fprintf(out, "%.6g}", ln[j].gflops);
    }
    fprintf(out, "]");
}

void bench_print_json(FILE *out, const BenchOptions *o, const char *cpu, long cores,
                      const SgemmResult *sg, const Row *rows, int n) {
    fprintf(out, "{\n  \"commit\": ");
    json_write_string(out, moe_git_commit);
    fprintf(out, ",\n  \"machine\": {\"cpu\": ");
    json_write_string(out, cpu);
    fprintf(out,
            ", \"cores\": %ld, \"threads\": %d, \"blas_core\": \"%s\"},\n"
            "  \"sgemm\": {\"n\": %d, \"reps\": %d, \"gflops\": %.6g, \"gflops_median\": %.6g, "
            "\"gflops_low\": %.6g, \"gflops_high\": %.6g},\n"
            "  \"steps\": %d,\n  \"warmup\": %d,\n  \"rounds\": %d,\n  \"device\": \"%s\",\n"
            "  \"attention\": \"%s\",\n  \"precision\": \"%s\",\n  \"gpu\": %s%s%s,\n"
            "  \"peak_tflops\": %.6g,\n  \"configs\": [",
            cores, sg->threads, backend_blas_core(), sg->n, BENCH_SGEMM_REPS, sg->gflops_best,
            sg->gflops_median, sg->gflops_low, sg->gflops_high, o->steps, o->warmup,
            o->rounds > 1 ? o->rounds : 1, o->device ? o->device : "cpu",
            loop_attention(o) ? "reference" : "gemm", PRECISIONS[o->precision],
            sg->gpu[0] ? "\"" : "null", sg->gpu, sg->gpu[0] ? "\"" : "",
            datasheet_peak(sg->gpu[0] ? sg->gpu : NULL, o->precision));
    for (int i = 0; i < n; i++) {
        const Row *w = &rows[i];
        const Config *c = &w->c;
        const MemoryBreakdown *m = &w->mem;
        fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
        json_write_string(out, w->ref->name);
        fprintf(out,
                ", \"moe\": %s, \"d_model\": %d, \"n_layer\": %d, \"n_head\": %d, "
                "\"num_experts\": %d, \"top_k\": %d, \"d_expert\": %d, \"d_ff\": %d, "
                "\"batch\": %d, \"seq_len\": %d,\n     \"params_total\": %zu, "
                "\"params_active\": %zu, \"flops_per_token\": %.6g,\n"
                "     \"step_ms\": %.6g, \"step_ms_min\": %.6g, \"step_ms_max\": %.6g, "
                "\"tokens_per_s\": %.6g, \"gflops\": %.6g, \"sgemm_fraction\": %.6g, "
                "\"moe_over_dense\": ",
                c->num_experts > 0 ? "true" : "false", c->d_model, c->n_layer, c->n_head,
                c->num_experts, c->num_experts > 0 ? c->top_k : 0,
                c->num_experts > 0 ? config_expert_hidden(c) : 0, c->d_ff, w->B, w->T,
                w->params_total, w->params_active, w->flops_per_token, 1e3 * w->r.step_median,
                1e3 * w->r.step_min, 1e3 * w->r.step_max, w->tokens_per_s, w->gflops,
                w->sgemm_frac);
        if (isnan(w->moe_over_dense))
            fprintf(out, "null");
        else
            fprintf(out, "%.6g", w->moe_over_dense);
        fprintf(out, ", \"tokens_over_fewer_experts\": ");
        if (isnan(w->over_fewer))
            fprintf(out, "null");
        else
            fprintf(out, "%.6g", w->over_fewer);
        const double peak = datasheet_peak(sg->gpu[0] ? sg->gpu : NULL, o->precision);
        fprintf(out, ", \"mfu\": ");
        if (peak > 0.0)
            fprintf(out, "%.6g", w->gflops / (1e3 * peak));
        else
            fprintf(out, "null");
        fprintf(out, ", \"device_mib\": %.6g", w->r.device_mib);
        fprintf(out,
                ",\n     \"peak_rss_mib\": %.6g, \"analytical_mib\": %.6g, "
                "\"rss_over_analytical\": %.6g,\n"
                "     \"memory_floats\": {\"params\": %zu, \"grads\": %zu, \"adam\": %zu, "
                "\"activations\": %zu, \"scratch\": %zu, \"int_words\": %zu, "
                "\"total_words\": %zu, \"pad_bytes\": %zu}",
                w->r.peak_rss_kib / 1024.0, 4.0 * m->total_words / MIB,
                w->r.peak_rss_kib * 1024.0 / (4.0 * m->total_words), m->params, m->grads, m->adam,
                m->acts_resid + m->acts_attn + m->acts_ffn + m->acts_head, m->scratch, m->int_words,
                m->total_words, m->pad_bytes);
        if (o->profile) json_profile(out, w);
        fprintf(out, "}");
    }
    fprintf(out, "\n  ]\n}\n");
}

/* The first line: the machine (or the GPU) and its sgemm (or cuBLAS) GFLOP/s over R rounds. */
static void text_machine(FILE *out, const BenchOptions *o, const char *cpu, long cores,
                         const SgemmResult *sg, int R) {
    if (sg->gpu[0])
        fprintf(out, "gpu: %s; %s products; cuBLAS %dx%dx%d: %.1f GFLOP/s ", sg->gpu,
                PRECISIONS[o->precision], sg->n, sg->n, sg->n, sg->gflops_best);
    else
        fprintf(out, "machine: %s, %ld cores; %d threads; %s %s; sgemm %dx%dx%d: %.1f GFLOP/s ",
                cpu, cores, sg->threads, backend_blas_library(), backend_blas_core(), sg->n, sg->n,
                sg->n, sg->gflops_best);
    if (R == 1)
        fprintf(out, "(best of %d; median %.1f)\n", BENCH_SGEMM_REPS, sg->gflops_median);
    else
        fprintf(out, "(median over %d rounds of the best of %d; %.1f to %.1f)\n", R,
                BENCH_SGEMM_REPS, sg->gflops_low, sg->gflops_high);
}

/* The profile table of one config: each op's share of the step and its GFLOP/s, then the
 * products together. */
static void text_profile(FILE *out, const BenchOptions *o, const SgemmResult *sg, const Row *w,
                         int gpu) {
    OpLine ln[PROF_COUNT + 1];
    int nl = op_lines(ln, w);
    fprintf(out, "\nprofile %s: ms per step, mean of %d steps (%.1f ms)\n", w->ref->name, o->steps,
            1e3 * w->r.step_mean);
    fprintf(out, "  %-12s %9s %9s %9s %7s %8s %7s\n", "op", "fwd ms", "bwd ms", "total ms",
            "% step", "GFLOP/s", gpu ? "%cuBLAS" : "%sgemm");
    for (int j = 0; j < nl; j++) {
        fprintf(out, "  %-12s %9.2f %9.2f %9.2f %6.1f%%", ln[j].op, ln[j].fwd, ln[j].bwd,
                ln[j].total, 100.0 * ln[j].total / (1e3 * w->r.step_mean));
        if (isnan(ln[j].gflops))
            fprintf(out, " %8s %7s\n", "-", "-");
        else
            fprintf(out, " %8.1f %6.1f%%\n", ln[j].gflops, 100.0 * ln[j].gflops / sg->gflops_best);
    }
    /* the ops that run the model's FLOPs, together: every FLOP over their time alone */
    double ms = 0.0;
    for (int j = 0; j < nl; j++)
        if (ln[j].flops > 0.0) ms += ln[j].total;
    if (ms > 0.0) {
        double gf = bench_gflops(w->flops_per_token, (double)w->B * w->T, 1e-3 * ms);
        fprintf(out, "  %-12s %29.2f %7.1f%% %8.1f %6.1f%%\n", "all products", ms,
                100.0 * ms / (1e3 * w->r.step_mean), gf, 100.0 * gf / sg->gflops_best);
    }
}

void bench_print_text(FILE *out, const BenchOptions *o, const char *cpu, long cores,
                      const SgemmResult *sg, const Row *rows, int n) {
    const int R = o->rounds > 1 ? o->rounds : 1;
    text_machine(out, o, cpu, cores, sg, R);
    char rounds[64] = "";
    if (R > 1) snprintf(rounds, sizeof rounds, ", the median over %d interleaved rounds", R);
    fprintf(out,
            "step: median of %d timed training steps after %d warm-up steps%s, random tokens; "
            "backend %s; attention: %s; built from commit %s\n\n",
            o->steps, o->warmup, rounds, o->device ? o->device : "cpu",
            !loop_attention(o)       ? "GEMM"
            : o->reference_attention ? "reference loops (--reference-attention)"
                                     : "reference loops (the backend's)",
            moe_git_commit);
    const int gpu = sg->gpu[0] != '\0';
    fprintf(out, "%-12s %7s %13s %9s %9s %8s %7s %6s %9s %9s %6s\n", "config", "B x T", "params M",
            "step ms", "tokens/s", "GFLOP/s", gpu ? "%cuBLAS" : "%sgemm", "/dense",
            gpu ? "GPU MiB" : "RSS MiB", "calc MiB", "ratio");
    fprintf(out, "%-12s %7s %13s\n", "", "", "total/active");
    for (int i = 0; i < n; i++) {
        const Row *w = &rows[i];
        char bt[32], params[40], vsd[16];
        snprintf(bt, sizeof bt, "%dx%d", w->B, w->T);
        snprintf(params, sizeof params, "%.2f/%.2f", w->params_total / 1e6, w->params_active / 1e6);
        if (isnan(w->moe_over_dense))
            snprintf(vsd, sizeof vsd, "-");
        else
            snprintf(vsd, sizeof vsd, "%.2f", w->moe_over_dense);
        double calc = 4.0 * w->mem.total_words / MIB;
        double rss = gpu ? w->r.device_mib : w->r.peak_rss_kib / 1024.0;
        fprintf(out, "%-12s %7s %13s %9.1f %9.0f %8.1f %6.1f%% %6s %9.0f %9.0f %6.2f\n",
                w->ref->name, bt, params, 1e3 * w->r.step_median, w->tokens_per_s, w->gflops,
                100.0 * w->sgemm_frac, vsd, rss, calc, rss / calc);
    }
    fprintf(out,
            "\nGFLOP/s: model_flops_per_token x B x T / median step (the useful work of "
            "the forward and backward matrix products; src/model/model.c).\n%%sgemm: of the sgemm "
            "GFLOP/s measured in the same round. /dense: step time "
            "over the dense twin's. RSS: peak\nresident memory of the process; calc: "
            "analytical memory (memory.h); ratio: RSS / calc.\n");
    const double peak = datasheet_peak(gpu ? sg->gpu : NULL, o->precision);
    if (gpu) {
        fprintf(out,
                "On the GPU, %%cuBLAS is of the cuBLAS product above and GPU MiB what the backend "
                "allocated on it (cuBLAS's workspace aside); ratio: GPU MiB / calc.\n");
        if (peak > 0.0) {
            fprintf(out,
                    "MFU, of the datasheet's %s peak of %.0f TFLOP/s:", PRECISIONS[o->precision],
                    peak);
            for (int i = 0; i < n; i++)
                fprintf(out, " %s %.1f%%", rows[i].ref->name, rows[i].gflops / (10.0 * peak));
            fprintf(out, "\n");
        }
    }
    for (int i = 0; i < n; i++)
        if (!isnan(rows[i].over_fewer))
            fprintf(out,
                    "%s runs at %.2fx the tokens/s of %s: %d experts instead of %d, the same "
                    "active compute per token\n",
                    rows[i].ref->name, rows[i].over_fewer, rows[i].ref->fewer,
                    rows[i].c.num_experts, bench_find_ref(rows[i].ref->fewer)->num_experts);
    if (!o->profile) return;
    for (int i = 0; i < n; i++) text_profile(out, o, sg, &rows[i], gpu);
    fprintf(out,
            "\nGFLOP/s of an op: the model FLOPs it runs (model_flops_by_op: attn_proj, attention, "
            "dense_ffn,\nrouter, experts, head) over its time, the elementwise work it does "
            "between its products included\n(the experts' SwiGLU, attention's softmax). all "
            "products: those ops together, every model FLOP\nover their time alone: the step, "
            "which also runs the others, cannot reach a higher share of the %s.\n",
            gpu ? "cuBLAS product" : "sgemm");
}

void bench_write_profile_csv(FILE *f, const Row *rows, int n) {
    fprintf(f, "config,op,fwd_ms,bwd_ms,total_ms,percent\n");
    for (int i = 0; i < n; i++) {
        OpLine ln[PROF_COUNT + 1];
        int nl = op_lines(ln, &rows[i]);
        for (int j = 0; j < nl; j++)
            fprintf(f, "%s,%s,%.4f,%.4f,%.4f,%.3f\n", rows[i].ref->name, ln[j].op, ln[j].fwd,
                    ln[j].bwd, ln[j].total, 100.0 * ln[j].total / (1e3 * rows[i].r.step_mean));
    }
}
