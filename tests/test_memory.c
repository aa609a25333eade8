/*
 * test_memory.c: the table of activations and scratch (acts.h), its arena, and the analytical
 * memory formula (memory.c) that sums it.
 *
 *   - for dense, all-MoE and mixed models (first_dense, every; a tied head) and several B x T,
 *     model_init allocates from its backend exactly the four parameter-shaped buffers, the
 *     arena of its table and the ops' workspace (Model.state.work_bytes): 4 * total_words +
 *     pad_bytes of the formula plus the workspace, so no buffer is allocated outside the table;
 *   - the same for one process of dist.tp = 2 (x dist.ep = 2 with experts): its shares of the
 *     weights, its rows and heads of the activations, tensor parallelism's scratch;
 *   - the arena: every entry starts at a multiple of ACTS_ALIGN, after the end of the one
 *     before, with less than ACTS_ALIGN bytes of padding between them and at the end (the
 *     entries do not overlap and cover it), each field points at its entry, names are unique,
 *     integers are counted as integer words, and the table of the formula (built with no
 *     model) is entry for entry the model's;
 *   - every pointer of BlockActs, MoeActs, MoeScratch and the Model's activations and scratch,
 *     listed here by hand, is set where the config needs the buffer and NULL otherwise, and
 *     each one set is exactly one entry of the table (a buffer forgotten in the table, or an
 *     entry no field uses, fails);
 *   - the formula's categories for a dense and an MoE model match a count done by hand;
 *   - a block's own arena (moe_acts_alloc, with an expert exchange of two members) holds the
 *     expert exchange's buffers, counted by hand;
 *   - the breakdown is consistent: parameters equal the parameter table's count (with a tied
 *     head, the untied model's less the head's V C), gradients P, moments 2P, the fields add
 *     up to the total;
 *   - the integer words of one small MoE model match a count done by hand, for token choice and for
 * expert choice (every (token, expert) pair a candidate, E * cap slots) and for a padded capacity
 * plan (E * cap slot rows);
 *   - under dist.zero over 4 processes in expert-parallel pairs, the moments of the four ranks'
 *     shards add up to one copy of the parameters, the gradient and weights as each stage holds
 *     them, the largest process the last rank's;
 *   - the CPU backends' blocks are zeroed and writable, and one of 2 MiB or more starts on a
 *     2 MiB boundary (offered for transparent huge pages).
 */
#include <stdint.h>
#include <string.h>

#include "base/util.h"
#include "model/acts.h"
#include "model/ep.h"
#include "model/memory.h"
#include "model/model.h"
#include "moe/moe_ops.h"
#include "testutil.h"

typedef struct {
    const char *what;
    int num_experts, top_k, d_expert, first_dense, every, B, T;
    float jitter;   /* moe.jitter (and moe.noise) > 0 keep the router's jittered input, factors and
                       noise */
    int num_shared; /* shared experts: one more SwiGLU per MoE block */
    int routing;    /* MOE_ROUTING_*: expert choice sizes idx, w, the plan by E, slots by cap */
    float ec_capacity;
    /* token-choice capacity (0: dropless); padded plans may hold more rows than N K */
    float capacity_factor;
    int padded, cap_scope;
    float eval_capacity_factor; /* 0 here: leave the default (-1, the training factor) */
    int tied;                   /* model.tied: no head tensor */
    int mtp_depth;              /* model.mtp_depth: a block, inputs and a head's rows a module */
} Shape;

static Config shape_config(const Shape *s) {
    Config c;
    config_defaults(&c);
    c.d_model = 16;
    c.n_layer = 4;
    c.n_head = 2;
    c.d_ff = 24;
    c.seq_len = s->T;
    c.num_experts = s->num_experts;
    c.top_k = s->top_k;
    c.d_expert = s->d_expert;
    c.first_dense = s->first_dense;
    c.every = s->every;
    c.jitter = s->jitter;
    c.noise = s->jitter; /* the jitter shape draws logit noise too: its (N, E) buffer */
    c.num_shared = s->num_shared;
    c.routing = s->routing;
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        c.balance = MOE_BALANCE_NONE;
        c.ec_capacity = s->ec_capacity;
    }
    c.capacity_factor = s->capacity_factor;
    c.padded = s->padded;
    c.capacity_scope = s->cap_scope;
    if (s->eval_capacity_factor > 0.0f) c.eval_capacity_factor = s->eval_capacity_factor;
    c.tied = s->tied;
    c.mtp_depth = s->mtp_depth;
    return c;
}

/* the capacity fields of a dropless shape, an untied head and no multi-token prediction */
#define DROPLESS 0.0f, 0, MOE_CAP_BATCH, 0.0f, 0, 0

static const Shape SHAPES[] = {
    {"dense", 0, 2, 0, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"all MoE", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"all MoE, top-1, d_expert 0 (= d_ff)", 4, 1, 0, 0, 1, 3, 5, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE,
     0.0f, DROPLESS},
    {"first_dense 1", 4, 2, 12, 1, 1, 1, 7, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"every 2 after 1 dense", 8, 3, 10, 1, 2, 2, 6, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f,
     DROPLESS},
    {"MoE only above 3 dense", 2, 2, 8, 3, 1, 4, 3, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f,
     DROPLESS},
    {"router jitter", 4, 2, 12, 1, 1, 2, 8, 0.1f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"two shared experts", 4, 2, 12, 1, 1, 2, 8, 0.0f, 2, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"expert choice", 4, 2, 12, 1, 1, 2, 8, 0.0f, 0, MOE_ROUTING_EXPERT_CHOICE, 1.0f, DROPLESS},
    {"expert choice, capacity 1.5, top-1", 8, 1, 10, 0, 2, 3, 5, 0.0f, 1, MOE_ROUTING_EXPERT_CHOICE,
     1.5f, DROPLESS},
    /* cap = 16 per expert: E cap = 64 padded rows for N K = 32 assignments */
    {"padded capacity 2", 4, 2, 12, 1, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, 2.0f, 1,
     MOE_CAP_BATCH, 0.0f, 0, 0},
    /* training: 2 sequences x cap 4 (min_capacity) = N K; evaluation at 3: 2 x 8 per expert */
    {"padded per sequence, eval factor 3", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE,
     0.0f, 0.5f, 1, MOE_CAP_SEQUENCE, 3.0f, 0, 0},
    {"capacity 1.25 unpadded", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, 1.25f,
     0, MOE_CAP_BATCH, 0.0f, 0, 0},
    {"tied head", 4, 2, 12, 1, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, 0.0f, 0,
     MOE_CAP_BATCH, 0.0f, 1, 0},
    /* multi-token prediction: modules of the last layer's kind (MoE, with its losses' place in
     * the workspace; dense), each with its inputs and the head's rows of its positions */
    {"two MoE modules, a shared expert", 4, 2, 12, 1, 1, 2, 8, 0.0f, 1, MOE_ROUTING_TOKEN_CHOICE,
     0.0f, 0.0f, 0, MOE_CAP_BATCH, 0.0f, 0, 2},
    {"dense, one module, tied head", 0, 2, 0, 0, 1, 3, 5, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f,
     0.0f, 0, MOE_CAP_BATCH, 0.0f, 1, 1},
};

START_TEST(test_formula_matches_allocation) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    size_t before = backend_bytes_allocated;
    Model m;
    model_init(&m, &c, s->B, s->T);
    size_t allocated = backend_bytes_allocated - before - m.state.work_bytes;
    size_t arena = m.state.acts.bytes;
    model_free(&m);
    MemoryBreakdown mb;
    size_t formula = model_memory_floats(&c, s->B, s->T, &mb);
    ck_assert_msg(4 * mb.total_words + mb.pad_bytes == allocated,
                  "%s: the formula gives %zu bytes, model_init allocated %zu (difference %ld): "
                  "a buffer allocated outside the table of acts.c",
                  s->what, 4 * mb.total_words + mb.pad_bytes, allocated,
                  (long)allocated - (long)(4 * mb.total_words + mb.pad_bytes));
    /* the arena is the rest: everything but the parameters, gradients and moments */
    ck_assert_uint_eq(allocated - 4 * 4 * mb.params, arena);
    ck_assert_uint_eq(model_memory_floats(&c, s->B, s->T, NULL), formula);
}
END_TEST

/* Under tensor parallelism (dist.tp = 2, with dist.ep = 2 where there are experts): one process
 * of the grid allocates what the formula of that process gives (its shares of the heads and
 * hidden channels, its rows of the stream, tp.h's scratch), less than one process of tp = 1. */
START_TEST(test_formula_under_tensor_parallelism) {
    const Shape *s = &SHAPES[_i];
    if (s->mtp_depth > 0) return; /* not split over dist.tp (config_check_dist refuses it) */
    Config c = shape_config(s);
    c.tp = 2;
    c.ep = s->num_experts > 0 ? 2 : 1;
    Dist d;
    memset(&d, 0, sizeof d);
    char err[256];
    ck_assert_int_eq(dist_grid_set(&d, 2 * c.ep, 1, (DistAxes){.tp = c.tp, .ep = c.ep, .pp = 1},
                                   err, sizeof err),
                     0);
    size_t before = backend_bytes_allocated;
    Model m;
    model_init_dist(&m, &c, s->B, s->T, &d);
    size_t allocated = backend_bytes_allocated - before - m.state.work_bytes;
    model_free(&m);
    MemoryBreakdown mb, one;
    model_memory_process(&c, s->B, s->T, c.ep, 2 * c.ep, &mb);
    ck_assert_msg(4 * mb.total_words + mb.pad_bytes == allocated,
                  "%s at dist.tp=2: the formula gives %zu bytes, model_init_dist allocated %zu",
                  s->what, 4 * mb.total_words + mb.pad_bytes, allocated);
    c.tp = 1;
    model_memory_process(&c, s->B, s->T, c.ep, 2 * c.ep, &one);
    ck_assert_msg(mb.params < one.params && mb.acts_attn < one.acts_attn,
                  "%s: dist.tp=2 holds %zu parameters and %zu attention floats, tp 1 %zu and %zu",
                  s->what, mb.params, mb.acts_attn, one.params, one.acts_attn);
}
END_TEST

START_TEST(test_arena_layout) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    Model m;
    model_init(&m, &c, s->B, s->T);
    const ActTable *t = &m.state.acts;
    ck_assert_int_gt(t->n, 0);
    size_t end = 0, bytes = 0;
    for (int i = 0; i < t->n; i++) {
        const ActEntry *e = &t->e[i];
        ck_assert_msg(e->offset % ACTS_ALIGN == 0, "%s: %s at %zu", s->what, e->name, e->offset);
        ck_assert_msg(e->offset >= end, "%s: %s overlaps the entry before", s->what, e->name);
        ck_assert_msg(e->offset - end < ACTS_ALIGN, "%s: a gap before %s", s->what, e->name);
        end = e->offset + acts_entry_bytes(e);
        bytes += acts_entry_bytes(e);
        void *p;
        memcpy(&p, e->field, sizeof p);
        ck_assert_msg(p == (char *)m.state.arena + e->offset, "%s: %s does not point at its entry",
                      s->what, e->name);
        ck_assert_msg((e->type == ACT_INT) == (e->kind == ACT_INT_WORDS), "%s: %s", s->what,
                      e->name);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(t->e[j].name, e->name) != 0, "%s: %s twice", s->what, e->name);
    }
    ck_assert_uint_ge(t->bytes, end);
    ck_assert_uint_lt(t->bytes - end, ACTS_ALIGN);
    MemoryBreakdown mb;
    model_memory_floats(&c, s->B, s->T, &mb);
    ck_assert_uint_eq(mb.pad_bytes, t->bytes - bytes);

    /* the formula's table, built with no model, is the same list */
    ActTable u;
    acts_table_init(&u);
    model_acts_table(&u, &c, s->B, s->T, 1, NULL);
    acts_layout(&u);
    ck_assert_int_eq(u.n, t->n);
    for (int i = 0; i < t->n; i++) {
        ck_assert_str_eq(u.e[i].name, t->e[i].name);
        ck_assert_uint_eq(u.e[i].count, t->e[i].count);
        ck_assert_int_eq(u.e[i].type, t->e[i].type);
        ck_assert_int_eq(u.e[i].kind, t->e[i].kind);
        ck_assert_uint_eq(u.e[i].offset, t->e[i].offset);
        ck_assert_ptr_null(u.e[i].field);
    }
    ck_assert_uint_eq(u.bytes, t->bytes);
    acts_table_free(&u);
    model_free(&m);
}
END_TEST

/* The pointers a test expects, with whether each must be set. */
typedef struct {
    void *field[512];
    int n;
} Fields;

/* p: the address of a pointer field; want: whether the config needs its buffer */
static void expect_field(Fields *f, const char *what, const char *name, void *p, int want) {
    void *v;
    memcpy(&v, p, sizeof v);
    ck_assert_msg((v != NULL) == want, "%s: %s is %s", what, name, v ? "set" : "NULL");
    if (want) {
        ck_assert_int_lt(f->n, 512);
        f->field[f->n++] = p;
    }
}

#define FIELD(f, what, name, ptr, want) expect_field((f), (what), (name), (void *)&(ptr), (want))

START_TEST(test_every_pointer_is_an_entry) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    Model m;
    model_init(&m, &c, s->B, s->T);
    Fields f = {.n = 0};
    const char *w = s->what;
    int n_moe = 0;
    for (int l = 0; l < c.n_layer; l++) n_moe += config_is_moe_layer(&c, l);
    const int dense = n_moe<c.n_layer, shared = s->num_shared> 0;
    FIELD(&f, w, "inputs", m.state.inputs, 1);
    FIELD(&f, w, "targets", m.state.targets, 1);
    for (int l = 0; l <= c.n_layer; l++) FIELD(&f, w, "resid", m.state.resid[l], 1);
    /* the blocks, then the multi-token prediction modules' (of the last layer's kind) */
    for (int l = 0; l < c.n_layer + c.mtp_depth; l++) {
        BlockActs *a = &m.state.blocks[l];
        const int moe = config_is_moe_layer(&c, l);
        FIELD(&f, w, "ln1", a->ln1, 1);
        FIELD(&f, w, "rstd1", a->rstd1, 1);
        FIELD(&f, w, "q", a->q, 1);
        FIELD(&f, w, "k", a->k, 1);
        FIELD(&f, w, "v", a->v, 1);
        FIELD(&f, w, "att", a->att, 1);
        FIELD(&f, w, "atty", a->atty, 1);
        FIELD(&f, w, "resid_mid", a->resid_mid, 1);
        FIELD(&f, w, "ln2", a->ln2, 1);
        FIELD(&f, w, "rstd2", a->rstd2, 1);
        FIELD(&f, w, "fg", a->fg, !moe);
        FIELD(&f, w, "fu", a->fu, !moe);
        FIELD(&f, w, "fh", a->fh, !moe);
        FIELD(&f, w, "sg", a->sg, moe && shared);
        FIELD(&f, w, "su", a->su, moe && shared);
        FIELD(&f, w, "sh", a->sh, moe && shared);
        ck_assert_msg((a->moe != NULL) == moe, "%s: block %d", w, l);
        /* inside Model.router_bias, not an entry of its own */
        ck_assert_msg((a->router_bias != NULL) == (moe && l < c.n_layer),
                      "%s: block %d router_bias", w, l);
        if (!moe) continue;
        MoeActs *x = a->moe;
        ck_assert_ptr_null(x->arena); /* the model's arena holds its buffers */
        ck_assert_ptr_null(x->ep);
        FIELD(&f, w, "logits", x->logits, 1);
        FIELD(&f, w, "scores", x->scores, 1);
        FIELD(&f, w, "lse", x->lse, 1);
        FIELD(&f, w, "idx", x->idx, 1);
        FIELD(&f, w, "w", x->w, 1);
        FIELD(&f, w, "plan.counts", x->plan.counts, 1);
        FIELD(&f, w, "plan.offsets", x->plan.offsets, 1);
        FIELD(&f, w, "plan.slot", x->plan.slot, 1);
        FIELD(&f, w, "plan.slot_token", x->plan.slot_token, 1);
        FIELD(&f, w, "xe", x->xe, 1);
        FIELD(&f, w, "ye", x->ye, 1);
        FIELD(&f, w, "g", x->g, 1);
        FIELD(&f, w, "u", x->u, 1);
        FIELD(&f, w, "h", x->h, 1);
        FIELD(&f, w, "jit", x->jit, c.jitter > 0.0f);
        FIELD(&f, w, "xj", x->xj, c.jitter > 0.0f);
        FIELD(&f, w, "noise", x->noise, c.noise > 0.0f);
        FIELD(&f, w, "work", x->work, 1);
    }
    FIELD(&f, w, "router_bias", m.router_bias, n_moe > 0);
    FIELD(&f, w, "mtp_cat", m.state.mtp_cat, c.mtp_depth > 0);
    for (int k = 0; k < c.mtp_depth; k++) {
        MtpActs *x = &m.state.mtp[k];
        FIELD(&f, w, "mtp tok", x->tok, 1);
        FIELD(&f, w, "mtp rows", x->rows, 1);
        FIELD(&f, w, "mtp tgt", x->tgt, 1);
        FIELD(&f, w, "mtp hn", x->hn, 1);
        FIELD(&f, w, "mtp rstd_h", x->rstd_h, 1);
        FIELD(&f, w, "mtp emb", x->emb, 1);
        FIELD(&f, w, "mtp en", x->en, 1);
        FIELD(&f, w, "mtp rstd_e", x->rstd_e, 1);
        FIELD(&f, w, "mtp cat", x->cat, 1);
        FIELD(&f, w, "mtp in", x->in, 1);
        FIELD(&f, w, "mtp out", x->out, 1);
        FIELD(&f, w, "mtp hc", x->hc, 1);
        FIELD(&f, w, "mtp lnc", x->lnc, 1);
        FIELD(&f, w, "mtp rstdc", x->rstdc, 1);
        FIELD(&f, w, "mtp logits", x->logits, 1);
        FIELD(&f, w, "mtp losses", x->losses, 1);
    }
    FIELD(&f, w, "lnf", m.state.lnf, 1);
    FIELD(&f, w, "rstdf", m.state.rstdf, 1);
    FIELD(&f, w, "logits", m.state.logits, 1);
    FIELD(&f, w, "losses", m.state.losses, 1);
    FIELD(&f, w, "dresid", m.state.dresid, 1);
    FIELD(&f, w, "dmid", m.state.dmid, 1);
    FIELD(&f, w, "dln", m.state.dln, 1);
    FIELD(&f, w, "dtmp", m.state.dtmp, 1);
    FIELD(&f, w, "dq", m.state.dq, 1);
    FIELD(&f, w, "dk", m.state.dk, 1);
    FIELD(&f, w, "dv", m.state.dv, 1);
    FIELD(&f, w, "datty", m.state.datty, 1);
    FIELD(&f, w, "dfg", m.state.dfg, dense);
    FIELD(&f, w, "dfu", m.state.dfu, dense);
    FIELD(&f, w, "dfh", m.state.dfh, dense);
    FIELD(&f, w, "dlogits", m.state.dlogits, 1);
    FIELD(&f, w, "dmtp", m.state.dmtp, c.mtp_depth > 0);
    FIELD(&f, w, "dmtp_cat", m.state.dmtp_cat, c.mtp_depth > 0);
    FIELD(&f, w, "dsg", m.state.dsg, n_moe > 0 && shared);
    FIELD(&f, w, "dsu", m.state.dsu, n_moe > 0 && shared);
    FIELD(&f, w, "dsh", m.state.dsh, n_moe > 0 && shared);
    MoeScratch *r = &m.state.moe_scratch;
    FIELD(&f, w, "scratch dlogits", r->dlogits, n_moe > 0);
    FIELD(&f, w, "scratch dw", r->dw, n_moe > 0);
    FIELD(&f, w, "scratch dxe", r->dxe, n_moe > 0);
    FIELD(&f, w, "scratch dye", r->dye, n_moe > 0);
    FIELD(&f, w, "scratch dg", r->dg, n_moe > 0);
    FIELD(&f, w, "scratch du", r->du, n_moe > 0);
    FIELD(&f, w, "scratch dh", r->dh, n_moe > 0);
    FIELD(&f, w, "scratch dx_router", r->dx_router, n_moe > 0);
    ck_assert_ptr_null(r->arena);
    /* each pointer set is one entry (its field), and no entry is left over */
    for (int i = 0; i < f.n; i++) {
        int hits = 0;
        for (int j = 0; j < m.state.acts.n; j++) hits += m.state.acts.e[j].field == f.field[i];
        ck_assert_msg(hits == 1, "%s: pointer %d of the list is %d entries", w, i, hits);
    }
    ck_assert_int_eq(f.n, m.state.acts.n);
    model_free(&m);
}
END_TEST

START_TEST(test_formula_by_hand) {
    /* dense, L = 4, C = 16, H = 2, F = 24, B x T = 2 x 8, N = 16 */
    const size_t V = MOE_VOCAB, N = 16;
    Config c = shape_config(&SHAPES[0]);
    MemoryBreakdown mb;
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.acts_resid, 5 * N * 16);
    /* per block 7 N C + 2 N + B H T T = 1792 + 32 + 256 */
    ck_assert_uint_eq(mb.acts_attn, 4 * 2080);
    ck_assert_uint_eq(mb.acts_ffn, 4 * 3 * N * 24);
    ck_assert_uint_eq(mb.acts_head, N * 16 + 2 * N + N * V);
    ck_assert_uint_eq(mb.scratch, 8 * N * 16 + 3 * N * 24 + N * V);
    ck_assert_uint_eq(mb.int_words, 2 * N);

    /* all MoE, E = 4, K = 2, FE = 12: S = N K = 32 slots. Per block: logits, scores 2 N E =
     * 128, lse 16, w 32, xe, ye 2 S C = 1024, g, u, h 3 S FE = 1152, the aux-free bias E = 4,
     * and the routing scratch (moe_work_bytes, whole words) */
    c = shape_config(&SHAPES[1]);
    MoeSpec sp;
    moe_spec_from_config(&sp, &c, 8);
    const size_t work = (moe_work_bytes(&sp, 16) + 3) / 4;
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.acts_attn, 4 * 2080);
    ck_assert_uint_eq(mb.acts_ffn, 4 * (128 + 16 + 32 + 1024 + 1152 + 4 + work));
    /* 8 N C, N V, and MoeScratch: dlogits N E 64, dw 32, dxe, dye 1024, dg, du, dh 1152,
     * dx_router N C 256; no dense block, no dfg */
    ck_assert_uint_eq(mb.scratch, 8 * N * 16 + N * V + 64 + 32 + 1024 + 1152 + 256);

    /* two shared experts (Fs = 24) on the MoE blocks 1..3: 3 N Fs each in acts, once in
     * scratch */
    MemoryBreakdown no;
    Config c0 = shape_config(&SHAPES[7]);
    c0.num_shared = 0;
    c = shape_config(&SHAPES[7]);
    model_memory_floats(&c0, 2, 8, &no);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.acts_ffn - no.acts_ffn, 3 * 3 * N * 24);
    ck_assert_uint_eq(mb.scratch - no.scratch, 3 * N * 24);
}
END_TEST

START_TEST(test_block_arena_with_expert_exchange) {
    /* a block on its own (moe_acts_alloc) over an expert-parallel pair: its arena holds the
     * exchange's buffers too. E = 4, K = 2, C = 16, FE = 12, N = 16: S = 32 slots,
     * R = 2 S + 1 = 65 rows; perm R ints, eoff El + 1 = 3 ints, xr, xo, yo, yr 4 R C, g, u, h,
     * dg, du, dh 6 R FE */
    Config c = shape_config(&SHAPES[1]);
    MoeSpec sp;
    moe_spec_from_config(&sp, &c, 8);
    Dist d;
    memset(&d, 0, sizeof d);
    d.world = 2;
    d.ep = 2;
    d.dp = 1;
    ActTable one, two;
    acts_table_init(&one);
    acts_table_init(&two);
    moe_acts_entries(&one, "moe", &sp, 1, 16, NULL);
    moe_acts_entries(&two, "moe", &sp, 2, 16, NULL);
    ck_assert_int_eq(two.n, one.n + 12);
    size_t words = 0;
    for (int i = one.n; i < two.n; i++) words += acts_entry_bytes(&two.e[i]) / 4;
    ck_assert_uint_eq(words, 65 + 3 + 4 * 65 * 16 + 6 * 65 * 12);
    ck_assert_str_eq(two.e[one.n + 1].name, "moe.ep.eoff");
    ck_assert_str_eq(two.e[one.n + 2].name, "moe.ep.xr");

    size_t before = backend_bytes_allocated;
    MoeActs a;
    moe_acts_alloc(&backend_cpu, &a, &sp, &d, 16);
    ck_assert_uint_eq(backend_bytes_allocated - before, acts_layout(&two)); /* one allocation */
    ck_assert_ptr_nonnull(a.ep);
    ck_assert_ptr_null(a.ep->arena);
    const char *lo = (const char *)a.arena, *hi = lo + two.bytes;
    const void *ep_bufs[] = {a.ep->perm, a.ep->eoff_dev, a.ep->xr, a.ep->xo, a.ep->yo, a.ep->yr,
                             a.ep->g,    a.ep->u,        a.ep->h,  a.ep->dg, a.ep->du, a.ep->dh};
    for (size_t i = 0; i < sizeof ep_bufs / sizeof ep_bufs[0]; i++)
        ck_assert_msg(ep_bufs[i] && (const char *)ep_bufs[i] >= lo && (const char *)ep_bufs[i] < hi,
                      "expert exchange buffer %zu outside the block's arena", i);
    ck_assert_int_eq(a.ep->R_max, 64);
    moe_acts_free(&backend_cpu, &a);
    acts_table_free(&one);
    acts_table_free(&two);
}
END_TEST

START_TEST(test_breakdown_consistent) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    MemoryBreakdown mb;
    size_t total = model_memory_floats(&c, s->B, s->T, &mb);
    ParamTable pt;
    params_table_build(&pt, &c);
    ck_assert_uint_eq(mb.params, params_count_total(&pt));
    params_table_free(&pt);
    if (c.tied) {
        Config untied = c;
        untied.tied = 0;
        MemoryBreakdown u;
        model_memory_floats(&untied, s->B, s->T, &u);
        ck_assert_uint_eq(mb.params, u.params - (size_t)MOE_VOCAB * c.d_model);
        ck_assert_uint_eq(mb.acts_head, u.acts_head); /* the logits are computed all the same */
    }
    ck_assert_uint_eq(mb.grads, mb.params);
    ck_assert_uint_eq(mb.adam, 2 * mb.params);
    ck_assert_uint_eq(mb.floats, total);
    ck_assert_uint_eq(mb.params + mb.grads + mb.adam + mb.acts_resid + mb.acts_attn + mb.acts_ffn +
                          mb.acts_head + mb.scratch,
                      total);
    ck_assert_uint_eq(mb.total_words, total + mb.int_words);
    /* the residual stream: L + 1 boundaries of N x C; and each multi-token prediction module's
     * inputs: hn, emb, en, cat (two), in, out (N x C each) and two norms' 1 / rms (N each) */
    const size_t N = (size_t)s->B * s->T;
    ck_assert_uint_eq(mb.acts_resid, (size_t)(c.n_layer + 1) * N * c.d_model +
                                         (size_t)c.mtp_depth * (7 * N * c.d_model + 2 * N));
}
END_TEST

/* dist.zero over 4 processes in expert-parallel pairs, bucket by bucket or whole blocks: the
 * moments of the four ranks' shards add up to one copy of the one-process model's parameters
 * (every float in one shard of one member of its group, the two pairs' experts apart);
 * dist.zero=2 keeps that share of the whole gradient; dist.zero=3 holds the shards of the weights
 * and two windows; the largest process is the last rank; one process shards nothing. */
START_TEST(test_zero_shards) {
    const Shape *s = &SHAPES[1]; /* every block an MoE block of 4 experts */
    for (int mb = 0; mb < 2; mb++) {
        Config c = shape_config(s);
        c.bucket_mb = mb ? 25.0f : 0.0f;
        ParamTable full, mine;
        params_table_build(&full, &c);
        params_table_build_ep(&mine, &c, 2);
        const size_t P = params_count_total(&full), Pl = params_count_total(&mine);
        ck_assert_uint_lt(Pl, P); /* each pair holds half the experts */
        size_t sum = 0, largest = 0;
        for (int zero = 1; zero <= 3; zero++) {
            c.zero = zero;
            sum = largest = 0;
            for (int r = 0; r < 4; r++) {
                MemoryBreakdown m;
                model_memory_rank(&c, s->B, s->T, 2, 4, r, &m);
                const size_t S = m.adam / 2;
                sum += S;
                largest = S > largest ? S : largest;
                ck_assert_uint_eq(m.grads, Pl);
                ck_assert_uint_eq(m.grad_shard, zero >= 2 ? S : Pl);
                if (zero < 3) ck_assert_uint_eq(m.params, Pl);
                if (zero == 3) ck_assert(m.params > S && m.params < S + 2 * Pl);
            }
            ck_assert_uint_eq(sum, P);
            MemoryBreakdown last;
            model_memory_process(&c, s->B, s->T, 2, 4, &last);
            ck_assert_uint_eq(last.adam / 2, largest);
        }
        MemoryBreakdown one;
        model_memory_process(&c, s->B, s->T, 1, 1, &one);
        ck_assert_uint_eq(one.adam, 2 * P);
        ck_assert_uint_eq(one.params, P);
        params_table_free(&full);
        params_table_free(&mine);
    }
}
END_TEST

START_TEST(test_int_words_by_hand) {
    /* 4 blocks, MoE in blocks 1 and 3 (first_dense 1, every 2), E = 8, K = 3, N = 2 x 6 = 12:
     * inputs + targets 2 N = 24; per MoE block idx N K + 1 = 37, counts E = 8,
     * offsets E + 1 = 9, slot and slot_token 2 (N K + 1) = 74, i.e. 128; two blocks 256. */
    Config c = shape_config(&SHAPES[4]);
    MemoryBreakdown mb;
    model_memory_floats(&c, 2, 6, &mb);
    ck_assert_uint_eq(mb.int_words, 24 + 2 * 128);

    /* expert choice, E = 4, N = 2 x 8 = 16, MoE in blocks 1..3: idx N E + 1 = 65, counts 4,
     * offsets 5, slot and slot_token 2 (N E + 1) = 130, i.e. 204 per block */
    c = shape_config(&SHAPES[8]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16 + 3 * 204);

    /* padded capacity 2, E = 4, K = 2, N = 16, MoE in blocks 1..3: idx, counts, offsets and
     * slot as dropless (33 + 4 + 5 + 33), slot_token E cap + 1 = 65 rows, i.e. 140 per block */
    c = shape_config(&SHAPES[10]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16 + 3 * 140);

    /* a dense model holds only the token ids */
    c = shape_config(&SHAPES[0]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16);
}
END_TEST

START_TEST(test_attention_is_quadratic_in_T) {
    /* doubling T at a fixed number of tokens N halves B: every (N, .) term stays, and the
     * attention probabilities B H T^2 = N H T double; the difference is exactly that. */
    Config c = shape_config(&SHAPES[1]);
    MemoryBreakdown a, b;
    model_memory_floats(&c, 4, 4, &a);
    model_memory_floats(&c, 2, 8, &b);
    size_t N = 16, H = (size_t)c.n_head, L = (size_t)c.n_layer;
    ck_assert_uint_eq(b.acts_attn - a.acts_attn, L * N * H * (8 - 4));
    ck_assert_uint_eq(b.floats - a.floats, L * N * H * (8 - 4));
}
END_TEST

/* The CPU backends' memory: zeroed; a block of 2 MiB or more starts on a 2 MiB boundary (it
 * is offered for transparent huge pages, backend/cpu/cpu.c), a smaller one is an ordinary block */
START_TEST(test_host_blocks) {
    const size_t sizes[] = {100, (size_t)2 << 20, ((size_t)5 << 20) + 12};
    for (int i = 0; i < 3; i++) {
        unsigned char *p = backend_cpu.alloc(&backend_cpu, sizes[i]);
        size_t nonzero = 0;
        for (size_t j = 0; j < sizes[i]; j++) nonzero += p[j] != 0;
        ck_assert_msg(nonzero == 0, "%zu bytes: %zu not zero", sizes[i], nonzero);
        if (sizes[i] >= ((size_t)2 << 20))
            ck_assert_msg((uintptr_t)p % ((size_t)2 << 20) == 0, "%zu bytes at %p", sizes[i],
                          (void *)p);
        memset(p, 1, sizes[i]); /* the whole block is writable */
        backend_cpu.free(&backend_cpu, p);
    }
}
END_TEST

static Suite *memory_suite(void) {
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("formula");
    int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
    tcase_add_loop_test(tc, test_formula_matches_allocation, 0, n);
    tcase_add_loop_test(tc, test_formula_under_tensor_parallelism, 0, n);
    tcase_add_loop_test(tc, test_arena_layout, 0, n);
    tcase_add_loop_test(tc, test_every_pointer_is_an_entry, 0, n);
    tcase_add_test(tc, test_formula_by_hand);
    tcase_add_test(tc, test_block_arena_with_expert_exchange);
    tcase_add_loop_test(tc, test_breakdown_consistent, 0, n);
    tcase_add_test(tc, test_zero_shards);
    tcase_add_test(tc, test_int_words_by_hand);
    tcase_add_test(tc, test_attention_is_quadratic_in_T);
    tcase_add_test(tc, test_host_blocks);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(memory_suite)
