/*
 * doctor.c: the rules of `moe doctor` (doctor.h), one function per finding, each reading the
 * run's tables and writing its evidence when the run crosses a threshold of train/health.h.
 *
 * Three spans recur. The final window: the last TH_FINAL_WINDOW of the logged steps (at least
 * 10), whose means say in what state the run ended. The settling start: the first TH_SETTLE of
 * train.steps, while a fresh router finds its balance. A streak: consecutive steps after the
 * settling start on which a condition holds (an expert starving, a layer dropping), which says
 * for how long.
 */
#include "measure/doctor.h"
#include "measure/doctor_run.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- small helpers ------------------------------------------------------------------------------
 */

static void add(Finding *f, const char *fmt, ...) MOE_PRINTF(2, 3);
static void add(Finding *f, const char *fmt, ...) {
    size_t n = strlen(f->evidence);
    if (n + 2 >= sizeof f->evidence) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->evidence + n, sizeof f->evidence - n - 1, fmt, ap);
    va_end(ap);
    n = strlen(f->evidence);
    f->evidence[n] = '\n', f->evidence[n + 1] = '\0';
}

/* the report's finding `id`, opened (evidence empty) on first use */
static Finding *finding(DoctorReport *r, FindingId id) {
    for (int i = 0; i < r->n_found; i++)
        if (r->found[i].id == id) return &r->found[i];
    Finding *f = &r->found[r->n_found++];
    memset(f, 0, sizeof *f);
    f->id = id;
    return f;
}

static double tcol(const Run *run, int row, int col) {
    return col < 0 ? NAN : csv_at(&run->train, row, col);
}

/* router.csv's value of column `name` of MoE block b (its b-th layer) at row i of that block */
static int rcol(const Run *run, const char *name) {
    return csv_col(&run->router, name);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* mean of train.csv column col over the rows with from <= step <= to (finite values only) */
static double train_mean(const Run *run, int col, int from, int to) {
    double s = 0.0;
    int n = 0;
    for (int i = 0; i < run->train.n_row; i++) {
        const int step = (int)tcol(run, i, run->c_step);
        const double v = tcol(run, i, col);
        if (step < from || step > to || !isfinite(v)) continue;
        s += v, n++;
    }
    return n ? s / n : NAN;
}

/* ---- the rules ----------------------------------------------------------------------------------
 */

static void rule_divergence(DoctorReport *r, const Run *run) {
    const float cap = r->cfg.diverge_loss;
    for (int i = 0; i < run->train.n_row; i++) {
        const double loss = tcol(run, i, run->c_loss), g = tcol(run, i, run->c_grad);
        const int step = (int)tcol(run, i, run->c_step);
        const int bad_loss = isnan(loss) || isinf(loss) || (cap > 0.0f && loss > cap);
        if (!bad_loss && isfinite(g)) continue;
        Finding *f = finding(r, F_DIVERGENCE);
        if (bad_loss)
            add(f, "step %d: training loss %g (%s); the run ends there (exit status 3)", step, loss,
                isfinite(loss) ? "above train.diverge_loss" : "not a finite number");
        else
            add(f, "step %d: gradient norm %g, not a finite number (loss %.4f)", step, g, loss);
        const int from = step - 20 > 1 ? step - 20 : 1;
        const double before = train_mean(run, run->c_loss, from, step - 1);
        if (isfinite(before))
            add(f, "mean training loss over steps %d-%d, before it: %.4f", from, step - 1, before);
        return;
    }
}

/* A model that guesses every token uniformly has a loss of ln V nats (ln 256 = 5.545 for
 * bytes), and a fresh one starts there; a run whose final window is no lower never learned. (A loss
 * far above it, 1e23 at every step, is no damaged file: moe train can write it from weights with
 * enormous logits, so it is reported with the values seen, not refused.) */
static void rule_no_learning(DoctorReport *r, const Run *run) {
    const int n = run->train.n_row;
    if (r->last_step <= r->cfg.warmup) return; /* the learning rate has not reached its peak */
    const double uniform = log((double)r->cfg.vocab),
                 late = train_mean(run, run->c_loss, r->win_from, r->last_step);
    if (!(late >= uniform)) return;
    int low = 0;
    for (int i = 1; i < n; i++)
        if (tcol(run, i, run->c_loss) < tcol(run, low, run->c_loss)) low = i;
    Finding *f = finding(r, F_NO_LEARNING);
    add(f,
        "training loss %.4g (mean of steps %d-%d), at least ln %d = %.3f, the loss of a uniform "
        "guess over the %s, which a fresh model starts at",
        late, r->win_from, r->last_step, r->cfg.vocab, uniform,
        r->cfg.vocab == MOE_VOCAB ? "bytes" : "model.vocab ids");
    add(f,
        "its lowest: %.4g at step %d of %d logged (peak learning rate train.lr=%g after %d "
        "steps of warm-up)",
        tcol(run, low, run->c_loss), (int)tcol(run, low, run->c_step), n, (double)r->cfg.lr,
        r->cfg.warmup);
}

/* The spikes' stretches. After a loss spike at row i the loss may fall back at the next step
 * (an isolated spike: one bad batch, or one update too large) or stay up for several (a bad
 * stretch of data, or weights an update damaged). A stretch is row i and the rows after it
 * whose loss stays above half-way from the mean of the train.spike_window steps before it to
 * the spike: the half-way line, unlike train.csv's flags, does not widen with the spike it
 * follows, which is why the flags stop after a step or two of a long stretch. */
typedef struct {
    int n_flags;     /* rows loss_spike marks */
    int n_stretches; /* stretches of two steps or more */
    int first, last; /* the steps of the longest stretch */
    int len;         /* its rows (1: every spike isolated) */
    int to_end;      /* it lasts to the run's last step */
    int applied;     /* its rows whose update was applied (train.spike_action=skip) */
    double mean, peak, line;
} LossStretch;

static LossStretch loss_stretches(const DoctorReport *r, const Run *run) {
    LossStretch s = {0};
    const int w = r->cfg.spike_window > 0 ? r->cfg.spike_window : 20, n = run->train.n_row;
    for (int i = 0; run->c_lspike >= 0 && i < n; i++) {
        if (tcol(run, i, run->c_lspike) != 1.0) continue;
        s.n_flags++;
        const int step = (int)tcol(run, i, run->c_step);
        const double peak = tcol(run, i, run->c_loss),
                     mean = train_mean(run, run->c_loss, step - w, step - 1);
        if (!isfinite(mean) || !isfinite(peak)) continue; /* a divergence: its own finding */
        const double line = mean + 0.5 * (peak - mean);
        int j = i + 1;
        while (j < n && tcol(run, j, run->c_loss) > line) j++;
        if (j - i >= 2) s.n_stretches++;
        if (j - i > s.len) {
            s.len = j - i, s.first = step, s.last = (int)tcol(run, j - 1, run->c_step);
            s.to_end = j == n, s.mean = mean, s.peak = peak, s.line = line, s.applied = 0;
            for (int k = i; k < j && run->c_skipped >= 0; k++)
                s.applied += tcol(run, k, run->c_skipped) != 1.0;
        }
        for (int k = i + 1; k < j; k++) s.n_flags += tcol(run, k, run->c_lspike) == 1.0;
        i = j - 1; /* the flags inside a stretch are its own */
    }
    return s;
}

/* " train.spike_on=either" where the run's spike_on would leave loss spikes alone */
static const char *loss_spike_on(const DoctorReport *r) {
    return r->cfg.spike_on == MOE_SPIKE_ON_GRAD ? " with train.spike_on=either" : "";
}

/* Loss spikes: train.csv's loss_spike flags, TH_LOSS_SPIKES of them or one that the loss
 * stays up after; the fix names the remedy of what followed them. */
static void rule_loss_spikes(DoctorReport *r, const Run *run, const double *th) {
    const LossStretch s = loss_stretches(r, run);
    if (s.n_flags == 0 || (s.n_flags < th[TH_LOSS_SPIKES] && s.len < 2)) return;
    Finding *f = finding(r, F_LOSS_SPIKES);
    char steps[1024] = "";
    int shown = 0;
    for (int i = 0; i < run->train.n_row && shown < 8; i++) {
        if (tcol(run, i, run->c_lspike) != 1.0) continue;
        const size_t len = strlen(steps);
        snprintf(steps + len, sizeof steps - len, "%s%d (%.3g)", shown ? ", " : "",
                 (int)tcol(run, i, run->c_step), tcol(run, i, run->c_loss));
        shown++;
    }
    add(f,
        "%d loss spikes in %d steps (a value above the mean of the %d steps before it plus %g "
        "standard deviations); at steps %s%s",
        s.n_flags, run->train.n_row, r->cfg.spike_window, (double)r->cfg.spike_k, steps,
        s.n_flags > shown ? ", ..." : "");
    const int w = r->cfg.spike_window;
    if (s.len < 2) {
        add(f,
            "each was a single step: at the next step the loss was back under half-way from the "
            "mean of the %d steps before it to the spike",
            w);
        if (r->cfg.spike_action == MOE_SPIKE_NONE) {
            snprintf(f->fix, sizeof f->fix,
                     "train.spike_action=skip%s: the update of a spiking step is left out "
                     "(weights and AdamW's moments untouched); spikes that recur on clean data: "
                     "lower train.lr, keep train.clip at 1, moe.z_coef=1e-3",
                     loss_spike_on(r));
            f->settings = "train.spike_action train.spike_on train.lr train.clip moe.z_coef";
        }
        return;
    }
    add(f,
        "the loss stayed up after a spike %d time%s; the longest stretch: %d steps (%d-%d%s) "
        "above %.3g, half-way from the mean of the %d steps before step %d (%.3g) to its spike "
        "(%.3g)",
        s.n_stretches, s.n_stretches == 1 ? "" : "s", s.len, s.first, s.last,
        s.to_end ? ", the run's last" : "", s.line, w, s.first, s.mean, s.peak);
    if (r->cfg.spike_action == MOE_SPIKE_SKIP && s.applied)
        add(f,
            "train.spike_action=skip applied the updates of %d of those steps, which were no "
            "spikes against a window the spike had widened",
            s.applied);
    if (r->cfg.spike_action == MOE_SPIKE_ROLLBACK) return; /* rolled back: spike_actions */
    if (s.to_end)
        snprintf(f->fix, sizeof f->fix,
                 "train.spike_action=rollback%s: it returns to rollback.bin, before the spike, "
                 "and skips the batches that spiked and train.rollback_skip more; the loss "
                 "never came back down here, so look at the data from step %d and at train.lr",
                 loss_spike_on(r), s.first);
    else
        snprintf(f->fix, sizeof f->fix,
                 "train.spike_action=rollback%s: a stretch of bad data, which skip does not "
                 "cover (the steps after a spike are judged against a window the spike "
                 "widened, so they are no spikes); a rollback returns to rollback.bin, before "
                 "the spike, and skips the batches that spiked and train.rollback_skip more, "
                 "which must cover the stretch: at least %d here (the run's: %d)",
                 loss_spike_on(r), s.len - 1, r->cfg.rollback_skip);
    f->settings = "train.spike_action train.spike_on train.rollback_every train.rollback_skip";
}

/* 1 when the loss at row i or the row after it (the first to feel row i's update) lies above
 * the mean of the w rows before row i plus k standard deviations, the rule of train.csv's
 * loss_spike, or is marked so: the loss followed a gradient-norm spike at row i */
static int loss_followed(const Run *run, int i, int w, double k) {
    double sum = 0.0, sq = 0.0;
    int n = 0;
    for (int j = i - w > 0 ? i - w : 0; j < i; j++) {
        const double v = tcol(run, j, run->c_loss);
        if (isfinite(v)) sum += v, sq += v * v, n++;
    }
    if (n < 2) return 0;
    const double mean = sum / n, var = sq / n - mean * mean;
    const double line = mean + k * sqrt(var > 0.0 ? var : 0.0);
    for (int j = i; j <= i + 1 && j < run->train.n_row; j++)
        if (tcol(run, j, run->c_loss) > line || tcol(run, j, run->c_lspike) == 1.0) return 1;
    return 0;
}

/* Gradient-norm spikes, judged on train.csv's grad_norm itself rather than its grad_spike flags:
 * a healthy run's gradient norm falls to a low, steady level, where a step of 1.5 to 2 times
 * the usual is four of the window's small standard deviations, so a long healthy run collects
 * flags by the dozen (the demo's 600 steps: about ten, every one back to its level the next
 * step). A spike here is a norm above TH_GRAD_SPIKE_RATIO times the median of the
 * train.spike_window steps before it, which a noisy window does not widen; the steps up to the
 * settling start and the warm-up, where the norm falls from its start, are not judged; and the
 * warning is a rate, TH_GRAD_SPIKES per 100 steps judged, so a longer run is not held to more. */
static void rule_grad_spikes(DoctorReport *r, const Run *run, const double *th) {
    const int w = r->cfg.spike_window > 0 ? r->cfg.spike_window : 20;
    const int from = r->settle_to > r->cfg.warmup ? r->settle_to : r->cfg.warmup;
    double *window = (double *)calloc_check((size_t)w, sizeof(double));
    char steps[1024] = "";
    int n = 0, judged = 0, first = 0, last = 0, shown = 0, followed = 0;
    for (int i = w; i < run->train.n_row; i++) {
        const int step = (int)tcol(run, i, run->c_step);
        const double g = tcol(run, i, run->c_grad);
        if (step <= from || !isfinite(g)) continue;
        int k = 0;
        for (int j = i - w; j < i; j++)
            if (isfinite(tcol(run, j, run->c_grad))) window[k++] = tcol(run, j, run->c_grad);
        const double med = median(window, k);
        if (!(med > 0.0)) continue;
        if (!judged++) first = step;
        last = step;
        if (g <= th[TH_GRAD_SPIKE_RATIO] * med) continue;
        n++;
        followed += loss_followed(run, i, w, r->cfg.spike_k);
        if (shown < 8) {
            const size_t len = strlen(steps);
            snprintf(steps + len, sizeof steps - len, "%s%d (%.3g, %.1fx)", shown++ ? ", " : "",
                     step, g, g / med);
        }
    }
    free(window);
    const double per_100 = th[TH_GRAD_SPIKES] * (judged > 100 ? judged : 100) / 100.0;
    if (n == 0 || n < per_100) return;
    add(finding(r, F_GRAD_SPIKES),
        "%d gradient-norm spikes in %d steps judged (%d-%d, after the settling start and the "
        "warm-up): a norm above %g times the median of the %d steps before it; at steps %s%s",
        n, judged, first, last, th[TH_GRAD_SPIKE_RATIO], w, steps, n > shown ? ", ..." : "");
    add(finding(r, F_GRAD_SPIKES),
        "%.1f spikes per 100 steps judged: a warning from grad_spikes=%g per 100 (%.1f in these "
        "%d steps)",
        100.0 * n / (judged > 100 ? judged : 100), th[TH_GRAD_SPIKES], per_100, judged);
    if (followed) return;
    /* the loss unharmed: the gradient jumps, the clipped update does no visible harm */
    Finding *f = finding(r, F_GRAD_SPIKES);
    add(f,
        "the loss did not follow them: at each spike and the step after it, under the mean of "
        "the %d steps before plus %g standard deviations (train.spike_k)",
        w, (double)r->cfg.spike_k);
    snprintf(f->fix, sizeof f->fix,
             "the loss did not follow them, so no skip or rollback is called for "
             "(train.spike_on=loss keeps train.spike_action off them); calm the updates: lower "
             "train.lr; keep train.clip at 1 (an outlying gradient then weighs no more in "
             "AdamW's running means than one of norm 1); train.beta2 lower (0.9) or train.eps "
             "larger (1e-6), as AdamW's second moment lags a jump of the gradient, the more "
             "after a long stretch of small ones; model.norm=dssn");
    f->settings = "train.lr train.clip train.beta2 train.eps model.norm train.spike_on";
}

/* the values of step `step` as " (loss L, gradient norm G)" from table t, whose column 0 is
 * the rollback number k when k > 0 (rolled_back.csv); "" when t has no such row */
static void step_values(const CsvTable *t, int k, int c_step, int c_loss, int c_grad, int step,
                        char *out, size_t n) {
    out[0] = '\0';
    for (int i = 0; t->n_col && c_loss >= 0 && c_grad >= 0 && i < t->n_row; i++)
        if ((k <= 0 || csv_at(t, i, 0) == k) && csv_at(t, i, c_step) == step) {
            snprintf(out, n, " (loss %.4g, gradient norm %.3g)", csv_at(t, i, c_loss),
                     csv_at(t, i, c_grad));
            return;
        }
}

/* Is train.csv's row i a spike of what train.spike_on names, one train.spike_action acts on? */
static int acted_on(const DoctorReport *r, const Run *run, int i) {
    const int loss = run->c_lspike >= 0 && tcol(run, i, run->c_lspike) == 1.0,
              grad = run->c_gspike >= 0 && tcol(run, i, run->c_gspike) == 1.0;
    return (r->cfg.spike_on != MOE_SPIKE_ON_GRAD && loss) ||
           (r->cfg.spike_on != MOE_SPIKE_ON_LOSS && grad);
}

/* The rollbacks of rollbacks.csv, each with its spike's values from rolled_back.csv. */
static void add_rollbacks(Finding *f, const Run *run) {
    const CsvTable *rb = &run->rollbacks, *undone = &run->rolled_back;
    const int n_rb = rb->n_row;
    char values[128];
    add(f,
        "%d rollback%s (rollbacks.csv); train.csv holds the steps trained after each, and "
        "the %d step%s undone %s in rolled_back.csv, so its curve shows no such spike",
        n_rb, n_rb == 1 ? "" : "s", undone->n_row, undone->n_row == 1 ? "" : "s",
        undone->n_row == 1 ? "is" : "are");
    const int c_step = csv_col(undone, "step"), c_loss = csv_col(undone, "loss"),
              c_grad = csv_col(undone, "grad_norm");
    for (int k = 0; k < n_rb && k < 8; k++) {
        const int spike = (int)csv_at(rb, k, 1), to = (int)csv_at(rb, k, 2),
                  batches = (int)csv_at(rb, k, 4);
        char after[96] = "";
        if (k > 0) {
            const int back = (int)csv_at(rb, k - 1, 2);
            snprintf(after, sizeof after, ", %d step%s after rollback %d returned to step %d",
                     spike - back, spike - back == 1 ? "" : "s", k, back);
        }
        char undid[48];
        if (spike == to + 1)
            snprintf(undid, sizeof undid, "step %d's", spike);
        else
            snprintf(undid, sizeof undid, "steps %d-%d's", to + 1, spike);
        step_values(undone, k + 1, c_step, c_loss, c_grad, spike, values, sizeof values);
        add(f,
            "rollback %d: a spike at step %d%s%s; back to step %d, %d batches skipped (%s and "
            "%d more)",
            k + 1, spike, values, after, to, batches, undid, batches - (spike - to));
    }
    if (n_rb > 8) add(f, "and %d more rollbacks", n_rb - 8);
}

/* What train.spike_action did: the updates skipped (train.csv's column skipped) and the
 * rollbacks (rollbacks.csv, the undone rows in rolled_back.csv, out of train.csv, whose curve
 * therefore shows no spike), and a stop at train.max_rollbacks: a last row that is a spike
 * the run acted on but neither skipped nor rolled back. */
static void rule_spike_actions(DoctorReport *r, const Run *run) {
    const CsvTable *rb = &run->rollbacks;
    const int n = run->train.n_row, n_rb = rb->n_row;
    if (r->cfg.spike_action == MOE_SPIKE_NONE || run->c_skipped < 0) return;
    char steps[1024] = "", values[128];
    int skipped = 0;
    for (int i = 0; i < n; i++) {
        if (tcol(run, i, run->c_skipped) != 1.0) continue;
        if (skipped++ < 8) {
            const size_t len = strlen(steps);
            step_values(&run->train, 0, run->c_step, run->c_loss, run->c_grad,
                        (int)tcol(run, i, run->c_step), values, sizeof values);
            snprintf(steps + len, sizeof steps - len, "%s%d%s", skipped > 1 ? ", " : "",
                     (int)tcol(run, i, run->c_step), values);
        }
    }
    const int stop = r->cfg.spike_action == MOE_SPIKE_ROLLBACK && n > 0 &&
                     acted_on(r, run, n - 1) && tcol(run, n - 1, run->c_skipped) != 1.0;
    if (!skipped && !n_rb && !stop) return;
    Finding *f = finding(r, F_SPIKE_ACTIONS);
    if (r->cfg.spike_action == MOE_SPIKE_SKIP) f->settings = "train.spike_action train.spike_on";
    const char *on = r->cfg.spike_on == MOE_SPIKE_ON_LOSS   ? "loss"
                     : r->cfg.spike_on == MOE_SPIKE_ON_GRAD ? "grad"
                                                            : "either";
    if (skipped)
        add(f, "%d update%s skipped (train.csv's column skipped; train.spike_on=%s): at steps %s%s",
            skipped, skipped == 1 ? "" : "s", on, steps, skipped > 8 ? ", ..." : "");
    if (n_rb) add_rollbacks(f, run);
    if (!stop) return;
    const int last = (int)tcol(run, n - 1, run->c_step);
    step_values(&run->train, 0, run->c_step, run->c_loss, run->c_grad, last, values, sizeof values);
    if (n_rb < r->cfg.max_rollbacks) { /* killed between its rows and rollbacks.csv's */
        add(f,
            "step %d, train.csv's last, spiked%s and has no rollback in rollbacks.csv yet: the "
            "run was killed during the rollback (moe train --resume makes it again) or is "
            "making it now",
            last, values);
        return;
    }
    Finding *stopped = finding(r, F_ROLLBACK_LIMIT);
    add(stopped,
        "step %d spiked%s after %d rollback%s (train.max_rollbacks=%d): the run stopped there "
        "(exit status 3)",
        last, values, n_rb, n_rb == 1 ? "" : "s", r->cfg.max_rollbacks);
    if (n_rb) {
        const int to = (int)csv_at(rb, n_rb - 1, 2);
        add(stopped,
            "the spike came %d step%s after the last rollback returned to step %d and skipped "
            "%d batches (train.rollback_skip=%d after the undone steps')",
            last - to, last - to == 1 ? "" : "s", to, (int)csv_at(rb, n_rb - 1, 4),
            r->cfg.rollback_skip);
    }
}

static void rule_loss_rising(DoctorReport *r, const Run *run, const double *th, int w) {
    /* moving means of w steps after warm-up; the last against the lowest */
    const int n = run->train.n_row;
    double best = INFINITY, sum = 0.0;
    int best_end = -1, first = -1, count = 0;
    for (int i = 0; i < n; i++) {
        if (tcol(run, i, run->c_step) <= r->cfg.warmup) continue;
        if (first < 0) first = i;
        const double v = tcol(run, i, run->c_loss);
        if (!isfinite(v)) return; /* a divergence: its own finding */
        sum += v, count++;
        if (count > w) sum -= tcol(run, i - w, run->c_loss), count = w;
        if (count == w && sum / w < best) best = sum / w, best_end = i;
    }
    if (best_end < 0 || count < w || best_end == n - 1) return;
    const double last = sum / w;
    if (last - best < th[TH_LR_RISE]) return;
    Finding *f = finding(r, F_LOSS_RISING);
    add(f,
        "training loss (mean of %d steps): lowest %.4f at steps %d-%d, after warm-up (%d "
        "steps); %.4f at steps %d-%d, %.3f nats higher",
        w, best, (int)tcol(run, best_end - w + 1, run->c_step),
        (int)tcol(run, best_end, run->c_step), r->cfg.warmup, last,
        (int)tcol(run, n - w, run->c_step), (int)tcol(run, n - 1, run->c_step), last - best);
    add(f, "peak learning rate train.lr=%g", (double)r->cfg.lr);
}

/* the mean load of each expert of block b over the final window, into load[E]; rows used */
static int final_loads(const Run *run, int b, int from, double *load) {
    const int c_step = rcol(run, "step"), c_load = rcol(run, "load_0");
    int rows = 0;
    memset(load, 0, (size_t)run->E * sizeof(double));
    for (int i = 0; i < run->router.n_row; i++) {
        if ((i % run->n_moe) != b || csv_at(&run->router, i, c_step) < from) continue;
        for (int e = 0; e < run->E; e++) load[e] += csv_at(&run->router, i, c_load + e);
        rows++;
    }
    for (int e = 0; e < run->E && rows; e++) load[e] /= rows;
    return rows;
}

static double block_mean(const Run *run, int b, const char *col, int from) {
    const int c = rcol(run, col), c_step = rcol(run, "step");
    double s = 0.0;
    int n = 0;
    for (int i = b; c >= 0 && i < run->router.n_row; i += run->n_moe)
        if (csv_at(&run->router, i, c_step) >= from && isfinite(csv_at(&run->router, i, c)))
            s += csv_at(&run->router, i, c), n++;
    return n ? s / n : NAN;
}

static int block_layer(const Run *run, int b) {
    return (int)csv_at(&run->router, b, rcol(run, "layer"));
}

/* A collapsed block on the validation text (domains.csv): does every domain go to the busiest
 * experts (a collapse), or do some go elsewhere (that part of the imbalance follows the data's
 * domains)? */
static void collapse_domains(DoctorReport *r, const Run *run, int b, const int *order, int q,
                             const double *th) {
    const Domains *d = &run->dom;
    if (!d->step || !d->n_domains) return;
    char line[1024], apart[512] = "";
    int len = snprintf(line, sizeof line, "validation text at step %d: the busiest experts take",
                       d->step);
    int n_apart = 0;
    for (int k = 0; k < d->n_domains && len < (int)sizeof line - 64; k++) {
        double share = 0.0;
        for (int i = 0; i < q; i++)
            share += d->share[((size_t)b * MAX_DOMAINS + k) * run->E + order[i]];
        len += snprintf(line + len, sizeof line - (size_t)len, "%s %.0f %% of %s's", k ? "," : "",
                        100.0 * share, d->names[k]);
        if (share >= th[TH_COLLAPSE_SHARE]) continue;
        const size_t used = strlen(apart);
        snprintf(apart + used, sizeof apart - used, "%s%s", n_apart++ ? ", " : "", d->names[k]);
    }
    if (!n_apart)
        add(finding(r, F_ROUTER_COLLAPSE),
            "%s assignments: every domain is sent to them, a collapse rather than a "
            "specialisation",
            line);
    else if (2 * n_apart < d->n_domains)
        add(finding(r, F_ROUTER_COLLAPSE),
            "%s assignments: every domain is sent to them but %s, whose tokens go mostly to "
            "other experts",
            line, apart);
    else
        add(finding(r, F_ROUTER_COLLAPSE),
            "%s assignments: %s go elsewhere, so much of this imbalance follows the data's "
            "domains rather than a collapse",
            line, apart);
}

static void rule_collapse(DoctorReport *r, const Run *run, const double *th) {
    if (r->cfg.routing == MOE_ROUTING_EXPERT_CHOICE) return; /* balanced by construction */
    double load[MAX_E];
    int order[MAX_E];
    const int q = run->K > (run->E + 3) / 4 ? run->K : (run->E + 3) / 4; /* the busiest quarter */
    if (q >= run->E) return;
    for (int b = 0; b < run->n_moe; b++) {
        if (!final_loads(run, b, r->win_from, load)) continue;
        for (int e = 0; e < run->E; e++) order[e] = e;
        for (int i = 0; i < q; i++) /* partial selection sort: the q busiest first */
            for (int j = i + 1; j < run->E; j++)
                if (load[order[j]] > load[order[i]]) {
                    int t = order[i];
                    order[i] = order[j], order[j] = t;
                }
        double share = 0.0;
        for (int i = 0; i < q; i++) share += load[order[i]];
        if (share < th[TH_COLLAPSE_SHARE]) continue;
        char who[256] = "";
        for (int i = 0; i < q && i < 8; i++) {
            const size_t len = strlen(who);
            snprintf(who + len, sizeof who - len, "%s%d", i ? ", " : "", order[i]);
        }
        add(finding(r, F_ROUTER_COLLAPSE),
            "layer %d: experts %s take %.0f %% of the assignments over steps %d-%d (fair: %.0f "
            "%%); MaxVio %.2f, CV %.2f, router entropy %.2f nats (uniform: %.2f)",
            block_layer(run, b), who, 100.0 * share, r->win_from, r->last_step, 100.0 * q / run->E,
            block_mean(run, b, "maxvio", r->win_from), block_mean(run, b, "cv", r->win_from),
            block_mean(run, b, "entropy", r->win_from), log((double)run->E));
        collapse_domains(r, run, b, order, q, th);
    }
}

/* the longest streak of rows of block b, after the settling start, on which column c is below
 * (sign -1) or above (+1) level; its first and last step and the mean of the column over it */
static int streak(const DoctorReport *r, const Run *run, int b, int c, double level, int sign,
                  int *from, int *to, double *mean) {
    const int c_step = rcol(run, "step");
    int best = 0, cur = 0, start = 0;
    double sum = 0.0;
    for (int i = b; i < run->router.n_row; i += run->n_moe) {
        if (csv_at(&run->router, i, c_step) <= r->settle_to) continue;
        const double v = csv_at(&run->router, i, c);
        if (sign * (v - level) > 0.0) {
            if (!cur) start = i, sum = 0.0;
            cur++, sum += v;
            if (cur > best) {
                best = cur;
                *from = (int)csv_at(&run->router, start, c_step);
                *to = (int)csv_at(&run->router, i, c_step);
                *mean = sum / cur;
            }
        } else {
            cur = 0;
        }
    }
    return best;
}

static void rule_starving(DoctorReport *r, const Run *run, const double *th) {
    const int c_load = rcol(run, "load_0");
    const double level = th[TH_STARVE_SHARE] / run->E;
    int listed = 0, more = 0;
    for (int b = 0; b < run->n_moe; b++)
        for (int e = 0; e < run->E; e++) {
            int from = 0, to = 0;
            double mean = 0.0;
            const int n = streak(r, run, b, c_load + e, level, -1, &from, &to, &mean);
            if (n == 0 || n < th[TH_STARVE_STEPS]) continue;
            if (listed++ >= 12) {
                more++;
                continue;
            }
            add(finding(r, F_STARVING_EXPERTS),
                "layer %d expert %d: under %.2f %% of the assignments for %d steps (%d-%d), "
                "%.3f %% on average%s",
                block_layer(run, b), e, 100.0 * level, n, from, to, 100.0 * mean,
                mean == 0.0 ? ": dead, no token at all" : "");
        }
    if (more) add(finding(r, F_STARVING_EXPERTS), "and %d more experts", more);
}

static void rule_drops(DoctorReport *r, const Run *run, const double *th) {
    const int c = rcol(run, "drop_frac");
    int storms = 0;
    for (int b = 0; c >= 0 && b < run->n_moe; b++) {
        int from = 0, to = 0;
        double mean = 0.0;
        const int n = streak(r, run, b, c, th[TH_DROP_FRAC], +1, &from, &to, &mean);
        if (n == 0 || n < th[TH_DROP_STEPS]) continue;
        storms++;
        add(finding(r, F_DROP_STORM),
            "layer %d: dropped over %.0f %% of its assignments for %d steps (%d-%d), %.1f %% on "
            "average; %.1f %% over the final window (moe.capacity_factor=%g)",
            block_layer(run, b), 100.0 * th[TH_DROP_FRAC], n, from, to, 100.0 * mean,
            100.0 * block_mean(run, b, "drop_frac", r->win_from), (double)r->cfg.capacity_factor);
    }
    const int vc = csv_col(&run->val_router, "drop_frac");
    if (storms && vc >= 0 && run->val_router.n_row >= run->n_moe) {
        const int last = run->val_router.n_row - run->n_moe;
        double s = 0.0;
        for (int b = 0; b < run->n_moe; b++) s += csv_at(&run->val_router, last + b, vc);
        add(finding(r, F_DROP_STORM),
            "validation at step %.0f: %.1f %% dropped (mean of the layers)",
            csv_at(&run->val_router, last, 0), 100.0 * s / run->n_moe);
    }
}

static void rule_balance_dominates(DoctorReport *r, const Run *run, const double *th) {
    if ((r->cfg.balance != MOE_BALANCE_AUX && r->cfg.balance != MOE_BALANCE_SEQ_AUX) ||
        r->cfg.aux_coef <= 0.0f || run->c_aux < 0)
        return;
    const double aux = train_mean(run, run->c_aux, r->win_from, r->last_step);
    const double loss = train_mean(run, run->c_loss, r->win_from, r->last_step);
    const double term = r->cfg.aux_coef * run->n_moe * aux;
    if (!(term > th[TH_AUX_SHARE] * loss)) return;
    Finding *f = finding(r, F_BALANCE_DOMINATES);
    add(f,
        "over steps %d-%d the balance term moe.aux_coef x %d blocks x aux_loss = %g x %d x "
        "%.4f = %.3f, %.0f %% of the language-model loss %.4f",
        r->win_from, r->last_step, run->n_moe, (double)r->cfg.aux_coef, run->n_moe, aux, term,
        100.0 * term / loss, loss);
    double mv = 0.0;
    for (int b = 0; b < run->n_moe; b++) mv += block_mean(run, b, "maxvio", r->win_from);
    add(f, "MaxVio over the same steps: %.3f (mean of the layers)", mv / run->n_moe);
}

static void rule_logits(DoctorReport *r, const Run *run, const double *th) {
    const int c = rcol(run, "max_logit"), c_step = rcol(run, "step");
    if (c < 0 || !run->router.n_row) return;
    /* the run's first steps, as many as the final window */
    const int first = (int)csv_at(&run->router, 0, c_step);
    const int early_to = first + (r->last_step - r->win_from);
    if (early_to >= r->win_from) return; /* too short a run to see a trend */
    for (int b = 0; b < run->n_moe; b++) {
        double early = 0.0;
        int n = 0;
        for (int i = b; i < run->router.n_row; i += run->n_moe)
            if (csv_at(&run->router, i, c_step) <= early_to)
                early += csv_at(&run->router, i, c), n++;
        if (!n) continue;
        early /= n;
        const double late = block_mean(run, b, "max_logit", r->win_from);
        if (!(late > th[TH_LOGIT_MAX] && late > th[TH_LOGIT_GROWTH] * early)) continue;
        add(finding(r, F_LOGIT_GROWTH),
            "layer %d: largest |router logit| %.2f over steps %d-%d, %.1fx its %.2f over steps "
            "%d-%d (moe.z_coef=%g)",
            block_layer(run, b), late, r->win_from, r->last_step, late / early, early, first,
            early_to, (double)r->cfg.z_coef);
    }
}

static void rule_bias(DoctorReport *r, const Run *run, const double *th) {
    if (r->cfg.balance != MOE_BALANCE_AUX_FREE) return;
    const int c_load = rcol(run, "load_0"), c_bias = rcol(run, "bias_0"),
              c_step = rcol(run, "step");
    const int mid = r->last_step / 2;
    for (int b = 0; b < run->n_moe; b++) {
        double churn = 0.0, spread_mid = NAN, spread_end = NAN;
        int n = 0;
        for (int i = b; i < run->router.n_row; i += run->n_moe) {
            const double step = csv_at(&run->router, i, c_step);
            double lo = INFINITY, hi = -INFINITY;
            for (int e = 0; e < run->E; e++) {
                const double v = csv_at(&run->router, i, c_bias + e);
                lo = v < lo ? v : lo, hi = v > hi ? v : hi;
            }
            if (step <= mid) spread_mid = hi - lo;
            spread_end = hi - lo;
            if (step < r->win_from || i < run->n_moe) continue;
            double moved = 0.0;
            for (int e = 0; e < run->E; e++)
                moved += fabs(csv_at(&run->router, i, c_load + e) -
                              csv_at(&run->router, i - run->n_moe, c_load + e));
            churn += 0.5 * moved, n++;
        }
        if (n && churn / n > th[TH_LOAD_CHURN])
            add(finding(r, F_BIAS_OSCILLATION),
                "layer %d: %.0f %% of the load changes expert from one step to the next over steps "
                "%d-%d (moe.bias_rate=%g, moe.bias_update=%s); MaxVio %.2f",
                block_layer(run, b), 100.0 * churn / n, r->win_from, r->last_step,
                (double)r->cfg.bias_rate,
                r->cfg.bias_update == MOE_BIAS_SIGN ? "sign" : "proportional",
                block_mean(run, b, "maxvio", r->win_from));
        /* the sign rule moves each bias by bias_rate a step: a range widens by 2 rates at most */
        const double fastest = 2.0 * r->cfg.bias_rate * (r->last_step - mid);
        const double pace = fastest > 0.0 ? (spread_end - spread_mid) / fastest : 0.0;
        if (pace > th[TH_BIAS_DRIFT])
            add(finding(r, F_BIAS_DRIFT),
                "layer %d: the biases span %.3f at step %d, up from %.3f at step %d: widening at "
                "%.0f %% of the fastest the bias rule allows (2 x moe.bias_rate=%g a step)",
                block_layer(run, b), spread_end, r->last_step, spread_mid, mid, 100.0 * pace,
                (double)r->cfg.bias_rate);
    }
}

static void rule_overfitting(DoctorReport *r, const Run *run, const double *th) {
    int best = -1, last = -1;
    for (int i = 0; i < run->train.n_row; i++) {
        const double v = tcol(run, i, run->c_val);
        if (!isfinite(v)) continue;
        if (best < 0 || v < tcol(run, best, run->c_val)) best = i;
        last = i;
    }
    if (best < 0 || last == best) return;
    const double vb = tcol(run, best, run->c_val), vl = tcol(run, last, run->c_val);
    const int sb = (int)tcol(run, best, run->c_step), sl = (int)tcol(run, last, run->c_step);
    const double tb = train_mean(run, run->c_loss, sb - 9, sb),
                 tl = train_mean(run, run->c_loss, sl - 9, sl);
    if (vl - vb < th[TH_VAL_RISE] || !(tl < tb)) return; /* overfitting: train falls, val rises */
    Finding *f = finding(r, F_OVERFITTING);
    add(f, "validation loss %.4f at step %d, %.3f nats above its lowest %.4f at step %d", vl, sl,
        vl - vb, vb, sb);
    add(f,
        "training loss (10 steps) meanwhile fell from %.4f to %.4f: the gap grew from %.3f to "
        "%.3f nats",
        tb, tl, vb - tb, vl - tl);
}

/* provenance.txt: each segment's data lines; a change of shard between segments */
static void rule_provenance(DoctorReport *r, const Run *run, const double *th) {
    if (!run->prov) return;
    const char *keys[2] = {"data.train = ", "data.val = "};
    unsigned long long train_tokens = 0;
    for (int k = 0; k < 2; k++) {
        char first[512] = "", seg_at[32] = "0";
        const char *p = run->prov;
        while (p && *p) {
            const char *eol = strchr(p, '\n');
            const size_t len = eol ? (size_t)(eol - p) : strlen(p);
            if (strncmp(p, "resumed_at_step = ", 18) == 0)
                snprintf(seg_at, sizeof seg_at, "%.*s", (int)(len - 18), p + 18);
            if (strncmp(p, keys[k], strlen(keys[k])) == 0 && len < sizeof first) {
                char line[512];
                snprintf(line, sizeof line, "%.*s", (int)(len - strlen(keys[k])),
                         p + strlen(keys[k]));
                const char *t = strstr(line, " tokens=");
                if (k == 0 && t) train_tokens = strtoull(t + 8, NULL, 10);
                if (!first[0])
                    snprintf(first, sizeof first, "%s", line);
                else if (strcmp(first, line) != 0)
                    add(finding(r, F_DATA_CHANGED), "%.*s was %s; from step %s it is %s",
                        (int)strlen(keys[k]) - 3, keys[k], first, seg_at, line);
            }
            p = eol ? eol + 1 : NULL;
        }
    }
    if (!train_tokens) return;
    const double tokens = (double)r->last_step * r->cfg.accum * r->cfg.batch * r->cfg.seq_len;
    const double epochs = tokens / (double)train_tokens;
    if (epochs > th[TH_EPOCHS])
        add(finding(r, F_DATA_REPEATED),
            "%d steps x %d x %d x %d tokens = %.0f tokens trained from a shard of %llu: %.1f "
            "passes over the data",
            r->last_step, r->cfg.accum, r->cfg.batch, r->cfg.seq_len, tokens, train_tokens, epochs);
}

static void rule_ep(DoctorReport *r, const Run *run, const double *th) {
    const CsvTable *t = &run->dist;
    const int c_step = csv_col(t, "step"), c_layer = csv_col(t, "layer"),
              c_rank = csv_col(t, "rank");
    const int c_rows = csv_col(t, "rows_in"), c_comm = csv_col(t, "comm_s");
    if (c_step < 0 || c_layer < 0 || c_rank < 0 || c_rows < 0 || c_comm < 0) return;
    int world = 0;
    for (int i = 0; i < t->n_row; i++) {
        const double k = csv_at(t, i, c_rank);
        if (!(k >= 0.0 && k < 1024.0)) return; /* not a process of a run moe train wrote */
        if ((int)k + 1 > world) world = (int)k + 1;
    }
    if (world < 2) return;
    double rows[1024], comm[1024];
    for (int l = 0; l < r->cfg.n_layer; l++) {
        memset(rows, 0, sizeof rows);
        memset(comm, 0, sizeof comm);
        int n = 0;
        for (int i = 0; i < t->n_row; i++) {
            if (csv_at(t, i, c_layer) != l || !(csv_at(t, i, c_step) >= r->win_from)) continue;
            const int k = (int)csv_at(t, i, c_rank);
            rows[k] += csv_at(t, i, c_rows), comm[k] += csv_at(t, i, c_comm), n++;
        }
        if (!n) continue;
        double total = 0.0, top = 0.0;
        int busiest = 0;
        for (int k = 0; k < world; k++) {
            total += rows[k];
            if (rows[k] > top) top = rows[k], busiest = k;
        }
        const double ratio = total > 0.0 ? top / (total / world) : 1.0;
        if (ratio < th[TH_EP_IMBALANCE]) continue;
        double others = 0.0;
        for (int k = 0; k < world; k++) others += k == busiest ? 0.0 : comm[k];
        const int steps = n / world > 0 ? n / world : 1;
        add(finding(r, F_EP_IMBALANCE),
            "layer %d: process %d's experts computed %.2fx the mean rows of the %d processes over "
            "steps %d-%d; the others spent %.1f ms a step in the exchange, process %d %.1f ms",
            l, busiest, ratio, world, r->win_from, r->last_step, 1e3 * others / (world - 1) / steps,
            busiest, 1e3 * comm[busiest] / steps);
    }
}

static void rule_throughput(DoctorReport *r, const Run *run, const double *th, int w) {
    if (run->c_tok < 0 || run->train.n_row < 2 * w + 5) return;
    double *early = (double *)calloc_check((size_t)w, sizeof(double));
    double *late = (double *)calloc_check((size_t)w, sizeof(double));
    int ne = 0, nl = 0;
    for (int i = 5; i < run->train.n_row && ne < w; i++)
        if (isfinite(tcol(run, i, run->c_tok))) early[ne++] = tcol(run, i, run->c_tok);
    for (int i = run->train.n_row - w; i < run->train.n_row; i++)
        if (isfinite(tcol(run, i, run->c_tok))) late[nl++] = tcol(run, i, run->c_tok);
    const int s0 = (int)tcol(run, 5, run->c_step);
    const double e = median(early, ne), l = median(late, nl);
    free(early), free(late);
    if (!(l < th[TH_THROUGHPUT_DROP] * e)) return;
    add(finding(r, F_THROUGHPUT_DROP),
        "%.0f tokens/s (median) over steps %d-%d against %.0f over steps %d-%d: %.0f %% of the "
        "speed it started with",
        l, r->win_from, r->last_step, e, s0, s0 + w - 1, 100.0 * l / e);
}

int doctor_run(DoctorReport *r, const char *dir, const double th[TH_COUNT], char *err, int errlen) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    Run run;
    if (load_run(r, &run, dir, err, errlen) != 0) {
        run_free(&run);
        return -1;
    }
    const int n = run.train.n_row;
    r->final_loss = r->final_val = NAN;
    if (n > 0) {
        r->last_step = (int)tcol(&run, n - 1, run.c_step);
        r->final_loss = tcol(&run, n - 1, run.c_loss);
        for (int i = 0; i < n; i++)
            if (isfinite(tcol(&run, i, run.c_val))) r->final_val = tcol(&run, i, run.c_val);
    }
    int w = (int)ceil(th[TH_FINAL_WINDOW] * n);
    w = w < 10 ? 10 : w;
    w = w > n ? n : w;
    r->win_from = n ? (int)tcol(&run, n - w, run.c_step) : 0;
    const int settle = (int)ceil(th[TH_SETTLE] * r->cfg.steps);
    r->settle_to = settle > 0 ? settle : 0;

    rule_divergence(r, &run);
    rule_spike_actions(r, &run);
    if (n >= 10) {
        if (!doctor_has(r, "divergence")) rule_no_learning(r, &run); /* its own finding */
        if (run.router.n_row && run.n_moe) rule_collapse(r, &run, th);
        /* a run stopped at a spike (rollback_limit) rises by that step alone: judged before it */
        Run before = run;
        before.train.n_row -= doctor_has(r, "rollback_limit");
        rule_loss_rising(r, &before, th, w);
        rule_loss_spikes(r, &run, th);
        rule_grad_spikes(r, &run, th);
        if (run.router.n_row && run.n_moe) {
            rule_starving(r, &run, th);
            rule_drops(r, &run, th);
            rule_logits(r, &run, th);
            rule_bias(r, &run, th);
        }
        if (run.n_moe) rule_balance_dominates(r, &run, th);
        rule_overfitting(r, &run, th);
        rule_ep(r, &run, th);
        rule_throughput(r, &run, th, w);
    }
    rule_provenance(r, &run, th);
    int diverged = 0;
    for (int i = 0; i < r->n_found; i++) /* a stopped run's own finding says how to go on */
        diverged |= r->found[i].id == F_DIVERGENCE || r->found[i].id == F_ROLLBACK_LIMIT;
    if (!diverged && r->last_step < r->cfg.steps)
        add(finding(r, F_INCOMPLETE), "train.csv ends at step %d of train.steps=%d", r->last_step,
            r->cfg.steps);
    run_free(&run);
    /* the report in the order of the findings' table */
    for (int i = 1; i < r->n_found; i++)
        for (int j = i; j > 0 && r->found[j].id < r->found[j - 1].id; j--) {
            Finding t = r->found[j];
            r->found[j] = r->found[j - 1], r->found[j - 1] = t;
        }
    return 0;
}
