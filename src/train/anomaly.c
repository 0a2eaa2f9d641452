/* anomaly.c — training-anomaly detectors and policies (see anomaly.h). Pure functions on a small
 * state struct: no MPI, no allocation, so the unit test drives them with synthetic series. */
#include "train/anomaly.h"
#include <math.h>
#include <string.h>

void anom_init(anom_state_t *s, const anom_config_t *c) {
    memset(s, 0, sizeof *s);
    s->c = *c;
    if (s->c.window < 1) s->c.window = 1;
    if (s->c.window > ANOM_WINDOW_MAX) s->c.window = ANOM_WINDOW_MAX;
}

anom_config_t anom_config_from(const config_t *cfg) {
    anom_config_t c = {cfg->anomaly_window, cfg->spike_zscore, cfg->grad_explosion_ratio,
                       cfg->divergence_evals, cfg->overflow_streak};
    return c;
}

/* The median of x[0..n) (insertion sort of a copy: at most ANOM_WINDOW_MAX values). */
static double median_of(const double *x, int n) {
    double v[ANOM_WINDOW_MAX];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && v[j - 1] > x[i]; j--) v[j] = v[j - 1];
        v[j] = x[i];
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int ring_count(int64_t seen, int window) { return seen < window ? (int)seen : window; }

/* The median of the window's losses and the robust scale of the spike score (anomaly.h). */
static double loss_median(const anom_state_t *s) { return median_of(s->losses, ring_count(s->n_loss, s->c.window)); }

static double loss_scale(const anom_state_t *s, double med) {
    const int n = ring_count(s->n_loss, s->c.window);
    double dev[ANOM_WINDOW_MAX];
    for (int i = 0; i < n; i++) dev[i] = fabs(s->losses[i] - med);
    double scale = 1.4826 * median_of(dev, n);
    if (sqrt(s->loss_var) > scale) scale = sqrt(s->loss_var);
    if (ANOM_SIGMA_FLOOR * fabs(med) > scale) scale = ANOM_SIGMA_FLOOR * fabs(med);
    return scale > 0 ? scale : 1e-30; /* a median of exactly 0: any rise is a spike */
}

double anom_loss_zscore(const anom_state_t *s, double loss) {
    if (s->n_loss < s->c.window) return NAN;
    const double med = loss_median(s);
    return (loss - med) / loss_scale(s, med);
}

static double norm_median(const anom_state_t *s) { return median_of(s->norms, ring_count(s->n_norms, s->c.window)); }

double anom_norm_ratio(const anom_state_t *s, double norm) {
    if (s->n_norms < s->c.window || !isfinite(norm)) return NAN;
    const double med = norm_median(s);
    return med > 0 ? norm / med : (norm > 0 ? INFINITY : 0.0);
}

static anom_verdict_t verdict(anom_detector_t d, double value, double threshold, double reference) {
    anom_verdict_t v = {d, value, threshold, reference};
    return v;
}

anom_verdict_t anom_check_step(const anom_state_t *s, const anom_step_in_t *in) {
    if (!isfinite(in->loss)) return verdict(ANOM_NONFINITE, in->loss, 0, 0);
    if (!in->overflow && !isfinite(in->norm)) return verdict(ANOM_NONFINITE, in->norm, 0, 0);
    if (in->overflow && in->at_floor) return verdict(ANOM_LOSS_SCALE, s->overflows_in_row + 1, 0, 0);
    if (in->overflow && s->c.overflow_streak > 0 && s->overflows_in_row + 1 >= s->c.overflow_streak)
        return verdict(ANOM_LOSS_SCALE, s->overflows_in_row + 1, s->c.overflow_streak, 0);
    const double z = anom_loss_zscore(s, in->loss);
    if (s->c.spike_zscore > 0 && z > s->c.spike_zscore)
        return verdict(ANOM_SPIKE, z, s->c.spike_zscore, loss_median(s));
    const double ratio = anom_norm_ratio(s, in->norm);
    if (s->c.grad_ratio > 0 && ratio > s->c.grad_ratio)
        return verdict(ANOM_GRAD_EXPLOSION, ratio, s->c.grad_ratio, norm_median(s));
    return verdict(ANOM_NONE, 0, 0, 0);
}

/* West's incremental exponentially weighted mean and variance. */
static void fold_loss(anom_state_t *s, double x) {
    s->losses[s->next_loss] = x;
    s->next_loss = (s->next_loss + 1) % s->c.window;
    if (s->n_loss++ == 0) {
        s->loss_mean = x;
        s->loss_var = 0.0;
        return;
    }
    const double alpha = 2.0 / (s->c.window + 1.0), d = x - s->loss_mean;
    s->loss_mean += alpha * d;
    s->loss_var = (1.0 - alpha) * (s->loss_var + alpha * d * d);
}

static void fold_norm(anom_state_t *s, double x) {
    s->norms[s->next_norm] = x;
    s->next_norm = (s->next_norm + 1) % s->c.window;
    if (s->n_norms < s->c.window) s->n_norms++;
}

void anom_observe_step(anom_state_t *s, const anom_step_in_t *in, bool anomalous) {
    s->overflows_in_row = in->overflow ? s->overflows_in_row + 1 : 0;
    if (anomalous) return;
    if (isfinite(in->loss)) fold_loss(s, in->loss);
    if (!in->overflow && isfinite(in->norm)) fold_norm(s, in->norm);
}

anom_verdict_t anom_observe_val(anom_state_t *s, double val_loss) {
    if (!isfinite(val_loss)) return verdict(ANOM_NONFINITE, val_loss, 0, 0);
    s->rises = s->n_val > 0 && val_loss > s->last_val ? s->rises + 1 : 0;
    s->last_val = val_loss;
    s->n_val++;
    if (s->c.divergence_evals > 0 && s->rises >= s->c.divergence_evals)
        return verdict(ANOM_DIVERGENCE, s->rises, s->c.divergence_evals, s->last_val);
    return verdict(ANOM_NONE, 0, 0, 0);
}

const char *anom_detector_name(anom_detector_t d) {
    static const char *const names[ANOM_DETECTORS] = {"none", "nonfinite", "loss_scale", "spike",
                                                      "grad_explosion", "divergence"};
    return d >= 0 && d < ANOM_DETECTORS ? names[d] : "?";
}

const char *anom_action_name(anom_action_t a) {
    static const char *const names[] = {"warn", "skip", "rollback", "abort"};
    return names[a];
}

static anom_action_t action_of(cfg_policy_t p) {
    switch (p) {
    case CFG_POLICY_WARN: return ANOM_WARN;
    case CFG_POLICY_ROLLBACK: return ANOM_ROLLBACK;
    case CFG_POLICY_ABORT: return ANOM_ABORT;
    case CFG_POLICY_SKIP: case CFG_POLICY_INHERIT: break;
    }
    return ANOM_SKIP;
}

anom_action_t anom_action_for(const config_t *cfg, anom_detector_t d) {
    const cfg_policy_t own = d == ANOM_SPIKE || d == ANOM_GRAD_EXPLOSION ? cfg->choice.on_spike
                             : d == ANOM_DIVERGENCE ? cfg->choice.on_divergence
                                                    : CFG_POLICY_INHERIT;
    return action_of(own != CFG_POLICY_INHERIT ? own : cfg->choice.on_anomaly);
}
